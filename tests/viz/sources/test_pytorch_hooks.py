"""The user's hooks on a PyTorch backward: listed on their node, with the gradient around them.

Tensor hooks, a module's full backward (pre) hooks, post-accumulate-grad hooks
and a parameter's gradient hook as DDP-style code registers it: each shows on
its node with its function's name and ``file:line``, the gradient before and
after where PyTorch lets it be seen, and the derived input buffer agrees with
what the node received. Watching changes no gradient.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import DERIVED_MISMATCH  # noqa: E402
from autograd_viz.trace import Trace  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402

HERE = Path(__file__).resolve()


def half(grad: Any) -> Any:
    return grad * 0.5


def clip(grad: Any) -> Any:
    return grad.clamp(-0.1, 0.1)


def double_outputs(module: Any, grad_output: Any) -> Any:
    return (grad_output[0] * 2,)


def look_at_inputs(module: Any, grad_input: Any, grad_output: Any) -> None:
    return None


def after_accumulate(param: Any) -> None:
    return None


def _line(fn: Any) -> str:
    return f"{HERE}:{fn.__code__.co_firstlineno}"


def _program() -> tuple[Any, list[Any]]:
    """A small model with one hook of each kind; returns ``(backward, leaves)``."""
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    model = torch.nn.Linear(3, 3)
    model.register_full_backward_pre_hook(double_outputs)
    model.register_full_backward_hook(look_at_inputs)
    model.weight.register_hook(clip)  # DDP-style: a hook on a parameter's gradient
    model.bias.register_post_accumulate_grad_hook(after_accumulate)
    unused = model.weight.register_hook(half)
    unused.remove()  # removed before backward: not listed
    h = x * 2
    h.register_hook(half)
    loss = model(h.sin()).sum()
    return loss.backward, [x, model.weight, model.bias]


def _grads(leaves: list[Any]) -> list[bytes]:
    return [leaf.grad.numpy().tobytes() for leaf in leaves]


def _hooks(trace: Trace) -> dict[tuple[str, str], Any]:
    return {(e.node_name, e.data["hook"]): e for e in trace.events if e.kind == "hook"}


def _values(summary: Any) -> Any:
    return np.array(summary.values)


def _watched() -> tuple[Trace, list[bytes], list[str]]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with record() as trace:
            backward, leaves = _program()
            backward()
    return trace, _grads(leaves), [str(w.message) for w in said]


def test_watching_changes_no_gradient_and_raises_no_mismatch() -> None:
    backward, leaves = _program()
    backward()
    trace, grads, said = _watched()
    assert grads == _grads(leaves)
    assert said == []
    assert [e for e in trace.events if e.kind == DERIVED_MISMATCH] == []


def test_each_hook_is_listed_on_its_node_with_name_and_line() -> None:
    trace, _, _ = _watched()
    hooks = _hooks(trace)
    found = {
        key: (e.data["hook_name"], e.data.get("location"), e.data.get("slot"))
        for key, e in hooks.items()
    }
    assert found == {
        ("MulBackward0", "tensor_pre"): ("half", _line(half), 0),
        ("AccumulateGrad", "tensor_pre"): ("clip", _line(clip), 0),
        ("AccumulateGrad", "post_accumulate_grad"): (
            "after_accumulate",
            _line(after_accumulate),
            None,
        ),
        ("BackwardHookFunctionBackward", "module_full_backward_pre"): (
            "double_outputs",
            _line(double_outputs),
            None,
        ),
        ("BackwardHookFunctionBackward", "module_full_backward"): (
            "look_at_inputs",
            _line(look_at_inputs),
            None,
        ),
    }
    (task,) = trace.graph_tasks.values()
    listed = sorted(h for n in task.nodes.values() for h in n.hooks)
    assert listed == sorted(
        [
            ("tensor_pre", 1),
            ("tensor_pre", 1),
            ("post_accumulate_grad", 1),
            ("module_full_backward_pre", 1),
            ("module_full_backward", 1),
        ]
    )


def test_the_gradient_before_and_after_each_hook() -> None:
    trace, _, _ = _watched()
    hooks = _hooks(trace)
    halved = hooks[("MulBackward0", "tensor_pre")].data
    assert halved["replaced"]
    assert np.array_equal(_values(halved["after"]), _values(halved["before"]) * np.float32(0.5))
    doubled = hooks[("BackwardHookFunctionBackward", "module_full_backward_pre")].data
    assert doubled["replaced"]
    assert np.array_equal(_values(doubled["after"]), _values(doubled["before"]) * 2)
    looked = hooks[("BackwardHookFunctionBackward", "module_full_backward")].data
    assert not looked["replaced"]
    assert np.array_equal(_values(looked["after"]), _values(looked["before"]))
    clipped = hooks[("AccumulateGrad", "tensor_pre")].data
    clipped_max = float(np.float32(0.1))
    assert clipped["replaced"] and clipped["before"].max > clipped_max == clipped["after"].max
    accumulated = hooks[("AccumulateGrad", "post_accumulate_grad")].data
    assert "before" not in accumulated  # PyTorch shows nothing between accumulation and it
    assert accumulated["after"].shape == (3,)


def test_the_derived_buffer_agrees_with_what_the_node_received() -> None:
    trace, _, _ = _watched()
    for step, event in enumerate(trace.events):
        if event.kind != "node_start" or event.data.get("derived"):
            continue
        state = trace.state_at(step).node(event.node_id, event.graph_task)
        for held, received in zip(state.slots, event.data["inputs"], strict=False):
            if held is not None and received is not None and received.values is not None:
                assert held.values == received.values, event.node_name


def test_a_hook_replacing_a_gradient_unseen_is_a_mismatch_that_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import graph

    def two_edges() -> None:
        x = torch.linspace(-1, 1, 3, requires_grad=True)
        h = x * 2
        h.register_hook(half)
        (h.sin() + h.cos()).sum().backward()  # two edges into h's slot: its sum is followed

    with warnings.catch_warnings(record=True), record() as seen:
        warnings.simplefilter("always")
        two_edges()
    assert [e for e in seen.events if e.kind == DERIVED_MISMATCH] == []
    monkeypatch.setattr(graph, "hooks_of", lambda fn, variable: ())  # as if registered in C++
    with warnings.catch_warnings(record=True), record() as trace:
        warnings.simplefilter("always")
        two_edges()
    (mismatch,) = [e for e in trace.events if e.kind == DERIVED_MISMATCH]
    assert mismatch.node_name == "MulBackward0"
    assert "a hook that autograd-viz cannot see" in mismatch.data["message"]


def test_a_trace_with_hooks_saves_and_loads(tmp_path: Path) -> None:
    trace, _, _ = _watched()
    path = tmp_path / "hooks.jsonl"
    trace.save(path)
    loaded = Trace.load(path)
    assert [e.data for e in loaded.events if e.kind == "hook"] == [
        e.data for e in Trace.load(path).events if e.kind == "hook"
    ]
    assert {(e.node_name, e.data["hook_name"]) for e in loaded.events if e.kind == "hook"} == {
        (name, e.data["hook_name"]) for (name, _), e in _hooks(trace).items()
    }


def test_the_step_explained_names_the_hook_and_its_line() -> None:
    from autograd_viz.draw.render.words import explain

    trace, _, _ = _watched()
    event = _hooks(trace)[("MulBackward0", "tensor_pre")]
    text = explain(event, event.data, lambda node_id, name: f"{name} #{node_id}")
    assert f"half ({_line(half)})" in text and "replacing the gradient" in text


def test_the_users_node_hooks_work_beside_the_bridges_keyed_ones() -> None:
    # The bridge's own node hooks go in under its key (Note [Keyed hooks] in hooks.py):
    # the user's registered before, during and after a recorded call work as in PyTorch.
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).sin()
    fn = y.grad_fn
    fired: list[str] = []
    before = fn.register_hook(lambda grads_in, grads_out: fired.append("before"))
    with record() as trace:
        y.sum().backward(retain_graph=True)
    assert fired == ["before"]
    assert any(e.kind == "node_end" and e.node_name == "SinBackward0" for e in trace.events)
    after = fn.register_hook(lambda grads_in, grads_out: fired.append("after"))
    y.sum().backward(retain_graph=True)  # unwatched: the bridge's hooks are gone
    assert fired == ["before", "before", "after"]
    before.remove()
    after.remove()
    y.sum().backward()
    assert fired == ["before", "before", "after"]


def test_hooks_registered_on_another_thread_get_pytorchs_handles() -> None:
    import threading

    from autograd_viz.sources.pytorch.hooks import keyed_hooks, remove_keyed

    x = torch.randn(3, requires_grad=True)
    y = x.exp()
    got: list[Any] = []
    key = object()
    with keyed_hooks(key):
        ours = y.grad_fn.register_hook(lambda grads_in, grads_out: None)
        thread = threading.Thread(
            target=lambda: got.append(y.grad_fn.register_prehook(lambda grads: None))
        )
        thread.start()
        thread.join()
    assert isinstance(ours, dict) and key in ours
    assert isinstance(got[0], torch.utils.hooks.RemovableHandle)
    remove_keyed(ours, key)
    assert key not in ours
    got[0].remove()
