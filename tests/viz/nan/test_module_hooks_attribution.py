"""What a module's hooks compute is charged to that module, in NaN reports and module scopes.

PyTorch runs the global module hooks (ours) before a module's own, so a call
followed by global hooks alone would end before its forward hooks run (Note
[Where a module call ends] in ``autograd_viz/sources/pytorch/module_call_ends.py``).
The model is a small stand-in of a ConvNeXt stage (``stages.1.blocks.2``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

from autograd_viz.nan.report import Finding, NanReport
from autograd_viz.nan.watch import watch_nan
from autograd_viz.trace import GraphTaskInfo, NodeInfo
from autograd_viz.trace.recording import record

HOOKED = "stages.1.blocks.2"
BLOCK = "stages.1.blocks"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc(x).tanh()


class Stage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block() for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stages = nn.Sequential(Stage(), Stage())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(x).sum()


def _net() -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    return Net(), torch.randn(2, 4, requires_grad=True)


def _hooked(net: Net) -> nn.Module:
    module: nn.Module = net.get_submodule(HOOKED)
    return module


def _nan_of(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a NaN born in it: the log of a negative number."""
    return t + torch.log(-torch.ones_like(t))


def _report(setup: Callable[[Net], Any]) -> NanReport:
    net, x = _net()
    handle = setup(net)
    try:
        with watch_nan() as watch:
            net(x).backward()
    finally:
        if handle is not None:
            handle.remove()
    return watch.report


def _born(report: NanReport) -> list[Finding]:
    return [f for f in report.findings if f.born]


@pytest.mark.parametrize(
    "options", [{}, {"prepend": True, "with_kwargs": True, "always_call": True}], ids=str
)
def test_a_nan_made_in_a_forward_hook_is_the_hooked_modules(options: dict[str, bool]) -> None:
    def hook(module: nn.Module, *given: Any) -> Any:
        return _nan_of(given[-1])  # (args, output) or (args, kwargs, output)

    def setup(net: Net) -> Any:
        hooked = _hooked(net)
        hooked.register_forward_hook(lambda m, a, o: o * 1.0)  # one registered before it
        return hooked.register_forward_hook(hook, **options)

    (born,) = _born(_report(setup))
    assert (born.phase, born.aten_op, born.module) == ("forward", "aten.log.default", HOOKED)


def test_a_nan_made_in_a_forward_pre_hook_is_the_hooked_modules() -> None:
    report = _report(
        lambda net: _hooked(net).register_forward_pre_hook(lambda m, a: (_nan_of(a[0]),))
    )
    (born,) = _born(report)
    assert (born.phase, born.module) == ("forward", HOOKED)


def test_a_nan_made_in_a_full_backward_hook_is_the_hooked_modules() -> None:
    def hook(m: nn.Module, grad_input: Any, grad_output: Any) -> Any:
        return (grad_input[0] * float("nan"),)

    (born,) = _born(_report(lambda net: _hooked(net).register_full_backward_hook(hook)))
    assert (born.phase, born.node.name, born.module) == (
        "backward",
        "BackwardHookFunctionBackward",
        HOOKED,
    )


def test_a_nan_made_in_a_backward_pre_hook_is_the_hooked_modules() -> None:
    def hook(m: nn.Module, grad_output: Any) -> Any:
        return (grad_output[0] * float("nan"),)

    (born,) = _born(_report(lambda net: _hooked(net).register_full_backward_pre_hook(hook)))
    assert (born.phase, born.node.name, born.module) == (
        "backward",
        "BackwardHookFunctionBackward",
        HOOKED,
    )


@pytest.mark.parametrize("when", ["before watching", "while watching"])
def test_a_users_global_forward_hook_is_charged_to_the_module_it_runs_for(when: str) -> None:
    net, x = _net()
    hooked = _hooked(net)

    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        return _nan_of(output) if module is hooked else None

    global_hooks = torch.nn.modules.module
    handle = global_hooks.register_module_forward_hook(hook) if when == "before watching" else None
    try:
        with watch_nan() as watch:
            if handle is None:
                handle = global_hooks.register_module_forward_hook(hook)
            net(x).backward()
    finally:
        if handle is not None:
            handle.remove()
    (born,) = _born(watch.report)
    assert born.module == HOOKED


def test_a_users_global_pre_hook_registered_first_runs_inside_the_call() -> None:
    net, x = _net()
    hooked = _hooked(net)

    def hook(module: nn.Module, args: Any) -> Any:
        return (_nan_of(args[0]),) if module is hooked else None

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        with watch_nan() as watch:
            net(x).backward()
    finally:
        handle.remove()
    (born,) = _born(watch.report)
    assert born.module == HOOKED


def test_a_module_called_twice_charges_its_hook_to_each_call() -> None:
    calls: list[int] = []

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = nn.Linear(4, 4)
            self.head = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.shared(self.shared(x))).sum()

    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        calls.append(len(calls))
        return _nan_of(output) if len(calls) == 2 else output.exp()

    torch.manual_seed(0)
    model = Twice()
    model.shared.register_forward_hook(hook)
    x = torch.randn(2, 4, requires_grad=True)
    with watch_nan() as watch:
        model(x).backward()
    (born,) = _born(watch.report)
    assert born.module == "shared"
    with record() as trace:
        model(x).backward()
    (info,) = trace.graph_tasks.values()
    assert sorted(_scopes(info, "ExpBackward0")) == [
        (("model", 0), ("shared", 0)),
        (("model", 0), ("shared", 1)),
    ]


def _scopes(info: GraphTaskInfo, name: str) -> Iterator[tuple[tuple[str, int], ...]]:
    return (n.scope for n in info.nodes.values() if n.name == name)


def _recorded(setup: Callable[[Net], Any], observe: str = "nodes") -> tuple[GraphTaskInfo, Net]:
    net, x = _net()
    setup(net)
    with record(observe=observe) as trace:
        net(x).backward()
    (info,) = trace.graph_tasks.values()
    return info, net


def _innermost(node: NodeInfo) -> str | None:
    return node.scope[-1][0] if node.scope else None


@pytest.mark.parametrize("observe", ["nodes", "calls"])
def test_nodes_made_in_a_forward_hook_are_in_the_modules_scope(observe: str) -> None:
    info, _ = _recorded(
        lambda net: _hooked(net).register_forward_hook(lambda m, a, o: o.exp() * 2), observe
    )
    assert [_innermost(n) for n in info.nodes.values() if n.name == "ExpBackward0"] == [HOOKED]
    (mul,) = [n for n in info.nodes.values() if n.name == "MulBackward0"]
    assert _innermost(mul) == HOOKED
    # The next block's nodes are its own, not the hooked one's.
    (next_add,) = [
        n
        for n in info.nodes.values()
        if n.name == "AddBackward0" and _innermost(n) == "stages.1.blocks.1"
    ]
    assert next_add.scope[-2] == (BLOCK, 0)


@pytest.mark.parametrize("observe", ["nodes", "calls"])
def test_both_nodes_of_a_modules_backward_hooks_are_in_its_scope(observe: str) -> None:
    seen: list[str] = []
    info, _ = _recorded(
        lambda net: _hooked(net).register_full_backward_hook(lambda m, gi, go: seen.append("hook")),
        observe,
    )
    hook_nodes = [n for n in info.nodes.values() if n.name == "BackwardHookFunctionBackward"]
    assert len(hook_nodes) == 2
    assert [_innermost(n) for n in hook_nodes] == [HOOKED, HOOKED]
    assert seen == ["hook"]
    # The sum made after the model's blocks stays outside them.
    (total,) = [n for n in info.nodes.values() if n.name == "SumBackward0"]
    assert _innermost(total) == "net"


def test_a_global_hook_added_while_recording_is_charged_to_its_module() -> None:
    net, x = _net()
    hooked = _hooked(net)
    with record() as trace:
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda module, args, out: out.exp() if module is hooked else None
        )
        try:
            net(x).backward()
        finally:
            handle.remove()
    (info,) = trace.graph_tasks.values()
    assert [_innermost(n) for n in info.nodes.values() if n.name == "ExpBackward0"] == [HOOKED]


def test_watching_leaves_only_the_users_hooks_and_the_same_gradients() -> None:
    def run(watch: bool) -> tuple[list[torch.Tensor], Net]:
        net, x = _net()
        _hooked(net).register_forward_hook(lambda m, a, o: o * 2)
        _hooked(net).register_full_backward_pre_hook(lambda m, go: None)
        if watch:
            with record():
                net(x).backward()
        else:
            net(x).backward()
        return [p.grad for p in net.parameters()], net

    plain, _ = run(False)
    watched, net = run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    assert len(_hooked(net)._forward_hooks) == 1
    assert not _hooked(net)._forward_hooks_always_called
    assert all(not m._forward_hooks for m in net.modules() if m is not _hooked(net))


def test_a_hooked_module_that_raises_ends_its_call() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad input")

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fails = Fails()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with contextlib.suppress(ValueError):
                self.fails(x)
            return self.fc(x).exp().sum()

    model = Outer()
    model.fails.register_forward_hook(lambda m, a, o: None)
    x = torch.randn(2, 4, requires_grad=True)
    with record() as trace:
        model(x).backward()
    (info,) = trace.graph_tasks.values()
    (exp,) = [n for n in info.nodes.values() if n.name == "ExpBackward0"]
    assert exp.scope == (("model", 0),)
    model(x)  # the next call takes off what the failed call's end could not
    assert len(model.fails._forward_hooks) == 1


def test_a_hooked_module_called_inside_its_own_call_ends_each_call_in_turn() -> None:
    class Again(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, again: bool = True) -> torch.Tensor:
            y = self.fc(x)
            return self(y, again=False) if again else y

    model = Again()
    model.register_forward_hook(lambda m, a, o: o.exp())
    x = torch.randn(2, 4, requires_grad=True)
    with record() as trace:
        model(x).sum().backward()
    (info,) = trace.graph_tasks.values()
    # The inner call's hook runs inside both calls, the outer one's inside the outer only
    # (a model called inside itself is named by its class there, as a module lent to it).
    assert sorted(_scopes(info, "ExpBackward0")) == [
        (("model", 0),),
        (("model", 0), ("Again", 0)),
    ]
    (total,) = _scopes(info, "SumBackward0")
    assert total == ()
    assert len(model._forward_hooks) == 1
