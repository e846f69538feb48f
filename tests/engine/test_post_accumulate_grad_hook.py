"""Tensor.register_post_accumulate_grad_hook, as PyTorch 2.13 runs it.

The hook gets the leaf once its ``.grad`` holds the new sum: after the leaf's
tensor hooks, in the order the leaves' AccumulateGrad nodes run, and not at all
when ``grad()`` or ``inputs=`` leaves the leaf out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import engine
from engine import events


def _story(lib: Any) -> list[Any]:
    """Everything a few backward calls show the hooks, in order."""
    log: list[Any] = []
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor([3.0], requires_grad=True)
    a.register_hook(lambda g: log.append(("tensor hook", g.tolist())))
    first = a.register_post_accumulate_grad_hook(
        lambda t: log.append(("a", t is a, t.grad.tolist()))
    )
    a.register_post_accumulate_grad_hook(lambda t: log.append(("a again", t.grad.tolist())))
    b.register_post_accumulate_grad_hook(lambda t: log.append(("b", t.grad.tolist())))
    y = a * 2.0
    y.register_hook(lambda g: log.append(("y", g.tolist())))
    (y * b).sum().backward()
    (a * 3.0).sum().backward()  # the hook sees the sum
    first.remove()
    first.remove()  # twice is harmless
    (a * b).sum().backward(inputs=[b])  # a is left out: no call for it
    log.append("grad()")
    if lib is engine:
        engine.grad((a * b).sum(), [a])
    else:
        lib.autograd.grad((a * b).sum(), [a])

    def zero(t: Any) -> None:
        t.grad.mul_(0.0)

    b.register_post_accumulate_grad_hook(zero)
    (b * 5.0).sum().backward()
    log.append(("b after zeroing", b.grad.tolist()))
    return log


@pytest.mark.oracle
def test_calls_and_their_order_are_pytorchs(torch: Any) -> None:
    assert _story(engine) == _story(torch)


def test_calls_without_pytorch() -> None:
    log = _story(engine)
    assert log[:5] == [
        ("b", [6.0]),
        ("y", [3.0, 3.0]),
        ("tensor hook", [6.0, 6.0]),
        ("a", True, [6.0, 6.0]),
        ("a again", [6.0, 6.0]),
    ]


def _error(lib: Any, program: Callable[[Any], Any]) -> tuple[str, str]:
    with pytest.raises(Exception) as info:
        program(lib)
    return type(info.value).__name__, str(info.value)


def _returning(value: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    def program(lib: Any) -> None:
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        x.register_post_accumulate_grad_hook(lambda t: value(lib, t))
        (x * 3.0).sum().backward()

    return program


def _raising(lib: Any) -> None:
    def boom(t: Any) -> None:
        raise ValueError("boom")

    x = lib.tensor([1.0, 2.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(boom)
    (x * 3.0).sum().backward()


ERRORS: dict[str, Callable[[Any], Any]] = {
    "on a non-leaf": lambda lib: (
        lib.ones(2, requires_grad=True) * 2.0
    ).register_post_accumulate_grad_hook(print),
    "without requires_grad": lambda lib: lib.ones(2).register_post_accumulate_grad_hook(print),
    "returning a tensor": _returning(lambda lib, t: t.grad * 2.0),
    "returning a number": _returning(lambda lib, t: 5),
    "raising": _raising,
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_pytorchs(torch: Any, name: str) -> None:
    assert _error(engine, ERRORS[name]) == _error(torch, ERRORS[name])


@pytest.mark.oracle
def test_create_graph_hook_sees_the_copy(torch: Any) -> None:
    import warnings

    seen = []
    for lib in (engine, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        names: list[str] = []
        x.register_post_accumulate_grad_hook(lambda t, names=names: names.append(t.grad.grad_fn))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (x * x).sum().backward(create_graph=True)
        seen.append([n.name().removeprefix("torch::autograd::") for n in names])
    assert seen[0] == seen[1] == ["CopyBackwards"]


def test_the_call_is_an_event_after_the_accumulation() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")

    def watch(t: engine.Tensor) -> None:
        return None

    x.register_post_accumulate_grad_hook(watch)
    kinds: list[tuple[str, Any]] = []

    def listener(event: events.Event) -> None:
        if event.node_name == "AccumulateGrad" and event.kind in ("accumulate", "hook"):
            kinds.append((event.kind, event.data.get("target") or event.data.get("hook")))

    with events.listen(listener):
        (x * 2.0).sum().backward()
    assert kinds == [
        ("accumulate", "buffer"),
        ("accumulate", "leaf"),
        ("hook", "post_accumulate_grad"),
    ]
