"""``backward`` and ``grad``: the user-facing entry points, as in ``torch.autograd``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.anomaly import detect_anomaly, set_detect_anomaly  # noqa: F401 - torch.autograd's
from engine.engine import get_default_engine
from engine.graph import Edge, Node
from engine.tensor import Tensor

__all__ = [
    "Identity",
    "TensorOrTensors",
    "backward",
    "grad",
]

TensorOrTensors = Tensor | Sequence[Tensor]


class Identity(Node):
    """A node outside every graph: the edge of an input that was never used."""

    __slots__ = ()

    def apply(self, grads: list[Any]) -> list[Any]:
        return grads


def _as_tuple(value: Any, what: str) -> tuple[Any, ...]:
    if isinstance(value, Tensor):
        return (value,)
    if value is None:
        return ()
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(
            f"{what} must be a Tensor or a sequence of Tensors, got {type(value).__name__}"
        ) from None
    return items


def _make_grads(outputs: Sequence[Tensor], grads: Sequence[Any]) -> list[Tensor | None]:
    """Default or check the gradient of each output (PyTorch's ``_make_grads``)."""
    from engine.factories import ones_like

    new_grads: list[Tensor | None] = []
    for i, (out, grad) in enumerate(zip(outputs, grads, strict=True)):
        if not isinstance(out, Tensor):
            raise TypeError(f"element {i} of tensors is not a Tensor (got {type(out).__name__})")
        if isinstance(grad, Tensor):
            if grad.shape != out.shape:
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of Size({list(grad.shape)}) "
                    f"and output[{i}] has a shape of Size({list(out.shape)})."
                )
            new_grads.append(grad)
        elif grad is None:
            if out.requires_grad:
                if out.numel() != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                new_grads.append(ones_like(out))
            else:
                new_grads.append(None)
        else:
            raise TypeError(
                f"gradients can be either Tensors or None, but got {type(grad).__name__}"
            )
    return new_grads


def _root_edges(tensors: Sequence[Tensor]) -> list[Edge]:
    edges = []
    for i, t in enumerate(tensors):
        if not t.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
        edges.append(t.gradient_edge())
    return edges


def _input_edges(inputs: Sequence[Tensor], accumulate_grad: bool) -> list[Edge]:
    edges = []
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs[{i}] is not a Tensor (got {type(t).__name__})")
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        if t.grad_fn is not None:
            if accumulate_grad:
                t.retain_grad()
            edges.append(Edge(t.grad_fn, t._output_nr))
            continue
        ref = t._grad_accumulator
        acc = ref() if ref is not None else None
        edges.append(Edge(acc, 0) if acc is not None else Edge(Identity(), 0))
    return edges


def backward(
    tensors: TensorOrTensors,
    grad_tensors: TensorOrTensors | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: TensorOrTensors | None = None,
) -> None:
    """Accumulate gradients of ``tensors`` into the ``.grad`` of graph leaves.

    Args:
        tensors: the roots; scalars unless ``grad_tensors`` is given.
        grad_tensors: the gradient of each root (``None`` for scalars: 1).
        retain_graph: keep saved tensors for another backward (default: ``create_graph``).
        create_graph: record the backward itself, for higher-order gradients.
        inputs: accumulate only into these tensors; prunes the rest of the graph.

    Raises:
        RuntimeError: PyTorch's messages for non-scalar roots without
            gradients, roots that do not require grad, and empty ``inputs``.
    """
    if inputs is not None and not isinstance(inputs, Tensor) and len(tuple(inputs)) == 0:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    roots = _as_tuple(tensors, "tensors")
    grads = (
        _as_tuple(grad_tensors, "grad_tensors")
        if grad_tensors is not None
        else (None,) * len(roots)
    )
    if len(grads) != len(roots):
        raise RuntimeError(
            "grad can be implicitly created only for scalar outputs"
            if not grads
            else f"got {len(grads)} gradients for {len(roots)} tensors; pass one per tensor"
        )
    made = _make_grads(roots, grads)
    if retain_graph is None:
        retain_graph = create_graph
    edges = _root_edges(roots)
    in_tuple = _as_tuple(inputs, "inputs")
    output_edges = _input_edges(in_tuple, accumulate_grad=True) if in_tuple else []
    get_default_engine().execute(edges, made, retain_graph, create_graph, True, output_edges)


def grad(
    outputs: TensorOrTensors,
    inputs: TensorOrTensors,
    grad_outputs: TensorOrTensors | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``.

    Args:
        outputs: the differentiated tensors.
        inputs: what to differentiate with respect to.
        grad_outputs: the gradient of each output (``None`` for scalars: 1).
        retain_graph: keep saved tensors for another backward (default: ``create_graph``).
        create_graph: record the backward, for higher-order gradients.
        allow_unused: return ``None`` for inputs the outputs do not depend on
            instead of raising.
        materialize_grads: return zeros instead of ``None`` for unused inputs.

    Returns:
        One gradient per input.

    Raises:
        RuntimeError: PyTorch's messages for unused inputs, empty inputs and
            outputs that do not require grad.
    """
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
            "allow_unused=False."
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    outs = _as_tuple(outputs, "outputs")
    ins = _as_tuple(inputs, "inputs")
    if not ins:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    grads = (
        _as_tuple(grad_outputs, "grad_outputs") if grad_outputs is not None else (None,) * len(outs)
    )
    if len(grads) != len(outs):
        raise RuntimeError(
            f"grad_outputs has {len(grads)} tensors but outputs has {len(outs)}; "
            f"pass one per output"
        )
    made = _make_grads(outs, grads)
    if retain_graph is None:
        retain_graph = create_graph
    edges = _root_edges(outs)
    output_edges = _input_edges(ins, accumulate_grad=False)
    result = get_default_engine().execute(
        edges, made, retain_graph, create_graph, False, output_edges
    )
    if not allow_unused:
        for i, r in enumerate(result):
            if r is None:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the "
                    f"graph. Set allow_unused=True if this is the desired behavior."
                )
    if materialize_grads:
        from engine.factories import zeros_like

        result = [zeros_like(x) if r is None else r for r, x in zip(result, ins, strict=True)]
    return tuple(result)
