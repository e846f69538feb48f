"""PyTorch as people write it today: torch.func, nested, fake and meta tensors, subclasses.

Each case runs the idiom, then an ordinary backward with an Inf born in it
(``sqrt`` at 0): watching must still be on for that one, the results must be
bit-identical to the plain run, and every trace must save and load.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.nan.watch import watch_nan  # noqa: E402
from autograd_viz.sources import once  # noqa: E402
from autograd_viz.sources.pytorch import summary  # noqa: E402
from autograd_viz.trace import Trace  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from engine.events import HUB  # noqa: E402

Idiom = Callable[[], list[Any]]
"""Runs a PyTorch idiom with a backward in it; returns the tensors it computed."""


def _func_grad() -> list[Any]:
    x = torch.linspace(-1, 1, 5)
    return [torch.func.grad(lambda v: (v.sin() ** 2).sum())(x)]


def _vmap_grad() -> list[Any]:
    x = torch.linspace(-1, 1, 12).reshape(4, 3)
    per_row = torch.func.vmap(torch.func.grad(lambda v: (v**2).sum()))(x)
    jac = torch.func.jacrev(torch.sin)(x[0])
    return [per_row, jac]


def _jagged() -> list[Any]:
    torch.manual_seed(0)
    a = torch.randn(2, 4, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    linear = torch.nn.Linear(4, 4)
    nested = torch.nested.as_nested_tensor([a, b], layout=torch.jagged)
    linear(nested).relu().values().pow(2).sum().backward()
    return [a.grad, b.grad, linear.weight.grad]


def _fake() -> list[Any]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.randn(4, 4, requires_grad=True)
        (x @ x).relu().sum().backward()
        assert x.grad is not None and x.grad.shape == (4, 4)
    return []


def _meta() -> list[Any]:
    m = torch.randn(3, device="meta", requires_grad=True)
    (m * 2).sum().backward()
    assert m.grad is not None and m.grad.device.type == "meta"
    return []


class Wrapped(torch.Tensor):
    """A wrapper subclass of the user's: its values live in ``inner``, its ops are its own."""

    inner: Any

    @staticmethod
    def __new__(cls, inner: Any) -> Any:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, device=inner.device,
            requires_grad=inner.requires_grad,
        )  # fmt: skip

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils import _pytree

        def unwrap(t: Any) -> Any:
            return t.inner if isinstance(t, Wrapped) else t

        def wrap(t: Any) -> Any:
            return Wrapped(t) if isinstance(t, torch.Tensor) else t

        out = func(*_pytree.tree_map(unwrap, args), **_pytree.tree_map(unwrap, kwargs or {}))
        return _pytree.tree_map(wrap, out)


def _subclass() -> list[Any]:
    x = Wrapped(torch.linspace(0.5, 2, 6)).requires_grad_()
    (x.exp() * 3).sum().backward()
    assert isinstance(x.grad, Wrapped)
    return [x.grad.inner]


IDIOMS: dict[str, Idiom] = {
    "func_grad": _func_grad,
    "vmap_grad_jacrev": _vmap_grad,
    "jagged_nested": _jagged,
    "fake_tensor_mode": _fake,
    "meta": _meta,
    "subclass": _subclass,
}


def _inf_after() -> Any:
    """An ordinary backward whose Inf is born in ``SqrtBackward0``."""
    w = torch.zeros(3, requires_grad=True)
    torch.sqrt(w).sum().backward()
    return w.grad


def _program(idiom: Idiom) -> list[Any]:
    return [*idiom(), _inf_after()]


def _bits(values: list[Any]) -> list[bytes]:
    return [v.detach().contiguous().numpy().tobytes() for v in values]


@contextmanager
def _quiet_torch_logs() -> Iterator[list[logging.LogRecord]]:
    """What PyTorch logs (fake tensors log data-dependent errors) while the block runs."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, log: logging.LogRecord) -> None:
            seen.append(log)

    handler = Keep(logging.DEBUG)
    root = logging.getLogger("torch")
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield seen
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


@pytest.mark.parametrize("name", list(IDIOMS))
def test_watching_goes_on_after_the_idiom_and_changes_nothing(name: str, tmp_path: Path) -> None:
    idiom = IDIOMS[name]
    with _quiet_torch_logs() as plain_logs:
        plain = _program(idiom)
    with _quiet_torch_logs() as logs, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with record() as trace:
            watched = _program(idiom)
            listening = HUB.active
    assert _bits(watched) == _bits(plain)
    assert listening
    assert [log.getMessage() for log in logs] == [log.getMessage() for log in plain_logs]
    assert not [w for w in said if "unsubscribed" in str(w.message)]
    assert not [w for w in said if "stopped watching" in str(w.message)]
    # The last backward is recorded whole, with values.
    last = max(trace.graph_tasks)
    names = {n.name for n in trace.graph_tasks[last].nodes.values()}
    assert "SqrtBackward0" in names
    ends = [e for e in trace.events if e.kind == "node_end" and e.node_name == "SqrtBackward0"]
    assert ends and ends[-1].data["outputs"][0].inf_count == 3
    path = tmp_path / f"{name}.jsonl"
    trace.save(path)
    loaded = Trace.load(path)
    assert len(loaded.events) == len(trace.events)
    assert loaded.graph_tasks.keys() == trace.graph_tasks.keys()


@pytest.mark.parametrize("name", list(IDIOMS))
def test_watch_nan_finds_the_inf_born_after_the_idiom(name: str) -> None:
    plain = _program(IDIOMS[name])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with watch_nan() as watch:
            watched = _program(IDIOMS[name])
    assert _bits(watched) == _bits(plain)
    assert not [w for w in said if "unsubscribed" in str(w.message)]
    first = watch.report.first
    assert first is not None
    assert (first.phase, first.node.name) == ("backward", "SqrtBackward0")


def test_torch_func_is_said_in_one_line_and_recorded_without_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(once, "said", set())  # said once per process
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with record() as trace:
            _func_grad()
    lines = [str(w.message) for w in said if "torch.func" in str(w.message)]
    assert lines == [
        "autograd-viz: a backward call inside a torch.func transform (grad, vjp, jacrev) "
        "is recorded without values: its tensors are functorch wrappers"
    ]
    ends = [e for e in trace.events if e.kind == "node_end"]
    assert ends
    for event in ends:
        for out in event.data["outputs"]:
            assert out is None or out.min is None  # no values, said as such


def test_a_jagged_nested_tensor_is_summarized_by_its_packed_values() -> None:
    with record() as trace:
        _jagged()
    (task,) = trace.graph_tasks.values()
    shapes = [shape for n in task.nodes.values() for shape, _, _ in n.inputs]
    assert all(isinstance(d, int) for shape in shapes for d in shape)
    assert (2, 0, 4) in shapes  # the ragged dimension, which is no one number, as 0
    starts = [e for e in trace.events if e.kind == "node_start" and e.data["inputs"]]
    packed = [s for e in starts for s in e.data["inputs"] if s is not None and s.shape == (5, 4)]
    assert packed and all(s.min is not None for s in packed)


def test_fake_and_meta_backward_are_recorded_without_values_and_unsaid() -> None:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with record() as trace:
            _fake()
            _meta()
    assert [str(w.message) for w in said] == []
    assert len(trace.graph_tasks) == 2
    summaries = [
        s
        for e in trace.events
        if e.kind in ("node_start", "node_end")
        for s in e.data.get("inputs", e.data.get("outputs", ()))
        if s is not None
    ]
    assert summaries and all(s.min is None and s.values is None for s in summaries)


def test_an_unknown_subclass_is_said_once_and_its_values_are_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(summary, "_SAID", set())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with record():
            _subclass()
            _subclass()
    lines = [str(w.message) for w in said if "Wrapped" in str(w.message)]
    assert lines == [
        "autograd-viz: tensors of type Wrapped are recorded without values (shape, dtype "
        "and device only): reading them would run their own code"
    ]


def test_a_watcher_that_fails_on_one_call_watches_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import graph

    calls = {"n": 0}
    real = graph.saved_summaries

    def fails_once(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("cannot read this one")
        return real(*args)

    monkeypatch.setattr(graph, "saved_summaries", fails_once)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with record() as trace:
            first = _inf_after()
            second = _inf_after()
    assert _bits([first, second]) == _bits([_inf_after(), _inf_after()])
    assert len(trace.graph_tasks) == 2
    lines = [str(w.message) for w in said]
    assert any("could not be read whole" in line for line in lines)
    assert not any("unsubscribed" in line for line in lines)
    one, two = (trace.graph_tasks[g] for g in sorted(trace.graph_tasks))
    assert all(n.saved == () for n in one.nodes.values())  # recorded without saved tensors
    assert any(n.saved for n in two.nodes.values())


def test_ops_inside_torch_func_are_checked_in_the_forward_pass() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the line about torch.func
        with watch_nan() as watch:
            grad = torch.func.grad(lambda v: torch.log(v).sum())(torch.zeros(3))
    assert torch.isinf(grad).all()
    first = watch.report.first
    assert first is not None
    assert (first.phase, first.aten_op, first.cause) == ("forward", "aten.log.default", "log of 0")


def test_a_birth_in_a_jagged_nested_tensor_is_found_in_its_values() -> None:
    a = torch.tensor([[1.0, 0.0]], requires_grad=True)
    b = torch.tensor([[2.0, 3.0], [0.0, 4.0]], requires_grad=True)
    with watch_nan() as watch:
        nested = torch.nested.as_nested_tensor([a, b], layout=torch.jagged)
        torch.log(nested).values().clamp(min=-5).sum().backward()
    first = watch.report.first
    assert first is not None
    assert (first.phase, first.value, first.cause) == ("forward", "inf", "log of 0")
