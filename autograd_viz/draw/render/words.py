"""What an engine event means, in plain English: one wording for every view.

``autograd-viz demo --print`` writes a line per event in its walk-through,
and the TUI writes one under its timeline for the selected step; both take
their words from here. An event is anything with ``kind``, ``node_id``,
``node_name``, ``graph_task`` and ``data`` (an engine ``Event`` or a
:class:`~autograd_viz.trace.TraceEvent`), its summaries already resolved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.text import count_words

Label = Callable[[int | None, str | None], str]
"""Names a node for a reader: ``label(node_id, fallback_name)``."""

KIND_MEANINGS: dict[str, str] = {
    "graph_task_start": "a backward() or grad() call starts: its root gets the seed gradient",
    "enqueue": "a task goes onto a device's ready queue (or a wake-up task, with no node)",
    "node_start": "a thread pops the node and runs its backward function",
    "node_end": "the function returned: one gradient per next edge",
    "dependency_decrement": "a gradient reaches a node; at 0 left the node is ready",
    "accumulate": "a gradient is added into an input buffer slot, or into a leaf's .grad",
    "release_variables": "the node frees its saved tensors (retain_graph=False)",
    "capture": "grad() takes one of its results from a node's input buffer",
    "hook": "a hook ran on the node",
    "skip": "a gradient reaches a node this call does not need; it is dropped",
    "reentrant_enter": "a node calls backward() inside its own backward (reentrant)",
    "reentrant_exit": "that inner backward() returned",
    "anomaly": "anomaly mode found a NaN or Inf (forward output or returned gradient)",
    "error": "a backward function raised; the call fails",
    "comm": "a collective is launched, or has finished: a DDP gradient bucket's allreduce, "
    "an FSDP2 parameter group's all-gather or reduce-scatter",
    "graph_task_end": "the call finishes; backward() returns or raises",
    "derived_mismatch": "a PyTorch trace: what was observed contradicts what was derived",
    "grads": "after the call: which parameters got no gradient and why, each module's ‖g‖",
}
"""One line per event kind, for the help screen."""


class EventLike(Protocol):
    """What the wording needs of an event."""

    @property
    def kind(self) -> str: ...
    @property
    def node_id(self) -> int | None: ...
    @property
    def node_name(self) -> str | None: ...
    @property
    def graph_task(self) -> int: ...


def grad_text(summary: TensorSummary | None) -> str:
    """A gradient in a few characters: ``20×1 ‖g‖=1.519``."""
    if summary is None:
        return "None"
    shape = "×".join(str(d) for d in summary.shape) or "scalar"
    if summary.norm is None:
        return shape
    return f"{shape} ‖g‖={summary.norm:.4g}"


def what_happened(event: EventLike, data: Mapping[str, Any], label: Label) -> str:
    """What the engine did at ``event``, without naming the event's own node.

    The walk-through writes this beside a column that names the node.
    """
    kind = event.kind
    d = data
    if kind == "graph_task_start":
        waiting = sum(1 for count in d.get("dependencies", {}).values() if count)
        return (
            f"graph task {event.graph_task} starts at {label(event.node_id, event.node_name)}; "
            f"{count_words(waiting, 'node waits', 'nodes wait')} for gradients; "
            f"keep_graph={d.get('keep_graph')}"
        )
    if kind == "enqueue":
        return f"→ {d.get('queue')} ready queue ({d.get('reason')})"
    if kind == "node_start":
        return "grads in: " + (" · ".join(grad_text(g) for g in d.get("inputs", [])) or "none")
    if kind == "node_end":
        outputs = d.get("outputs", [])
        return "grads out: " + (" · ".join(grad_text(g) for g in outputs) or "none (leaf sink)")
    if kind == "dependency_decrement":
        remaining = d.get("remaining")
        state = "ready" if remaining == 0 else "waits"
        return (
            f"from {label(d.get('from_node'), d.get('from_name'))} → input {d.get('input_nr')}; "
            f"{remaining} left: {state}"
        )
    if kind == "accumulate":
        if d.get("target") == "leaf":
            leaf = d.get("leaf_name") or "leaf"
            return f"{leaf}.grad {d.get('action')}: {grad_text(d.get('grad'))}"
        return f"buffer[{d.get('slot')}] {d.get('action')}: {grad_text(d.get('grad'))}"
    if kind == "release_variables":
        count = d.get("count")
        return f"freed {count} saved tensor{'s' if count != 1 else ''}"
    if kind == "comm":
        return (
            f"{d.get('op')} of bucket {d.get('bucket')} {d.get('phase')} ({d.get('bytes')} bytes)"
        )
    if kind == "graph_task_end":
        if d.get("status") == "ok":
            return "graph task done; backward() returns"
        return f"graph task failed: {d.get('exc_type')}: {d.get('message')}"
    if kind == "skip":
        return f"skipped: {d.get('reason')}"
    if kind == "grads":
        return grads_text(d)
    if kind == "error":
        return f"{d.get('exc_type')}: {d.get('message')}"
    return ", ".join(f"{k}={v}" for k, v in d.items() if not callable(v))


def grads_text(data: Mapping[str, Any]) -> str:
    """A ``grads`` event in a few words: ``2 parameters got no gradient (cut, never used)``."""
    missing = [
        f["reason"]
        for f in data.get("findings", ())
        if f["reason"] not in ("frozen", "pruned", "exact zeros")
    ]
    flagged = sum(1 for row in data.get("flow", ()) if row.get("flag"))
    said = (
        f"{len(missing)} parameter{'s' if len(missing) != 1 else ''} got no gradient "
        f"({', '.join(dict.fromkeys(missing))})"
        if missing
        else "every trainable parameter got a gradient"
    )
    if flagged:
        said += f"; {flagged} module{'s' if flagged != 1 else ''} flagged"
    return said


def explain(event: EventLike, data: Mapping[str, Any], label: Label) -> str:
    """One sentence saying what ``event`` means, naming its node.

    ``SumBackward0 #11 → input 0 of TanhBackward0 #10; 0 left: ready``. An
    event a source derived rather than saw (the PyTorch bridge's bookkeeping)
    says so.
    """
    sentence = _explain(event, data, label)
    if data.get("derived") and event.kind != "derived_mismatch":
        sentence += " (derived from the bookkeeping, not observed)"
    return sentence


def _explain(event: EventLike, data: Mapping[str, Any], label: Label) -> str:
    kind = event.kind
    d = data
    node = label(event.node_id, event.node_name)
    if kind == "dependency_decrement":
        remaining = d.get("remaining")
        state = "ready to run" if remaining == 0 else "still waits"
        return (
            f"{label(d.get('from_node'), d.get('from_name'))} → input {d.get('input_nr')} of "
            f"{node}; {remaining} left: {state}"
        )
    if kind == "enqueue":
        if event.node_id is None or d.get("reason") == "wake-up":
            return (
                f"wake-up: an empty task on the {d.get('queue')} queue wakes the thread waiting "
                f"in backward() for graph task {event.graph_task}, which has finished"
            )
        why = "the root" if d.get("reason") == "root" else "all its gradients arrived"
        return f"{node} goes onto the {d.get('queue')} ready queue ({why})"
    if kind == "node_start":
        return f"{node} runs; {what_happened(event, d, label)}"
    if kind == "node_end":
        return f"{node} returned; {what_happened(event, d, label)}"
    if kind == "accumulate":
        if d.get("target") == "leaf":
            return what_happened(event, d, label)
        return (
            f"gradient into {node}'s input slot {d.get('slot')} ({d.get('action')}): "
            f"{grad_text(d.get('grad'))}"
        )
    if kind == "release_variables":
        return f"{node} {what_happened(event, d, label)}"
    if kind == "skip":
        return f"{node} is not needed by this call: the gradient is dropped"
    if kind == "error":
        return f"{node} raised {what_happened(event, d, label)}"
    if kind == "anomaly":
        value = "NaN" if d.get("value") == "nan" else "Inf"
        if d.get("phase") == "forward":
            how = "born here" if d.get("born") else "passed on"
            return f"anomaly mode: {value} in {node}'s forward output ({how})"
        return f"anomaly mode: {node} returned {value} in gradient {d.get('output_index')}"
    if kind == "comm":
        params = ", ".join(str(p) for p in d.get("params", ()))
        if d.get("op") != "allreduce":  # FSDP2: a parameter group's all-gather or reduce-scatter
            when = " in the forward pass" if event.graph_task == 0 else ""
            by = f" from {node}" if event.node_id is not None else ""
            what = f"the {d.get('op')} of bucket {d.get('bucket')} ({params})"
            return f"{what} {d.get('phase')}{by}{when}"
        if d.get("phase") == "launched":
            return (
                f"{node}'s gradient completes bucket {d.get('bucket')} ({params}): its "
                f"{d.get('op')} is launched while the backward goes on"
            )
        return f"the {d.get('op')} of bucket {d.get('bucket')} ({params}) finished"
    if kind == "reentrant_enter":
        return f"{node} calls backward() inside its backward: reentrant depth {d.get('depth')}"
    if kind == "reentrant_exit":
        return f"the backward() called inside {node} returned"
    if kind == "capture":
        return f"grad() takes its result {d.get('output_index')} from {node}'s slot {d.get('slot')}"
    if kind == "hook":
        where = f" ({d['location']})" if d.get("location") else ""
        replaced = ", replacing the gradient" if d.get("replaced") else ""
        return f"the {d.get('hook')} hook {d.get('hook_name')}{where} ran on {node}{replaced}"
    if kind == "graph_task_start":
        depth = d.get("reentrant_depth")
        inner = f", reentrant depth {depth}" if depth else ""
        return (
            f"graph task {event.graph_task} starts{inner}: {node} gets the seed gradient "
            f"(keep_graph={d.get('keep_graph')})"
        )
    if kind == "graph_task_end":
        return what_happened(event, d, label)
    if kind == "derived_mismatch":
        return f"what ran contradicts what was derived: {d.get('message')}"
    if kind == "grads":
        return f"after the call, {grads_text(d)}"
    return f"{kind} {node}".strip()
