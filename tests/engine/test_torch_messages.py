"""Errors the engine raises with PyTorch's type and PyTorch's current words.

Each case runs the same program on the engine and on PyTorch 2.13 and compares
the exception's type and message. Type names inside messages differ by their
namespace only (``engine.FloatTensor`` for ``torch.FloatTensor``), as in the
version-counter error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine

Program = Callable[[Any], Any]


def _error(lib: Any, program: Program) -> tuple[str, str]:
    with pytest.raises(Exception) as info:
        program(lib)
    return type(info.value).__name__, str(info.value).replace("torch.", "engine.")


def _set_grad(shape: tuple[int, ...], grad_shape: tuple[int, ...], dtype: str) -> Program:
    def program(lib: Any) -> None:
        x = lib.zeros(shape, requires_grad=True)
        x.grad = lib.zeros(grad_shape, dtype=getattr(lib, dtype))

    return program


def _tensor_hook(result: Callable[[Any, Any], Any], leaf: bool = False) -> Program:
    def program(lib: Any) -> None:
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2.0
        (x if leaf else y).register_hook(lambda g: result(lib, g))
        y.sum().backward()

    return program


def _named_hook(lib: Any, g: Any) -> Any:
    return lib.zeros(3)


def _hook_named(hook: Callable[[Any], Any]) -> Program:
    def program(lib: Any) -> None:
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2.0
        y.register_hook(hook)
        y.sum().backward()

    return program


def _size_changer(g: Any) -> Any:
    return g.sum()


class _CallableHook:
    def __call__(self, g: Any) -> Any:
        return g.sum()


def _node_prehook(result: Callable[[Any, tuple[Any, ...]], Any]) -> Program:
    def program(lib: Any) -> None:
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2.0
        y.grad_fn.register_prehook(lambda go: result(lib, go))
        y.sum().backward()

    return program


def _node_posthook(result: Callable[[Any, tuple[Any, ...]], Any], scalar: bool = False) -> Program:
    def program(lib: Any) -> None:
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor([3.0, 4.0], requires_grad=True)
        y = x * 2.0 if scalar else x * w
        y.grad_fn.register_hook(lambda gi, go: result(lib, gi))
        y.sum().backward()

    return program


def _inference_inplace(change: Callable[[Any, Any], Any], mode: str = "grad") -> Program:
    def program(lib: Any) -> None:
        with lib.inference_mode():
            t = lib.zeros(3)
        if mode == "no_grad":
            with lib.no_grad():
                change(lib, t)
        else:
            change(lib, t)

    return program


def _detach_view(make: Callable[[Any], Any]) -> Program:
    def program(lib: Any) -> None:
        make(lib).detach_()

    return program


def _setitem(lib: Any, t: Any) -> None:
    t[0] = 1.0


CASES: dict[str, Program] = {
    # requires_grad on integers: three wordings, as in PyTorch
    "tensor(int, requires_grad)": lambda lib: lib.tensor([1, 2], requires_grad=True),
    "zeros(int64, requires_grad)": lambda lib: lib.zeros(2, dtype=lib.int64, requires_grad=True),
    "full(int, requires_grad)": lambda lib: lib.full((2,), 1, requires_grad=True),
    "requires_grad_() on int": lambda lib: lib.tensor([1, 2]).requires_grad_(),
    "requires_grad_() on bool": lambda lib: lib.tensor([True]).requires_grad_(),
    "requires_grad = True on int": lambda lib: setattr(lib.tensor([1]), "requires_grad", True),
    # assigning .grad
    ".grad of another size": _set_grad((2,), (3,), "float32"),
    ".grad of another 2-D size": _set_grad((2, 3), (3, 2), "float32"),
    ".grad of another rank": _set_grad((), (1,), "float32"),
    ".grad double on float": _set_grad((2,), (2,), "float64"),
    ".grad int64 on float": _set_grad((2,), (2,), "int64"),
    ".grad int32 on float": _set_grad((2,), (2,), "int32"),
    ".grad bool on float": _set_grad((2,), (2,), "bool"),
    ".grad half on float": _set_grad((2,), (2,), "float16"),
    ".grad of another dtype and size": _set_grad((2,), (3,), "float64"),
    ".grad not a tensor": lambda lib: setattr(lib.zeros(2, requires_grad=True), "grad", [1.0]),
    # tensor hooks
    "tensor hook changes the size": _tensor_hook(lambda lib, g: lib.zeros(3)),
    "tensor hook changes the dtype": _tensor_hook(lambda lib, g: g.double()),
    "tensor hook returns a number": _tensor_hook(lambda lib, g: 3),
    "tensor hook returns a list": _tensor_hook(lambda lib, g: [g]),
    "leaf hook changes the size": _tensor_hook(lambda lib, g: lib.zeros(3), leaf=True),
    "leaf hook changes the dtype": _tensor_hook(lambda lib, g: g.double(), leaf=True),
    "a named hook": _hook_named(_size_changer),
    "a callable object as hook": _hook_named(_CallableHook()),
    "a partial as hook": _hook_named(functools.partial(_size_changer)),
    # node hooks
    "prehook returns two values": _node_prehook(lambda lib, go: (go[0], go[0])),
    "prehook returns a list": _node_prehook(lambda lib, go: [go[0]]),
    "prehook returns a tensor": _node_prehook(lambda lib, go: go[0]),
    "prehook returns a number inside": _node_prehook(lambda lib, go: (3,)),
    "prehook changes the size": _node_prehook(lambda lib, go: (lib.zeros(3),)),
    "prehook changes the dtype": _node_prehook(lambda lib, go: (go[0].double(),)),
    "post hook returns one value": _node_posthook(lambda lib, gi: (gi[0],)),
    "post hook returns a list": _node_posthook(lambda lib, gi: list(gi)),
    "post hook changes a size": _node_posthook(lambda lib, gi: (gi[0], lib.zeros(5))),
    "post hook replaces None": _node_posthook(lambda lib, gi: (gi[0], lib.zeros(2)), scalar=True),
    # detach_() on views
    "detach_ a slice of a non-leaf": _detach_view(
        lambda lib: (lib.zeros(3, requires_grad=True) * 1.0)[1:]
    ),
    "detach_ a slice without grad": _detach_view(lambda lib: lib.zeros(3)[1:]),
    "detach_ a slice of a leaf": _detach_view(lambda lib: lib.zeros(3, requires_grad=True)[1:]),
    "detach_ a view()": _detach_view(lambda lib: lib.zeros(3).view(3)),
    "detach_ a transpose": _detach_view(lambda lib: lib.zeros(2, 3).transpose(0, 1)),
    # in-place on inference tensors
    "inference add_": _inference_inplace(lambda lib, t: t.add_(1.0)),
    "inference mul_ under no_grad": _inference_inplace(lambda lib, t: t.mul_(2.0), "no_grad"),
    "inference exp_": _inference_inplace(lambda lib, t: t.exp_()),
    "inference zero_": _inference_inplace(lambda lib, t: t.zero_()),
    "inference fill_": _inference_inplace(lambda lib, t: t.fill_(2.0)),
    "inference setitem": _inference_inplace(_setitem),
    "inference view's add_": _inference_inplace(lambda lib, t: t[1:].add_(1.0)),
    # sum_to_size
    "sum_to_size not expandable": lambda lib: lib.ones(2, 3).sum_to_size(2),
    "sum_to_size 2-D not expandable": lambda lib: lib.ones(2, 3).sum_to_size(3, 3),
    "sum_to_size without a size": lambda lib: lib.ones(2, 3).sum_to_size(),
    "sum_to_size a tuple and an int": lambda lib: lib.ones(2, 3).sum_to_size((1, 3), 2),
    # alpha of add and sub (PyTorch's alpha_check)
    "complex alpha, float tensors": lambda lib: lib.ones(2).add(lib.ones(2), alpha=1j),
    "complex alpha, a number": lambda lib: lib.ones(2).add(2.0, alpha=1j),
    "complex alpha, sub": lambda lib: lib.ones(2).sub(lib.ones(2), alpha=2j),
    "complex alpha, sub a number": lambda lib: lib.ones(2).sub(1, alpha=1j),
    "float alpha, int tensors": lambda lib: lib.tensor([1, 2]).add(lib.tensor([3, 4]), alpha=0.5),
    "float alpha, int sub": lambda lib: lib.tensor([1, 2]).sub(lib.tensor([3, 4]), alpha=1.5),
    "float alpha, int and an int": lambda lib: lib.tensor([1, 2]).add(3, alpha=0.5),
    "complex alpha, int tensors": lambda lib: lib.tensor([1, 2]).add(lib.tensor([3]), alpha=1j),
    "bool alpha, float tensors": lambda lib: lib.ones(2).add(lib.ones(2), alpha=True),
    "bool alpha, int tensors": lambda lib: lib.tensor([1]).add(lib.tensor([2]), alpha=False),
    "bool alpha, a number": lambda lib: lib.ones(2).add(1.0, alpha=True),
    "add_ with complex alpha": lambda lib: lib.ones(2).add_(lib.ones(2), alpha=1j),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(CASES))
def test_errors_are_pytorchs(torch: Any, name: str) -> None:
    program = CASES[name]
    assert _error(engine, program) == _error(torch, program)


def test_messages_without_pytorch() -> None:
    """A few of the oracle's answers, for machines without PyTorch."""
    assert _error(engine, CASES[".grad of another size"]) == (
        "RuntimeError",
        "attempting to assign a gradient of size '[3]' to a tensor of size '[2]'. Please ensure "
        "that the gradient and the tensor are the same size",
    )
    assert _error(engine, CASES["a named hook"]) == (
        "RuntimeError",
        "hook '_size_changer' has changed the size of value",
    )
    assert _error(engine, CASES["tensor hook changes the dtype"]) == (
        "RuntimeError",
        "hook '<lambda>' has changed the type of value (was engine.FloatTensor got "
        "engine.DoubleTensor)",
    )
    assert _error(engine, CASES["detach_ a slice without grad"])[1].startswith(
        "Can't detach views in-place. Use detach() instead."
    )
    assert _error(engine, CASES["inference add_"])[1].startswith(
        "Inplace update to inference tensor outside InferenceMode is not allowed."
    )


@pytest.mark.oracle
def test_none_from_a_node_hook_drops_that_gradient_in_both(torch: Any) -> None:
    grads = []
    for lib in (engine, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor([3.0, 4.0], requires_grad=True)
        y = x * w
        y.grad_fn.register_hook(lambda gi, go: (None, gi[1]))
        z = (y * 2.0) * 3.0
        z.grad_fn.register_prehook(lambda go: (go[0] * 2.0,))
        z.sum().backward()
        v = lib.tensor([1.0], requires_grad=True)
        u = v * 2.0
        u.grad_fn.register_prehook(lambda go: (None,))
        u.sum().backward()
        grads.append((x.grad, w.grad.tolist(), v.grad))
    assert grads[0] == grads[1] == (None, [12.0, 24.0], None)


@pytest.mark.oracle
def test_the_alphas_pytorch_takes_give_pytorchs_values(torch: Any) -> None:
    results = []
    for lib in (engine, torch):
        f, i = lib.tensor([1.0, 2.0]), lib.tensor([1, 2])
        c = lib.tensor([1 + 1j, 2.0], dtype=lib.complex64)
        values = [
            f.add(f, alpha=2),  # an int alpha with floats
            f.sub(f, alpha=0.5),
            i.add(i, alpha=3),
            i.add(2.5, alpha=2),  # the number makes the result float
            c.add(c, alpha=1j),
            c.sub(c, alpha=0.5),
            lib.tensor([True]).add(lib.tensor([False]), alpha=True),
            f.add(f, alpha=1),
        ]
        results.append([(str(v.dtype).split(".")[-1], v.tolist()) for v in values])
    assert results[0] == results[1]


def test_alpha_checks_without_pytorch() -> None:
    """The oracle's words, for machines without PyTorch."""
    assert _error(engine, CASES["complex alpha, float tensors"]) == (
        "RuntimeError",
        "For non-complex input tensors, argument alpha must not be a complex number.",
    )
    assert _error(engine, CASES["float alpha, int tensors"]) == (
        "RuntimeError",
        "For integral input tensors, argument alpha must not be a floating point number.",
    )
    assert _error(engine, CASES["bool alpha, float tensors"]) == (
        "RuntimeError",
        "Boolean alpha only supported for Boolean results.",
    )


@pytest.mark.oracle
def test_what_stays_allowed_is_allowed_in_both(torch: Any) -> None:
    for lib in (engine, torch):
        detached = lib.zeros(3, requires_grad=True).detach()
        assert detached.detach_() is detached  # a detached tensor is no view
        with lib.inference_mode():
            t = lib.zeros(3)
            t.add_(1.0)  # inside inference mode: allowed
            assert t[1:].is_inference()
        normal = lib.zeros(3)
        with lib.inference_mode():
            normal.add_(1.0)  # a normal tensor, in inference mode: allowed
        assert normal._version == 1 and t.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.oracle
@pytest.mark.parametrize(
    "size",
    [((1, 3),), (1, 3), (3,), ([1, 3],), ((),), (2, 3), (np.int64(3),)],
    ids=str,
)
def test_sum_to_size_takes_ints_or_one_sequence_like_pytorch(
    torch: Any, size: tuple[Any, ...]
) -> None:
    data = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    ours = engine.tensor(data, requires_grad=True)
    theirs = torch.tensor(data, requires_grad=True)
    expected = theirs.sum_to_size(*size)
    got = ours.sum_to_size(*size)
    assert got.shape == tuple(expected.shape)
    np.testing.assert_array_equal(got.detach().numpy(), expected.detach().numpy())
    assert ours.sum_to_size(size=(1, 3)).tolist() == theirs.sum_to_size(size=(1, 3)).tolist()


@pytest.mark.oracle
def test_a_grad_on_another_device_is_refused_in_pytorchs_words(torch: Any) -> None:
    def assign(lib: Any, leaf_device: str, grad_device: str) -> Any:
        return lambda lib: setattr(
            lib.zeros(2, device=leaf_device, requires_grad=True),
            "grad",
            lib.zeros(2, device=grad_device),
        )

    # PyTorch's CPU build has no second device type but "meta"; ours has "sim".
    ours = _error(engine, assign(engine, "cpu", "sim:0"))
    theirs = _error(torch, assign(torch, "cpu", "meta"))
    assert ours == (theirs[0], theirs[1].replace("'meta'", "'sim'"))
    assert _error(engine, assign(engine, "sim:1", "sim:0")) == (
        "RuntimeError",
        "attempting to assign a gradient located on device with index '0' to a tensor located "
        "on device with index '1'. Please ensure that the gradient and the tensor are on the same "
        "device",
    )
