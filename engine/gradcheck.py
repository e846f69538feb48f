"""``gradcheck``: compare backward against finite differences, in float64."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.autograd import grad as autograd_grad
from engine.devices import CPU, Device, device_context, move_array
from engine.tensor import Tensor

__all__ = [
    "GradcheckError",
    "analytical_jacobian",
    "gradcheck",
    "gradgradcheck",
    "numerical_jacobian",
]


class GradcheckError(RuntimeError):
    """Raised by :func:`gradcheck` when analytical and numerical gradients disagree."""


def _as_outputs(result: Any) -> tuple[Tensor, ...]:
    if isinstance(result, Tensor):
        return (result,)
    return tuple(r for r in result if isinstance(r, Tensor))


def _host_float64(t: Tensor) -> np.ndarray[Any, Any]:
    """A flat float64 NumPy copy of ``t``'s values (a copy: the inputs are perturbed in place
    and an output may be a view of one)."""
    data = move_array(t.data, t.device, CPU) if t.device.type == "cuda" else t.data
    return np.array(data, dtype=np.float64).ravel()


def _on_device(array: np.ndarray[Any, Any], device: Device) -> Tensor:
    """A tensor holding host values on ``device`` (a copy for ``cuda``)."""
    return Tensor._make(move_array(array, CPU, device) if device.type == "cuda" else array, device)


def _float64_inputs(inputs: Sequence[Any]) -> list[Any]:
    converted = []
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad:
            with device_context(x.device):
                t = Tensor._make(x.data.astype(np.float64), x.device)
            t.name = x.name
            t.requires_grad = True
            converted.append(t)
        else:
            converted.append(x)
    return converted


def numerical_jacobian(
    fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6
) -> list[list[np.ndarray[Any, Any]]]:
    """Central differences: ``J[out][in]`` of shape ``(out.numel(), in.numel())``.

    ``fn`` runs with grad mode as the caller has it, so functions that call
    ``engine.grad`` themselves (higher-order checks) work.
    """
    diff_inputs = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]

    def evaluate() -> list[np.ndarray[Any, Any]]:
        return [_host_float64(o) for o in _as_outputs(fn(*inputs))]

    base = evaluate()
    jac = [[np.zeros((o.size, x.numel())) for x in diff_inputs] for o in base]
    for j, x in enumerate(diff_inputs):
        flat = x.data.reshape(-1)
        for k in range(flat.size):
            orig = flat[k].item()
            flat[k] = orig + eps
            plus = evaluate()
            flat[k] = orig - eps
            minus = evaluate()
            flat[k] = orig
            for i in range(len(base)):
                jac[i][j][:, k] = (plus[i] - minus[i]) / (2 * eps)
    return jac


def analytical_jacobian(
    fn: Callable[..., Any], inputs: Sequence[Any]
) -> list[list[np.ndarray[Any, Any]]]:
    """Backward, one output element at a time: ``J[out][in]``."""
    diff_inputs = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    outputs = _as_outputs(fn(*inputs))
    jac = [[np.zeros((o.numel(), x.numel())) for x in diff_inputs] for o in outputs]
    for i, out in enumerate(outputs):
        if not out.requires_grad:
            continue
        for r in range(out.numel()):
            seed = np.zeros(out.numel(), dtype=out.dtype)
            seed[r] = 1.0
            g = _on_device(seed.reshape(out.shape), out.device)
            grads = autograd_grad(out, diff_inputs, g, retain_graph=True, allow_unused=True)
            for j, gj in enumerate(grads):
                if gj is not None:
                    jac[i][j][r, :] = _host_float64(gj)
    return jac


def gradcheck(
    fn: Callable[..., Any],
    inputs: Any,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check ``fn``'s gradients against finite differences.

    Inputs that require grad are copied to float64 first, so the check is
    meaningful whatever precision the caller works in.

    Args:
        fn: a function of ``inputs`` returning a tensor or a tuple of tensors.
        inputs: a tensor or a tuple of arguments.
        eps: finite-difference step.
        atol: absolute tolerance.
        rtol: relative tolerance.
        raise_exception: raise on mismatch (else return ``False``).

    Returns:
        ``True`` when every entry of the Jacobians agrees.

    Raises:
        GradcheckError: naming each output/input pair whose Jacobians differ,
            with the worst entries.
    """
    args = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    if not any(isinstance(x, Tensor) and x.requires_grad for x in args):
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    args64 = _float64_inputs(args)
    numerical = numerical_jacobian(fn, args64, eps)
    analytical = analytical_jacobian(fn, args64)
    problems = []
    for i, (num_row, ana_row) in enumerate(zip(numerical, analytical, strict=True)):
        for j, (num, ana) in enumerate(zip(num_row, ana_row, strict=True)):
            bad = ~np.isclose(ana, num, rtol=rtol, atol=atol, equal_nan=False)
            if bad.any():
                where = np.argwhere(bad)[:5]
                entries = ", ".join(
                    f"[{r}, {c}] analytical={ana[r, c]:.6g} numerical={num[r, c]:.6g}"
                    for r, c in where
                )
                problems.append(
                    f"Jacobian mismatch for output {i} with respect to input {j} "
                    f"({int(bad.sum())} of {bad.size} entries differ): {entries}"
                )
    if problems:
        if raise_exception:
            raise GradcheckError("\n".join(problems))
        return False
    return True


def gradgradcheck(
    fn: Callable[..., Any],
    inputs: Any,
    grad_outputs: Any = None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check second-order gradients: ``gradcheck`` of the first gradients of ``fn``.

    The first gradients are ``grad(fn(*inputs), inputs, grad_outputs, create_graph=True)``;
    when ``grad_outputs`` is ``None`` a fixed random one is drawn (float64), so that the
    check covers more than the sum of the outputs.

    Returns:
        ``True`` when the second-order Jacobians agree with finite differences.

    Raises:
        GradcheckError: as :func:`gradcheck`.
    """
    args = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    args64 = _float64_inputs(args)
    diff_positions = [i for i, x in enumerate(args64) if isinstance(x, Tensor) and x.requires_grad]
    outputs = _as_outputs(fn(*args64))
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        seeds = [_on_device(rng.standard_normal(o.shape), o.device) for o in outputs]
    else:
        seeds = list((grad_outputs,) if isinstance(grad_outputs, Tensor) else grad_outputs)

    def first_grads(*diff: Tensor) -> tuple[Any, ...]:
        call = list(args64)
        for pos, value in zip(diff_positions, diff, strict=True):
            call[pos] = value
        outs = _as_outputs(fn(*call))
        return autograd_grad(outs, diff, seeds, create_graph=True, allow_unused=True)

    diff_inputs = tuple(args64[i] for i in diff_positions)
    return gradcheck(first_grads, diff_inputs, eps, atol, rtol, raise_exception)
