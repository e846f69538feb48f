"""Custom Functions with non-tensor outputs, and the gradients create_graph leaves behind.

Both as PyTorch 2.13 does them: ``backward`` receives one gradient per output of
``forward`` (``None`` for the non-tensors), and under ``create_graph`` a leaf's
``.grad`` is a copy of the incoming gradient (``CopyBackwards``), a retained
non-leaf's a clone (``CloneBackward0``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import engine
from tests.engine.test_torch_order import _both


def _function(lib: Any, outputs: str, materialize: bool = True) -> Any:
    """A Function whose forward returns ``outputs`` (``t`` a tensor, ``n`` a number, ``s`` a
    string, ``0`` None) and whose backward records what it receives."""
    base = lib.Function if lib is engine else lib.autograd.Function
    received: list[Any] = []

    class Outputs(base):  # type: ignore[misc, valid-type]
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.set_materialize_grads(materialize)
            made = {"t": lambda k: x * float(k + 2), "n": lambda k: 7, "s": lambda k: "tag"}
            made["0"] = lambda k: None
            return tuple(made[kind](k) for k, kind in enumerate(outputs))

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            received.append(grads)
            total = None
            for k, g in enumerate(grads):
                if g is not None:
                    total = g * float(k + 2) if total is None else total + g * float(k + 2)
            return total

    Outputs.received = received  # type: ignore[attr-defined]
    return Outputs


def _describe(grads: tuple[Any, ...]) -> list[Any]:
    return [None if g is None else g.tolist() for g in grads]


def _run(lib: Any, outputs: str, used: list[int], materialize: bool) -> dict[str, Any]:
    fn = _function(lib, outputs, materialize)
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    out = fn.apply(x)
    loss = sum(out[k].sum() * float(k + 1) for k in used)
    loss.backward()
    return {
        "output_nrs": [o.output_nr for o in out if isinstance(o, lib.Tensor)],
        "plain": [type(o).__name__ for o in out if not isinstance(o, lib.Tensor)],
        "received": [_describe(g) for g in fn.received],
        "grad": x.grad.tolist(),
    }


CASES = [
    ("tns", [0], True),  # the (tensor, 7, "tag")
    ("ntn", [1], True),
    ("tnt", [0, 2], True),
    ("tnt", [2], True),  # an unused tensor output: zeros; the number's: None
    ("tnt", [2], False),
    ("t0t", [0], True),
    ("nnt", [2], False),
]


@pytest.mark.oracle
@pytest.mark.parametrize(("outputs", "used", "materialize"), CASES, ids=str)
def test_backward_gets_one_gradient_per_output_like_pytorch(
    torch: Any, outputs: str, used: list[int], materialize: bool
) -> None:
    assert _run(engine, outputs, used, materialize) == _run(torch, outputs, used, materialize)


def test_non_tensor_outputs_without_pytorch() -> None:
    """The oracle's answer for the issue's Function, for machines without PyTorch."""
    assert _run(engine, "tns", [0], True) == {
        "output_nrs": [0],
        "plain": ["int", "str"],
        "received": [[[1.0, 1.0], None, None]],
        "grad": [2.0, 2.0],
    }
    assert _run(engine, "ntn", [1], True)["output_nrs"] == [1]


def _split_branches(lib: Any, xs: list[Any]) -> Any:
    """A Function's two tensor outputs (a number between them) feeding two branches."""
    first, _, third = _function(lib, "tnt").apply(xs[0] * xs[1])
    return (first.tanh() * xs[1]).sum() + (third * 3.0 + xs[0]).exp().sum()


@pytest.mark.oracle
def test_nodes_run_in_pytorchs_order(torch: Any) -> None:
    arrays = [np.array([0.1, 0.2], dtype=np.float32), np.array([0.3, -0.4], dtype=np.float32)]
    _both(_split_branches, arrays, torch)


class _Bad:
    """Functions whose backward returns something PyTorch refuses."""

    @staticmethod
    def make(lib: Any, result: Any) -> Any:
        base = lib.Function if lib is engine else lib.autograd.Function

        class Bad(base):  # type: ignore[misc, valid-type]
            @staticmethod
            def forward(ctx: Any, x: Any, k: Any) -> Any:
                return x * 2.0

            @staticmethod
            def backward(ctx: Any, g: Any) -> Any:
                return result(g)

        return Bad


@pytest.mark.oracle
@pytest.mark.parametrize(
    "result",
    [
        lambda g: "s",  # not a tensor
        lambda g: (g, g),  # a gradient for the number
        lambda g: (g, None, None),  # one more None: accepted
        lambda g: (g, None, g),  # one more, not None
        lambda g: g,  # one for two inputs
    ],
    ids=["string", "for the number", "extra None", "extra tensor", "too few"],
)
def test_bad_backward_results_fail_like_pytorch(torch: Any, result: Any) -> None:
    outcomes = []
    for lib in (engine, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        try:
            _Bad.make(lib, result).apply(x, 3.0).sum().backward()
            outcomes.append(("ok", x.grad.tolist()))
        except Exception as exc:  # noqa: BLE001 - the type is what is compared
            outcomes.append((type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]


def _signature(node: Any) -> Any:
    if node is None:
        return None
    name = node.name().removeprefix("torch::autograd::")
    return (name, tuple(_signature(fn) for fn, _ in node.next_functions))


def _create_graph_grads(lib: Any) -> list[Any]:
    """What .grad holds after create_graph backward calls, and after plain ones on top."""
    seen: list[Any] = []
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward(create_graph=True)
    seen.append((_signature(x.grad.grad_fn), x.grad.requires_grad, x.grad.is_leaf))
    first = x.grad
    x.grad.sum().backward()  # adds into x.grad in place, which keeps its history
    seen.append((_signature(x.grad.grad_fn), x.grad.tolist(), x.grad is first))
    (x * x * x).sum().backward(create_graph=True)  # grad mode on: added out of place
    seen.append((_signature(x.grad.grad_fn), x.grad.tolist()))
    y = lib.tensor([1.0, 2.0], requires_grad=True)
    (y * 2.0).sum().backward(create_graph=True)  # the gradient has no history
    seen.append((y.grad.grad_fn, y.grad.requires_grad, y.grad.tolist()))
    z = lib.tensor([1.0, 2.0], requires_grad=True)
    (z * z).sum().backward()
    (z * z).sum().backward(create_graph=True)
    seen.append(_signature(z.grad.grad_fn))
    h = z * z
    h.retain_grad()
    (h * h).sum().backward(create_graph=True)
    seen.append((_signature(h.grad.grad_fn), h.grad.tolist()))
    return seen


@pytest.mark.oracle
def test_create_graph_leaves_pytorchs_gradients(torch: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's warning about the reference cycle
        assert _create_graph_grads(engine) == _create_graph_grads(torch)


def test_create_graph_gradient_is_a_copy_with_copybackwards() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    (y.sum()).backward(create_graph=True)
    node = x.grad.grad_fn
    assert node.name() == "CopyBackwards"
    assert node.next_functions[0] == (None, 0)
    assert node.next_functions[1][0].name() == "AddBackward0"
    (gx,) = engine.grad(x.grad.sum(), [x])
    assert gx.tolist() == [2.0, 2.0]
    # The copy owns its memory: adding into it later changes nothing else.
    const = engine.tensor([1.0, 2.0], requires_grad=True)
    g = engine.tensor([3.0, 4.0])
    (const * 1.0).backward(g, create_graph=True)
    (const * 1.0).sum().backward()
    assert g.tolist() == [3.0, 4.0] and const.grad.tolist() == [4.0, 5.0]
    assert not np.shares_memory(const.grad.numpy(), g.numpy())
