"""Why an op made a NaN or an Inf, in words, from the numbers a trace kept.

Op names may be our engine's (``log``, taken from ``LogBackward0``) or
PyTorch's aten overloads (``aten.log.default``, ``aten._softmax.default``):
:func:`canonical_op` turns either into the same short name.

A trace holds tensor summaries, not tensors: shape, min, max, NaN and Inf
counts, and the values themselves when the tensor is small (``max_values``).
Each rule here names a cause only when those numbers show it: ``log of 0``
needs a 0 among the log's inputs, ``0/0`` a 0 in the numerator and the
denominator at the same place (or, without values, a 0 in each and a NaN
out). When the numbers do not show a known cause, the answer is the generic
:data:`NON_FINITE_INPUT` or :func:`unexplained`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from autograd_viz.trace.summary import TensorSummary

LOG_OF_ZERO = "log of 0"
LOG_OF_NEGATIVE = "log of a negative number"
ZERO_OVER_ZERO = "0/0"
DIVISION_BY_ZERO = "division by zero"
SQRT_AT_ZERO_BACKWARD = "sqrt at 0 in backward (1/(2·sqrt(0)))"
SQRT_OF_NEGATIVE = "sqrt of a negative number"
EXP_OVERFLOW = "exp overflow"
INF_MINUS_INF = "inf − inf"
ZERO_TIMES_INF = "0 × inf"
NON_FINITE_INPUT = "a non-finite input"
DIVISION_BY_ZERO_NORM = "division by a zero norm"
RSQRT_OF_ZERO = "rsqrt of 0"
POW_AT_ZERO_BACKWARD = "x ** p at 0 with p < 1 in backward (p·0^(p−1))"
ALL_MASKED = "softmax over a row that is all -inf (every position masked)"
OVERFLOW = "overflow: the result is larger than the dtype's largest value"

_ALIASES = {
    "true_divide": "div",
    "divide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "linalg_vector_norm": "norm",
    "frobenius_norm": "norm",
    "softmax_backward_data": "softmax",
    "safe_softmax": "softmax",
}
_LOGS = frozenset({"log", "log2", "log10"})
_EXPS = frozenset({"exp", "exp2", "expm1"})
_OVERFLOWING = frozenset(
    {"mul", "add", "sub", "sum", "mean", "mm", "matmul", "addmm", "bmm", "baddbmm", "pow",
     "cumsum", "prod", "square", "linear", "norm", "sinh", "cosh"}
)  # fmt: skip
_FILLS = frozenset({"masked_fill", "where", "full", "full_like", "new_full", "fill", "index_fill"})

Summaries = Sequence[TensorSummary | None]


def unexplained(op: str, value: str) -> str:
    """The cause for an op that made ``value`` from finite numbers by no rule known here."""
    return f"{op} produced {value} from finite inputs"


def held_cause(value: str, names: Sequence[str | None], inputs: Sequence[int]) -> str:
    """Why an op's output holds ``value`` when parameters held it before the op: ``parameter
    head.fc.weight held Inf before this op`` (Note [A parameter that holds a NaN] in
    ``nan/forward/births.py``)."""
    kind = "NaN" if value == "nan" else "Inf"
    which = [
        name if name is not None else f"input [{inputs[k] if k < len(inputs) else '?'}]"
        for k, name in enumerate(names)
    ]
    word = "parameter" if len(which) == 1 else "parameters"
    return f"{word} {', '.join(which)} held {kind} before this op"


def canonical_op(name: str) -> str:
    """``aten.log.default``, ``aten._softmax.default``, ``log`` → ``log``, ``softmax``, ``log``."""
    if name.startswith("aten."):
        name = name.split(".")[1]
    name = name.strip("_")
    return _ALIASES.get(name, name)


def forward_cause(
    op: str,
    value: str,
    inputs: Summaries,
    output: TensorSummary | None,
    input_ops: Sequence[str | None] = (),
) -> str:
    """Why the forward op ``op`` produced ``value`` (``"nan"`` or ``"inf"``) from ``inputs``.

    Args:
        op: the op, our engine's name or PyTorch's aten name.
        value: ``"nan"`` or ``"inf"``.
        inputs: the op's inputs.
        output: its output.
        input_ops: per input, the op that made it where that matters (``"norm"``).
    """
    op = canonical_op(op)
    first = inputs[0] if inputs else None
    second = inputs[1] if len(inputs) > 1 else None
    masks = op in ("softmax", "log_softmax") or "attention" in op
    if masks and value == "nan" and any(s is not None and _has_minus_inf(s) for s in inputs):
        return ALL_MASKED
    if op in _FILLS and (value == "nan" or (output is not None and _plus_inf(output))):
        return f"{op} wrote {value}: its fill value"
    if any(s is not None and not finite(s) for s in inputs):
        return _from_non_finite(op, value, first, second)
    if op in _LOGS and first is not None:
        if value == "nan" and has_negative(first):
            return LOG_OF_NEGATIVE
        if has_zero(first):
            return LOG_OF_ZERO
        if has_negative(first):
            return LOG_OF_NEGATIVE
    if op in ("sqrt", "rsqrt") and first is not None and has_negative(first):
        return SQRT_OF_NEGATIVE
    if op == "rsqrt" and first is not None and has_zero(first):
        return RSQRT_OF_ZERO
    if op in ("div", "reciprocal") and first is not None:
        cause = _division(first, second, value) if second is not None else None
        if op == "reciprocal" and has_zero(first):
            cause = DIVISION_BY_ZERO
        if cause is not None:
            divisor = 1 if op == "div" else 0
            if len(input_ops) > divisor and input_ops[divisor] == "norm":
                return DIVISION_BY_ZERO_NORM
            return cause
    if op == "addcdiv" and len(inputs) > 2 and inputs[1] is not None and inputs[2] is not None:
        cause = _division(inputs[1], inputs[2], value)  # self + value * tensor1 / tensor2
        if cause is not None:
            return cause
    if op in _EXPS and value == "inf":
        largest = _half_precision_limit(output, first)
        return EXP_OVERFLOW if largest is None else f"{EXP_OVERFLOW}: past {largest}"
    if op in _OVERFLOWING and value == "inf":
        largest = _largest(output, first)
        return OVERFLOW if largest is None else f"overflow: the result is past {largest}"
    return unexplained(op, value)


_LARGEST = {
    "float16": "65504",
    "bfloat16": "3.39e38",
    "float32": "3.40e38",
    "float64": "1.80e308",
}
"""The largest finite value of each float dtype, by the name a summary gives it."""


def _largest(*summaries: TensorSummary | None) -> str | None:
    """``float16's largest value, 65504``: the limit an overflow went past, if known."""
    for summary in summaries:
        if summary is None:
            continue
        name = summary.dtype.removeprefix("torch.")
        name = {"half": "float16", "float": "float32", "double": "float64"}.get(name, name)
        if name in _LARGEST:
            return f"{name}'s largest value, {_LARGEST[name]}"
    return None


def _half_precision_limit(*summaries: TensorSummary | None) -> str | None:
    """The limit an exp went past when it is a half-precision one (where exp(11.1) overflows)."""
    largest = _largest(*summaries)
    return largest if largest is not None and "16'" in largest else None


def backward_cause(op: str, value: str, grads: Summaries, saved: Summaries) -> str:
    """Why the backward of ``op`` returned ``value``, from its incoming ``grads`` and ``saved``."""
    op = canonical_op(op)
    first = saved[0] if saved else None
    if op == "sqrt" and first is not None and has_zero(first):
        return SQRT_AT_ZERO_BACKWARD
    if op == "log" and first is not None:
        if has_zero(first):
            return LOG_OF_ZERO
        if has_negative(first):
            return LOG_OF_NEGATIVE
    if op == "div" and len(saved) > 1 and saved[1] is not None and has_zero(saved[1]):
        return DIVISION_BY_ZERO
    if op == "pow" and value == "inf" and first is not None and has_zero(first):
        return POW_AT_ZERO_BACKWARD
    if op == "norm" and any(s is not None and has_zero(s) for s in saved[1:2]):
        return DIVISION_BY_ZERO_NORM  # saved: the input, then the norm itself
    known = [s for s in (*grads, *saved) if s is not None]
    if value == "nan" and any(has_inf(s) for s in known) and any(has_zero(s) for s in known):
        # mul and pow multiply the incoming gradient by a saved value: 0 times inf.
        return ZERO_TIMES_INF
    if any(not finite(s) for s in known):
        return NON_FINITE_INPUT
    return unexplained(f"{op} backward", value)


def _from_non_finite(
    op: str, value: str, first: TensorSummary | None, second: TensorSummary | None
) -> str:
    if value == "nan" and first is not None and second is not None:
        infinite = has_inf(first) and has_inf(second) and not (first.nan_count or second.nan_count)
        if op in ("sub", "add") and infinite and _opposite_infinities(op, first, second):
            return INF_MINUS_INF
        if op == "mul" and _zero_times_inf(first, second):
            return ZERO_TIMES_INF
    return NON_FINITE_INPUT


def _opposite_infinities(op: str, a: TensorSummary, b: TensorSummary) -> bool:
    """Whether ``a op b`` meets ``inf - inf`` somewhere, as far as the numbers tell."""
    left, right = values(a), values(b)
    if left is None or right is None:
        return True  # both hold an Inf and the result holds a NaN: nothing else makes one
    try:
        x, y = np.broadcast_arrays(left, right)
    except ValueError:
        return True
    y = -y if op == "sub" else y
    return bool(np.any(np.isinf(x) & np.isinf(y) & (np.sign(x) != np.sign(y))))


def _paired(a: TensorSummary, b: TensorSummary) -> tuple[Any, Any] | None:
    """Both tensors' recorded values, broadcast together; ``None`` when they can't be."""
    left, right = values(a), values(b)
    if left is None or right is None:
        return None
    try:
        return tuple(np.broadcast_arrays(left, right))  # type: ignore[return-value]
    except ValueError:
        return None


def _zero_times_inf(a: TensorSummary, b: TensorSummary) -> bool:
    pair = _paired(a, b)
    if pair is not None:
        x, y = pair
        return bool(np.any((np.isinf(x) & (y == 0)) | ((x == 0) & np.isinf(y))))
    return (has_inf(a) and has_zero(b)) or (has_zero(a) and has_inf(b))


def _division(a: TensorSummary, b: TensorSummary, value: str) -> str | None:
    pair = _paired(a, b)
    if pair is not None:
        x, y = pair
        if np.any((x == 0) & (y == 0)):
            return ZERO_OVER_ZERO
        return DIVISION_BY_ZERO if np.any(y == 0) else None
    if not has_zero(b):
        return None
    return ZERO_OVER_ZERO if value == "nan" and has_zero(a) else DIVISION_BY_ZERO


# -- what a summary shows --------------------------------------------------------------


def values(s: TensorSummary) -> np.ndarray | None:
    """The tensor's values in its shape, when the summary kept them."""
    if s.values is None:
        return None
    return np.asarray(s.values, dtype=np.float64).reshape(s.shape)


def finite(s: TensorSummary) -> bool:
    """Whether every element is finite."""
    return not s.nan_count and not s.inf_count


def has_inf(s: TensorSummary) -> bool:
    """Whether some element is +Inf or -Inf."""
    return s.inf_count > 0


def has_zero(s: TensorSummary) -> bool:
    """Whether some element is exactly 0, as the values, or the min or max, show."""
    array = values(s)
    if array is not None:
        return bool(np.any(array == 0))
    return s.min == 0 or s.max == 0


def _has_minus_inf(s: TensorSummary) -> bool:
    if not s.inf_count:
        return False
    array = values(s)
    if array is not None:
        return bool(np.any(np.isneginf(array)))
    return s.min is not None and s.min == -math.inf


def _plus_inf(s: TensorSummary) -> bool:
    array = values(s)
    if array is not None:
        return bool(np.any(np.isposinf(array)))
    return s.max is not None and s.max == math.inf


def has_negative(s: TensorSummary) -> bool:
    """Whether some element is below 0, as the values or the min show."""
    array = values(s)
    if array is not None:
        return bool(np.any(array < 0))
    return s.min is not None and not math.isnan(s.min) and s.min < 0
