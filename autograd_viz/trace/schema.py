"""The trace file's schema: decoding JSON values into typed records, strictly.

Every value read from a trace file passes through a *reader*: a function that
takes the raw JSON value and returns the decoded Python value or raises
:class:`SchemaError` naming what was wrong. Readers compose (``optional``,
``list_of``, ``record``), so the schema below reads as a table of what each
event kind carries; ``docs/trace-format.md`` documents the same table.

Nothing here evaluates or unpickles anything: JSON in, dataclasses out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from autograd_viz.trace import fast
from autograd_viz.trace.summary import TensorSummary

Reader = Callable[[Any], Any]


class SchemaError(ValueError):
    """A value does not match the schema (the caller adds the line number)."""


# -- floats: JSON has no NaN or Inf, so they travel as strings ------------------------

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_float(value: float) -> float | str:
    """A float as JSON: itself when finite, else ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def read_float(value: Any) -> float:
    if type(value) is float and value - value == 0.0:  # the common case: finite (inf - inf is nan)
        return value
    if isinstance(value, bool):
        raise SchemaError(f"expected a number, got {_kind(value)}")
    if isinstance(value, int | float):
        try:
            result = float(value)
        except OverflowError:
            raise SchemaError("number out of range") from None
        if not math.isfinite(result):
            raise SchemaError("number out of range")
        return result
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    raise SchemaError(f"expected a number, got {_kind(value)}")


_NUMBERS = frozenset({float, int})


def read_floats(value: Any) -> tuple[float, ...]:
    """A list of numbers (a summary's values): one pass in C when every one is finite."""
    if type(value) is list and set(map(type, value)) <= _NUMBERS:
        try:
            if math.isfinite(sum(value)):  # any Inf or NaN, or an overflow, makes it not
                return tuple(map(float, value))
        except OverflowError:
            pass  # a huge integer: the exact check below names it
    return _each_float(value)


# -- scalar readers --------------------------------------------------------------------

_INT_LIMIT = fast.INT_LIMIT


def read_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"expected an integer, got {_kind(value)}")
    if not -_INT_LIMIT <= value <= _INT_LIMIT:
        raise SchemaError(f"integer {show(value)} out of range")
    return value


def read_count(value: Any) -> int:
    result = read_int(value)
    if result < 0:
        raise SchemaError(f"expected a non-negative integer, got {result}")
    return result


def read_str(value: Any) -> str:
    if not isinstance(value, str):
        raise SchemaError(f"expected a string, got {_kind(value)}")
    return value


def read_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SchemaError(f"expected true or false, got {_kind(value)}")
    return value


def one_of(*choices: str) -> Reader:
    def read(value: Any) -> str:
        text = read_str(value)
        if text not in choices:
            raise SchemaError(f"expected one of {', '.join(choices)}; got {show(text)}")
        return text

    return read


def optional(reader: Reader) -> Reader:
    def read(value: Any) -> Any:
        return None if value is None else reader(value)

    return read


def list_of(reader: Reader) -> Reader:
    def read(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise SchemaError(f"expected a list, got {_kind(value)}")
        out: list[Any] = []
        try:
            for item in value:
                out.append(reader(item))
        except SchemaError as exc:
            raise SchemaError(f"[{len(out)}]: {exc}") from None
        return tuple(out)

    return read


_each_float = list_of(read_float)


def tuple_of(*readers: Reader) -> Reader:
    def read(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise SchemaError(f"expected a list of {len(readers)} items, got {_kind(value)}")
        if len(value) != len(readers):
            raise SchemaError(f"expected a list of {len(readers)} items, got {len(value)}")
        out: list[Any] = []
        try:
            for reader, item in zip(readers, value, strict=True):
                out.append(reader(item))
        except SchemaError as exc:
            raise SchemaError(f"[{len(out)}]: {exc}") from None
        return tuple(out)

    return read


def str_map(reader: Reader) -> Reader:
    def read(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise SchemaError(f"expected an object, got {_kind(value)}")
        out = {}
        for key, item in value.items():
            try:
                out[key] = reader(item)
            except SchemaError as exc:
                raise SchemaError(f"{show(key)}: {exc}") from None
        return out

    return read


def record(fields: Mapping[str, Reader], optional_fields: Mapping[str, Reader] = {}) -> Reader:
    """A JSON object with exactly ``fields`` (plus any of ``optional_fields``)."""
    readers = {**optional_fields, **fields}
    required = frozenset(fields)
    allowed = frozenset(readers)

    def read(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise SchemaError(f"expected an object, got {_kind(value)}")
        keys = value.keys()
        if not keys >= required:
            missing = next(name for name in fields if name not in value)
            raise SchemaError(f"missing field {missing!r}")
        if not keys <= allowed:
            unknown = next(name for name in value if name not in allowed)
            raise SchemaError(f"unknown field {show(unknown)}")
        out = {}
        name = ""
        try:
            for name, item in value.items():
                out[name] = readers[name](item)
        except SchemaError as exc:
            raise SchemaError(f"{name}: {exc}") from None
        return out

    return read


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {show(value)}"
    return names.get(type(value), type(value).__name__)


_SHOWN = 60


def show(value: Any) -> str:
    """``repr(value)`` cut to a length that fits in an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**_SHOWN:
        return f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, list | dict):
        return _kind(value)  # a nested value's repr is neither short nor useful
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


# -- tensor summaries -------------------------------------------------------------------

_shape = list_of(read_count)
_opt_float = optional(read_float)

_SUMMARY = record(
    {"shape": _shape, "dtype": read_str, "device": read_str},
    {
        "min": _opt_float,
        "max": _opt_float,
        "mean": _opt_float,
        "norm": _opt_float,
        "nan_count": read_count,
        "inf_count": read_count,
        "values": read_floats,
    },
)


def read_summary(value: Any) -> TensorSummary:
    """A tensor summary; a well-formed one is read in one step (Note [Fast readers])."""
    read = fast.summary(value)
    return read if read is not None else _read_summary_checked(value)


def _read_summary_checked(value: Any) -> TensorSummary:
    fields = _SUMMARY(value)
    values = fields.get("values")
    if values is not None:
        # Views reshape the values to the shape (the NaN report's causes do).
        numel = math.prod(fields["shape"])
        if len(values) != numel:
            raise SchemaError(
                f"values: {len(values)} values for a tensor of shape {list(fields['shape'])}, "
                f"which has {numel}"
            )
    return TensorSummary(**fields)


def encode_summary(summary: TensorSummary) -> dict[str, Any]:
    """A summary as a JSON object; statistics that are unknown are left out."""
    out: dict[str, Any] = {
        "shape": list(summary.shape),
        "dtype": summary.dtype,
        "device": summary.device,
    }
    for name in ("min", "max", "mean", "norm"):
        value = getattr(summary, name)
        if value is not None:
            out[name] = encode_float(value)
    if summary.nan_count:
        out["nan_count"] = summary.nan_count
    if summary.inf_count:
        out["inf_count"] = summary.inf_count
    if summary.values is not None:
        out["values"] = [encode_float(float(v)) for v in summary.values]
    return out


def read_path(value: Any) -> str:
    """A module path: a non-empty string (``"transformer.h.3.attn"``)."""
    text = read_str(value)
    if not text:
        raise SchemaError("expected a module path, got an empty string")
    return text


scope = list_of(tuple_of(read_path, read_count))
"""A node's ``scope``: ``[[path, call], ...]``, outermost first (version 5)."""
modules = str_map(read_str)
"""A graph task's ``modules``: ``{path: class name}`` (version 5)."""

summary = read_summary
opt_summary = optional(read_summary)
summaries = list_of(opt_summary)
lines = list_of(read_str)

# -- event data, kind by kind ------------------------------------------------------------

EVENT_DATA: dict[str, tuple[dict[str, Reader], dict[str, Reader]]] = {
    "graph_task_start": (
        {
            "roots": list_of(tuple_of(read_int, read_str, read_count)),
            "root_grads": summaries,
            "outputs": list_of(tuple_of(read_int, read_count)),
            "keep_graph": read_bool,
            "create_graph": read_bool,
            "reentrant_depth": read_count,
            "parent_graph_task": optional(read_int),
        },
        {"source": read_str},
    ),
    "graph_task_end": (
        {
            "status": one_of("ok", "error"),
            "exc_type": optional(read_str),
            "message": optional(read_str),
            "captured": summaries,
        },
        {},
    ),
    "enqueue": (
        {
            "queue": read_str,
            "queue_owner": read_str,
            "reason": one_of("root", "ready", "wake-up"),
            "queue_length": read_count,
        },
        {},
    ),
    "node_start": ({"inputs": summaries}, {}),
    "node_end": ({"outputs": summaries}, {}),
    "dependency_decrement": (
        {
            "from_node": read_int,
            "from_name": read_str,
            "input_nr": read_count,
            "remaining": read_count,
        },
        {},
    ),
    "accumulate": (
        # grad and total: null in a trace recorded without them (version 9, Note [Values tiers])
        {
            "target": one_of("buffer", "leaf"),
            "action": one_of("created", "added"),
            "grad": opt_summary,
        },
        {
            "slot": read_count,
            "from_node": read_int,
            "total": opt_summary,
            "leaf_name": optional(read_str),
        },
    ),
    "capture": ({"slot": read_count, "output_index": read_count, "grad": opt_summary}, {}),
    "hook": (
        {"hook": read_str, "replaced": read_bool, "hook_name": read_str},
        {"slot": read_count, "location": read_str, "before": opt_summary, "after": opt_summary},
    ),
    "skip": ({"from_node": read_int, "input_nr": read_count, "reason": read_str}, {}),
    "release_variables": ({"count": read_count}, {}),
    "comm": (
        {
            "op": read_str,
            "phase": one_of("launched", "finished"),
            "bucket": read_count,
            "bytes": read_count,
            "params": list_of(read_str),
        },
        {},
    ),
    "anomaly": (
        {
            "output_index": read_count,
            "value": one_of("nan", "inf"),
            "traceback": optional(lines),
        },
        {
            "phase": one_of("backward", "forward"),
            "raised": read_bool,
            "grad": opt_summary,
            "op": read_str,
            "born": read_bool,
            "tensor": summary,
            "inputs": optional(summaries),
            "nonfinite_inputs": list_of(read_count),
            # PyTorch (autograd_viz.sources.pytorch.forward): the aten op, the module, and
            # what says why: which inputs were norms, and a backward node's saved tensors.
            "aten_op": read_str,
            "module": optional(read_str),
            "input_ops": list_of(optional(read_str)),
            "saved": summaries,
        },
    ),
    "error": (
        {
            "exc_type": read_str,
            "message": read_str,
            "first": read_bool,
            "traceback": optional(lines),
        },
        {},
    ),
    "reentrant_enter": (
        {
            "parent_graph_task": optional(read_int),
            "depth": read_count,
            "current_depth": read_count,
            "on_pool": read_bool,
        },
        {},
    ),
    "reentrant_exit": (
        {"parent_graph_task": optional(read_int), "depth": read_count, "ok": read_bool},
        {},
    ),
    "derived_mismatch": (
        {
            "check": read_str,
            "expected": optional(tuple_of(read_int, read_str)),
            "observed": optional(tuple_of(read_int, read_str)),
            "message": read_str,
        },
        {},
    ),
}
"""For each event kind: its required data fields and its optional ones."""

DERIVED: dict[str, Reader] = {"derived": read_bool}
"""Any event may say it was derived rather than observed (a bridge's replayed bookkeeping)."""

EVENT_DATA_READERS: dict[str, Reader] = {
    kind: record(required, {**extra, **DERIVED}) for kind, (required, extra) in EVENT_DATA.items()
}
