"""The trace file's schema: what each record and each event kind carries, as readers.

Every value read from a trace file passes through a *reader*
(:mod:`autograd_viz.trace.readers`): it takes the raw JSON value and returns
the decoded Python value or raises :class:`SchemaError` naming what was
wrong. Readers compose (:mod:`autograd_viz.trace.compose`: ``optional``,
``list_of``, ``record``), so the schema below reads as a table of what each
record and event kind carries; ``docs/trace-format.md`` documents the same
table.

Note [One reader]
~~~~~~~~~~~~~~~~~
The table is the one description of the format. Calling a reader reads a
value field by field, a function call per field, and names the first thing
wrong ("data: grad: shape: [0]: expected a non-negative integer, got -1").
Most of a trace file is a few kinds of record of one shape each, read by the
hundred thousand, so :func:`autograd_viz.trace.fast.compiled` turns a
record's reader into one straight-line function: each reader writes the
code of its usual case (:meth:`Reader.test`, :meth:`Reader.emit`: "an int
within bounds", "a list of them") beside the code that reads it field by
field, and the compiled function runs the record's code in one go. On
anything unusual, valid or not (a missing field, a string where a number is
expected), it hands the value, untouched, to the reader itself, which
accepts what it always did and names what is wrong. Where that check is
cheap to place, a field reads its own unusual values where they stand: a
float written as ``"nan"`` or as an integer does not send its record back
(:func:`~autograd_viz.trace.readers.emit_or_read`). So the compiled
function returns exactly what the reader returns, or raises what it raises;
``tests/viz/trace/test_trace_fast.py`` checks both on real traces and on mutations
of them, and ``benchmarks/trace_load.py`` measures what the compiled
functions earn.

Nothing here evaluates or unpickles anything: JSON in, dataclasses out. The
compiled code is made from this table alone, never from a file's contents.
"""

from __future__ import annotations

import math
from typing import Any

from autograd_viz.trace.compose import (
    list_of,
    optional,
    read_floats,
    record,
    str_map,
    tuple_of,
)
from autograd_viz.trace.readers import (
    Reader,
    SchemaError,
    anything,
    encode_float,
    kind,
    one_of,
    read_bool,
    read_count,
    read_float,
    read_int,
    read_path,
    read_str,
    show,
)
from autograd_viz.trace.records import LeafInfo, NodeInfo, new_node_info
from autograd_viz.trace.summary import TensorSummary, new_summary

__all__ = [
    "EVENT", "EVENT_DATA", "EVENT_DATA_READERS", "GRAPH_TASK", "HEADER", "NODE", "Reader",
    "SchemaError", "encode_float", "encode_summary", "kind", "show",
]  # fmt: skip

# -- tensor summaries -------------------------------------------------------------------

_opt_float = optional(read_float)


def _summary(*fields: Any) -> TensorSummary:
    """``new_summary(*fields)``, once its values (the last field) fit its shape (the first)."""
    shape, values = fields[0], fields[-1]
    if values is not None and len(values) != math.prod(shape):
        # Views reshape the values to the shape (the NaN report's causes do).
        raise SchemaError(
            f"values: {len(values)} values for a tensor of shape {list(shape)}, "
            f"which has {math.prod(shape)}"
        )
    return new_summary(*fields)


summary = record(
    {"shape": list_of(read_count), "dtype": read_str, "device": read_str},
    {
        "min": _opt_float,
        "max": _opt_float,
        "mean": _opt_float,
        "norm": _opt_float,
        "nan_count": read_count,
        "inf_count": read_count,
        "values": read_floats,
    },
    build=_summary,
    defaults={"nan_count": 0, "inf_count": 0},
)
"""A tensor summary."""


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


scope = list_of(tuple_of(read_path, read_count))
"""A node's ``scope``: ``[[path, call], ...]``, outermost first (version 5)."""
scopes = list_of(tuple_of(optional(read_count), read_path, read_count))
"""A graph task's ``scopes``: ``[[parent, path, call], ...]``, each scope its innermost call
below the scope ``parent`` (an earlier index, or ``null``) (version 12)."""
modules = str_map(read_str)
"""A graph task's ``modules``: ``{path: class name}`` (version 5)."""

opt_summary = optional(summary)
summaries = list_of(opt_summary)
lines = list_of(read_str)

# -- records ----------------------------------------------------------------------------

PROCESS = record(
    {
        "pid": read_int,
        "host": read_str,
        "rank": optional(read_count),
        "world_size": optional(read_count),
        "local_rank": optional(read_count),
        "backend": optional(read_str),
        "launcher": optional(read_str),
        "clock": tuple_of(read_int, read_int),
    }
)

HEADER = record(
    {
        "type": one_of("header"),
        "format": read_str,
        "version": read_int,
        "engine": read_str,
        "max_values": read_count,
    },
    {
        "sources": list_of(read_str),
        "process": PROCESS,
        "values": one_of("none", "leaves"),  # version 9 (Note [Values tiers]); all: left out
        "observe": one_of("calls"),  # version 10 (Note [Observation levels]); nodes: left out
    },
)

LEAF = record(
    {
        "name": optional(read_str),
        "shape": list_of(read_count),
        "dtype": read_str,
        "device": read_str,
        "grad": opt_summary,
    },
    {"aliases": list_of(read_str)},  # version 11
    build=LeafInfo,
    defaults={"aliases": ()},
)


def _node(kind: str, graph_task: int, node_id: int, *fields: Any) -> tuple[int, NodeInfo]:
    *known, scope_ref = fields
    if scope_ref is not None:
        if known[-1]:
            raise SchemaError("a node has a scope or a scope_ref, not both")
        # An index into its graph task's scopes, which the loader puts in its place.
        known[-1] = scope_ref
    return graph_task, new_node_info(node_id, *known)


NODE = record(
    {
        "type": one_of("node"),
        "graph_task": read_int,
        "id": read_int,
        "name": read_str,
        "sequence_nr": read_int,
        "topological_nr": read_count,
        "device": read_str,
        "next_edges": list_of(optional(tuple_of(read_int, read_count))),
        "inputs": list_of(tuple_of(list_of(read_count), read_str, read_str)),
        "dependencies": read_count,
        "status": one_of("needed", "pruned"),
        "captures": list_of(tuple_of(read_count, read_count)),
        "saved": summaries,
        "hooks": list_of(tuple_of(read_str, read_count)),
        "traceback": optional(lines),
    },
    {"leaf": LEAF, "scope": scope, "scope_ref": read_count},  # scope_ref: version 12
    build=_node,
    defaults={"scope": ()},
)
"""A node record: ``(graph task, NodeInfo)``."""

GRAPH_TASK = record(
    {
        "type": one_of("graph_task"),
        "id": read_int,
        "parent": optional(read_int),
        "reentrant_depth": read_count,
        "keep_graph": read_bool,
        "create_graph": read_bool,
        "root": read_int,
        "roots": list_of(tuple_of(read_int, read_str, read_count)),
        "outputs": list_of(tuple_of(read_int, read_count)),
        "thread": read_str,
        "nodes": read_count,
    },
    {"modules": modules, "call": read_count, "cut": read_str, "scopes": scopes},
)

EVENT = record(
    {
        "type": one_of("event"),
        "kind": read_str,
        "seq": read_int,
        "t_ns": read_int,
        "thread": read_str,
        "device": read_str,
        "graph_task": read_int,
        "node": optional(
            tuple_of(read_int, read_str, read_int, read_count),
        ),
        "data": anything,  # read by the kind's reader: _read_event_data
    }
)

# -- event data, kind by kind ------------------------------------------------------------

_REASONS = (
    "frozen", "never used", "used without grad", "cut", "never reaches the loss",
    "pruned", "no gradient from its node", "not on the graph", "exact zeros",
)  # fmt: skip
"""Why a parameter got no gradient (``autograd_viz.grads.report``'s reasons)."""
_finding = record(
    {
        "parameter": read_str,
        "module": optional(read_str),
        "shape": list_of(read_count),
        "reason": one_of(*_REASONS),
        "why": read_str,
    },
    {"where": record({"file": read_str, "line": read_int, "function": read_str, "code": read_str})},
)
"""A ``grads`` finding: a parameter without gradient (or of zeros), why, and the line."""
_flow_row = record(
    {
        "module": read_str,
        "grad_norm": read_float,
        "param_norm": read_float,
        "parameters": read_count,
    },
    {"flag": one_of("vanishing", "exploding")},
)
"""A module's gradient in a call."""

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
            # PyTorch (autograd_viz.nan.forward.checks): the aten op, the module, and
            # what says why: which inputs were norms, and a backward node's saved tensors.
            "aten_op": read_str,
            "module": optional(read_str),
            "input_ops": list_of(optional(read_str)),
            "saved": summaries,
            # PyTorch, lineage (Note [Lineage] in nan/forward/lineage.py): a
            # birth's number, the births a value came from, and what it reached.
            "birth": read_count,
            "lineage": list_of(read_count),
            "reached": one_of("loss", "parameter", "output"),
            # PyTorch: the inputs that were parameters holding the value before the op,
            # and their names (Note [A parameter that holds a NaN] in nan/forward/births.py).
            "held_inputs": list_of(read_count),
            "held_names": list_of(optional(read_str)),
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
    "grads": (
        # Version 13: what ``autograd-viz grads`` found about the call (Note [Gradient
        # findings in a trace] in autograd_viz/grads/recorded.py), after its end.
        {"findings": list_of(_finding), "flow": list_of(_flow_row)},
        {
            "call_kind": one_of("backward", "grad"),
            "parameters": read_count,
            "flow_left_out": read_count,
        },
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
