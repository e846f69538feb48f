"""Fast readers: the common records of a trace file, read in one step.

Note [Fast readers]
~~~~~~~~~~~~~~~~~~~
Most of a trace file is a few kinds of record of one shape each: tensor
summaries, node snapshots, and the events a backward emits by the thousand
(``enqueue``, ``dependency_decrement``, ``accumulate``, ``node_start``,
``node_end``). Reading each field through the composed readers of
:mod:`autograd_viz.trace.schema` costs a function call per field; a fast
reader checks the same types and ranges in straight-line code and builds the
result directly.

A fast reader returns exactly what the checked reader would return, or
``None`` when it is not sure: any record that is unusual, valid or not (an
integer where a float is expected, a NaN written as ``"nan"``, an unknown
field, a missing one). The caller then runs the checked reader, which accepts
what it always did and names what is wrong. So a fast reader never accepts
what the checked one rejects, never raises, and leaves its argument as it was
unless it returns a value. ``tests/viz/test_trace_fast.py`` checks each one
against its checked reader, on real traces and on mutations of them.
``benchmarks/trace_load.py`` measures what they earn: a load takes 1.4× as
long without them.
"""

from __future__ import annotations

import math
from typing import Any

from autograd_viz.trace.records import LeafInfo, NodeInfo, new_node_info
from autograd_viz.trace.summary import TensorSummary, new_summary

INT_LIMIT = 2**64
"""The bound every integer of a trace file lies within (``schema.read_int``)."""

_FLOAT = frozenset({float})

# -- tensor summaries ---------------------------------------------------------------------

SUMMARY_NEEDS = frozenset({"shape", "dtype", "device"})
"""The fields every summary has."""
SUMMARY_TAKES = SUMMARY_NEEDS | {
    "min", "max", "mean", "norm", "nan_count", "inf_count", "values"
}  # fmt: skip
"""Every field a summary may have."""


def summary(value: Any) -> TensorSummary | None:
    """A summary whose every field is of the usual type and in range, else ``None``."""
    if type(value) is not dict or not SUMMARY_NEEDS <= value.keys() <= SUMMARY_TAKES:
        return None
    shape, dtype, device = value["shape"], value["dtype"], value["device"]
    if type(shape) is not list or type(dtype) is not str or type(device) is not str:
        return None
    for size in shape:
        if type(size) is not int or not 0 <= size <= INT_LIMIT:
            return None
    get = value.get
    low, high, mean, norm = get("min"), get("max"), get("mean"), get("norm")
    for stat in (low, high, mean, norm):
        # NaN and Inf travel as strings, which the checked reader decodes (inf - inf is nan).
        if stat is not None and not (type(stat) is float and stat - stat == 0.0):
            return None
    nan_count, inf_count = get("nan_count", 0), get("inf_count", 0)
    if not (
        type(nan_count) is int
        and type(inf_count) is int
        and 0 <= nan_count <= INT_LIMIT
        and 0 <= inf_count <= INT_LIMIT
    ):
        return None
    values = None
    if "values" in value:
        values = value["values"]
        if (
            type(values) is not list
            or len(values) != math.prod(shape)
            or not set(map(type, values)) <= _FLOAT
            or not math.isfinite(sum(values))  # any Inf, or an overflow, makes it not
        ):
            return None
        values = tuple(values)
    return new_summary(
        tuple(shape), dtype, device, low, high, mean, norm, nan_count, inf_count, values
    )


def summaries(value: Any) -> tuple[TensorSummary | None, ...] | None:
    """A list of summaries and nulls (``schema.summaries``), else ``None``."""
    if type(value) is not list:
        return None
    out: list[TensorSummary | None] = []
    for item in value:
        if item is None:
            out.append(None)
            continue
        read = summary(item)
        if read is None:
            return None
        out.append(read)
    return tuple(out)


# -- event envelopes and their data ---------------------------------------------------------

EVENT_FIELDS = frozenset(
    {"type", "kind", "seq", "t_ns", "thread", "device", "graph_task", "node", "data"}
)
"""The fields of every event record."""


def plain_event(item: dict[str, Any]) -> bool:
    """Whether ``item`` is an event record the checked reader would return unchanged.

    The envelope only: ``data`` is read by the kind's reader.
    """
    if item.keys() != EVENT_FIELDS:
        return False
    seq, t_ns, gid, node = item["seq"], item["t_ns"], item["graph_task"], item["node"]
    if not (
        type(seq) is int
        and type(t_ns) is int
        and type(gid) is int
        and -INT_LIMIT <= seq <= INT_LIMIT
        and -INT_LIMIT <= t_ns <= INT_LIMIT
        and -INT_LIMIT <= gid <= INT_LIMIT
        and item["type"] == "event"
        and type(item["kind"]) is str
        and type(item["thread"]) is str
        and type(item["device"]) is str
    ):
        return False
    if node is None:
        return True
    if type(node) is not list or len(node) != 4:
        return False
    node_id, name, sequence_nr, topo = node
    return (
        type(node_id) is int
        and type(name) is str
        and type(sequence_nr) is int
        and type(topo) is int
        and -INT_LIMIT <= node_id <= INT_LIMIT
        and -INT_LIMIT <= sequence_nr <= INT_LIMIT
        and 0 <= topo <= INT_LIMIT
    )


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= INT_LIMIT


def _is_int(value: Any) -> bool:
    return type(value) is int and -INT_LIMIT <= value <= INT_LIMIT


def _fields(data: dict[str, Any], needs: frozenset[str], takes: frozenset[str]) -> bool:
    """``data`` has every field of ``needs``, others only from ``takes``, and a boolean
    ``derived`` if it has one (any event may; see ``schema.DERIVED``)."""
    keys = data.keys()
    if not needs <= keys <= takes:
        return False
    return "derived" not in keys or type(data["derived"]) is bool


def _with_derived(*names: str) -> frozenset[str]:
    return frozenset({*names, "derived"})


_ENQUEUE = frozenset({"queue", "queue_owner", "reason", "queue_length"})
_ENQUEUE_TAKES = _with_derived(*_ENQUEUE)
_REASONS = frozenset({"root", "ready", "wake-up"})


def _enqueue(data: dict[str, Any]) -> dict[str, Any] | None:
    reason = data.get("reason")
    if (
        _fields(data, _ENQUEUE, _ENQUEUE_TAKES)
        and type(data["queue"]) is str
        and type(data["queue_owner"]) is str
        and type(reason) is str
        and reason in _REASONS
        and _is_count(data["queue_length"])
    ):
        return data  # every field is a JSON scalar, read as itself
    return None


_DECREMENT = frozenset({"from_node", "from_name", "input_nr", "remaining"})
_DECREMENT_TAKES = _with_derived(*_DECREMENT)


def _dependency_decrement(data: dict[str, Any]) -> dict[str, Any] | None:
    if (
        _fields(data, _DECREMENT, _DECREMENT_TAKES)
        and _is_int(data["from_node"])
        and type(data["from_name"]) is str
        and _is_count(data["input_nr"])
        and _is_count(data["remaining"])
    ):
        return data
    return None


_RELEASE = frozenset({"count"})
_RELEASE_TAKES = _with_derived("count")


def _release_variables(data: dict[str, Any]) -> dict[str, Any] | None:
    if _fields(data, _RELEASE, _RELEASE_TAKES) and _is_count(data["count"]):
        return data
    return None


def _summaries_field(name: str) -> Any:
    needs = frozenset({name})
    takes = _with_derived(name)

    def read(data: dict[str, Any]) -> dict[str, Any] | None:
        if not _fields(data, needs, takes):
            return None
        items = summaries(data[name])
        if items is None:
            return None
        data[name] = items
        return data

    return read


_ACCUMULATE = frozenset({"target", "action", "grad"})
_ACCUMULATE_TAKES = _with_derived(*_ACCUMULATE, "slot", "from_node", "total", "leaf_name")
_TARGETS = frozenset({"buffer", "leaf"})
_ACTIONS = frozenset({"created", "added"})


def _accumulate(data: dict[str, Any]) -> dict[str, Any] | None:
    if not _fields(data, _ACCUMULATE, _ACCUMULATE_TAKES):
        return None
    get = data.get
    target, action, leaf_name = data["target"], data["action"], get("leaf_name")
    if not (
        type(target) is str
        and target in _TARGETS
        and type(action) is str
        and action in _ACTIONS
        and _is_count(get("slot", 0))
        and _is_int(get("from_node", 0))
        and (leaf_name is None or type(leaf_name) is str)
    ):
        return None
    grad = data["grad"]
    if grad is not None:  # null: recorded without values (Note [Values tiers])
        grad = summary(grad)
        if grad is None:
            return None
    if data.get("total") is not None:
        total = summary(data["total"])
        if total is None:
            return None
        data["total"] = total
    data["grad"] = grad  # last: a record that fails goes to the checked reader untouched
    return data


EVENT_DATA: dict[str, Any] = {
    "enqueue": _enqueue,
    "dependency_decrement": _dependency_decrement,
    "release_variables": _release_variables,
    "node_start": _summaries_field("inputs"),
    "node_end": _summaries_field("outputs"),
    "accumulate": _accumulate,
}
"""Fast readers of the data of the common event kinds (the others are rare)."""


def event_data(kind: str, data: Any) -> dict[str, Any] | None:
    """The ``data`` of an event of ``kind``, read as ``schema.EVENT_DATA_READERS[kind]``
    would read it, else ``None``. Reads it in place: see Note [Fast readers]."""
    read = EVENT_DATA.get(kind)
    if read is None or type(data) is not dict:
        return None
    result: dict[str, Any] | None = read(data)
    return result


# -- node snapshots ---------------------------------------------------------------------------

NODE_FIELDS = frozenset(
    {
        "type", "graph_task", "id", "name", "sequence_nr", "topological_nr", "device",
        "next_edges", "inputs", "dependencies", "status", "captures", "saved", "hooks",
        "traceback",
    }
)  # fmt: skip
"""The fields of every node record (a leaf's adds ``leaf``, a node made in a module ``scope``)."""
_NODE_KEYS = (
    NODE_FIELDS,
    NODE_FIELDS | {"leaf"},
    NODE_FIELDS | {"scope"},
    NODE_FIELDS | {"leaf", "scope"},
)
_STATUSES = frozenset({"needed", "pruned"})


def node(item: dict[str, Any]) -> tuple[int, NodeInfo] | None:
    """A node record as ``(graph task, NodeInfo)``, else ``None``."""
    keys = item.keys()
    if keys not in _NODE_KEYS:
        return None
    gid, node_id, name = item["graph_task"], item["id"], item["name"]
    sequence_nr, topological_nr = item["sequence_nr"], item["topological_nr"]
    device, dependencies, status = item["device"], item["dependencies"], item["status"]
    traceback = item["traceback"]
    if not (
        item["type"] == "node"
        and _is_int(gid)
        and _is_int(node_id)
        and type(name) is str
        and _is_int(sequence_nr)
        and _is_count(topological_nr)
        and type(device) is str
        and _is_count(dependencies)
        and type(status) is str
        and status in _STATUSES
        and (traceback is None or (type(traceback) is list and _all_str(traceback)))
    ):
        return None
    next_edges = _edges(item["next_edges"])
    inputs = _inputs(item["inputs"])
    captures = _pairs(item["captures"])
    hooks = _hooks(item["hooks"])
    saved = summaries(item["saved"])
    leaf = _leaf(item["leaf"]) if "leaf" in keys else None
    scope = _scope(item["scope"]) if "scope" in keys else ()
    if (
        next_edges is None
        or inputs is None
        or captures is None
        or hooks is None
        or saved is None
        or (leaf is None and "leaf" in keys)
        or scope is None
    ):
        return None
    info = new_node_info(
        node_id,
        name,
        sequence_nr,
        topological_nr,
        device,
        next_edges,
        inputs,
        dependencies,
        status,
        captures,
        saved,
        hooks,
        None if traceback is None else tuple(traceback),
        leaf,
        scope,
    )
    return gid, info


def _all_str(items: list[Any]) -> bool:
    return all(type(item) is str for item in items)


def _edges(value: Any) -> tuple[tuple[int, int] | None, ...] | None:
    """``[[node id, input_nr] | null]``."""
    if type(value) is not list:
        return None
    out: list[tuple[int, int] | None] = []
    for edge in value:
        if edge is None:
            out.append(None)
        elif type(edge) is list and len(edge) == 2 and _is_int(edge[0]) and _is_count(edge[1]):
            out.append((edge[0], edge[1]))
        else:
            return None
    return tuple(out)


def _pairs(value: Any) -> tuple[tuple[int, int], ...] | None:
    """``[[count, count]]``."""
    if type(value) is not list:
        return None
    out: list[tuple[int, int]] = []
    for pair in value:
        if not (
            type(pair) is list and len(pair) == 2 and _is_count(pair[0]) and _is_count(pair[1])
        ):
            return None
        out.append((pair[0], pair[1]))
    return tuple(out)


def _hooks(value: Any) -> tuple[tuple[str, int], ...] | None:
    """``[[str, count]]``."""
    if type(value) is not list:
        return None
    out: list[tuple[str, int]] = []
    for hook in value:
        if not (
            type(hook) is list and len(hook) == 2 and type(hook[0]) is str and _is_count(hook[1])
        ):
            return None
        out.append((hook[0], hook[1]))
    return tuple(out)


def _scope(value: Any) -> tuple[tuple[str, int], ...] | None:
    """``[[str, count]]`` of non-empty paths (``schema.read_scope``)."""
    if type(value) is not list:
        return None
    out: list[tuple[str, int]] = []
    for entry in value:
        if not (
            type(entry) is list
            and len(entry) == 2
            and type(entry[0]) is str
            and entry[0]
            and _is_count(entry[1])
        ):
            return None
        out.append((entry[0], entry[1]))
    return tuple(out)


def _shape(value: Any) -> tuple[int, ...] | None:
    if type(value) is not list:
        return None
    for size in value:
        if type(size) is not int or not 0 <= size <= INT_LIMIT:
            return None
    return tuple(value)


def _inputs(value: Any) -> tuple[tuple[tuple[int, ...], str, str], ...] | None:
    """``[[[count], str, str]]``: each input slot's shape, dtype and device."""
    if type(value) is not list:
        return None
    out: list[tuple[tuple[int, ...], str, str]] = []
    for slot in value:
        if type(slot) is not list or len(slot) != 3:
            return None
        shape, dtype, device = slot
        shape = _shape(shape)
        if shape is None or type(dtype) is not str or type(device) is not str:
            return None
        out.append((shape, dtype, device))
    return tuple(out)


_LEAF_FIELDS = frozenset({"name", "shape", "dtype", "device", "grad"})


def _leaf(value: Any) -> LeafInfo | None:
    if type(value) is not dict or value.keys() != _LEAF_FIELDS:
        return None
    name, dtype, device, grad = value["name"], value["dtype"], value["device"], value["grad"]
    shape = _shape(value["shape"])
    if (
        shape is None
        or (name is not None and type(name) is not str)
        or type(dtype) is not str
        or type(device) is not str
    ):
        return None
    if grad is not None:
        grad = summary(grad)
        if grad is None:
            return None
    return LeafInfo(name, shape, dtype, device, grad)
