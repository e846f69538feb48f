"""How the TUI writes statuses, tensors and events as styled text."""

from __future__ import annotations

from rich.text import Text

from autograd_viz.trace import NodeInfo, TraceEvent
from autograd_viz.trace.replay import NodeState, NodeStatus
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.text import printable, sequence_text, shorten

STATUS_GLYPHS: dict[NodeStatus | str, tuple[str, str]] = {
    NodeStatus.WAITING: ("○", "grey70"),
    NodeStatus.PARTIAL: ("◐", "yellow"),
    NodeStatus.QUEUED: ("◉", "dodger_blue1"),
    NodeStatus.RUNNING: ("▶", "bold dark_orange"),
    NodeStatus.DONE: ("●", "green3"),
    NodeStatus.PRUNED: ("·", "grey42"),
    NodeStatus.FAILED: ("✗", "bold red"),
    "not started": ("◌", "grey42"),
}
"""A glyph and a style per node status (the same colours as the DOT legend)."""

NON_FINITE_STYLE = "bold magenta"

PATH_STYLE = "red1"
"""The path from the loss to the first NaN, after ``a`` found one."""

KIND_STYLES = {
    "graph_task_start": "bold cyan",
    "graph_task_end": "bold cyan",
    "enqueue": "dodger_blue1",
    "node_start": "bold dark_orange",
    "node_end": "green3",
    "dependency_decrement": "yellow",
    "accumulate": "green",
    "capture": "blue",
    "hook": "purple",
    "error": "bold red",
    "anomaly": "bold magenta",
    "reentrant_enter": "bold purple",
    "reentrant_exit": "purple",
    "release_variables": "grey70",
    "skip": "grey50",
    "derived_mismatch": "bold red",
    "comm": "bold deep_sky_blue1",
}


def sequence_nr(value: int | None) -> str:
    """A sequence number; ``AccumulateGrad``'s 2⁶⁴−1 written as such."""
    return sequence_text(value, "-")


def short_name(info: NodeInfo) -> str:
    """A node's name without ``Backward0``; ``AccumulateGrad`` as ``Acc(leaf name)``.

    Shown escaped (Note [Names are text]), as every name the TUI writes, and
    cut at :data:`NAME_LIMIT` characters.
    """
    if info.name == "AccumulateGrad":
        leaf = info.leaf.name if info.leaf is not None and info.leaf.name else ""
        return f"Acc({shown_name(leaf)})" if leaf else "Acc"
    base, _, version = info.name.rpartition("Backward")
    return shown_name(base if base and (version.isdigit() or not version) else info.name)


NAME_LIMIT = 80
"""The most characters of a name a row or a drawn node shows (a name may be 100,000 long)."""


def shown_name(name: str) -> str:
    """A name as the TUI writes it: escaped (Note [Names are text]), cut at :data:`NAME_LIMIT`."""
    return shorten(printable(name), NAME_LIMIT)


def quoted_if_padded(text: str) -> str:
    """``text`` (a name, a path) for one line: escaped and cut at :data:`NAME_LIMIT`, in quotes
    when spaces start or end it or it is all spaces, so ``" a"`` is not read as ``a``."""
    shown = shorten(printable(text), NAME_LIMIT)
    return f"'{shown}'" if text != text.strip() else shown


def status_text(status: NodeStatus | str) -> Text:
    """A status's glyph in its colour."""
    glyph, style = STATUS_GLYPHS.get(status, ("?", ""))
    return Text(glyph, style=style)


def non_finite(state: NodeState) -> bool:
    """Whether a gradient in or out of the node holds a NaN or an Inf."""
    values = list(state.slots) + list(state.outputs or ())
    return any(s is not None and not s.finite for s in values)


def summary_text(summary: TensorSummary | None, *, brief: bool = False) -> Text:
    """A tensor summary: shape and dtype, then its values or norm and range, NaN/Inf counts."""
    if summary is None:
        return Text("undefined", style="dim")
    shape = "×".join(str(d) for d in summary.shape) or "scalar"
    text = Text().append(f"{printable(summary.dtype)}[{shape}]", style="cyan")
    if not brief:
        text.append(f" {printable(summary.device)}", style="dim")
    if not summary.finite:
        if summary.nan_count:
            text.append(f" NaN×{summary.nan_count}", style=NON_FINITE_STYLE)
        if summary.inf_count:
            text.append(f" Inf×{summary.inf_count}", style=NON_FINITE_STYLE)
    if summary.values is not None and len(summary.values) <= (3 if brief else 6):
        text.append(" [" + ", ".join(f"{v:.4g}" for v in summary.values) + "]")
    elif summary.norm is not None:
        text.append(f" ‖·‖={summary.norm:.4g}")
        if not brief and summary.min is not None and summary.max is not None:
            text.append(f" min {summary.min:.4g} max {summary.max:.4g}", style="dim")
    return text


def event_text(event: TraceEvent) -> Text:
    """One event as a timeline row: kind, node, and what changed."""
    text = Text().append(f"{event.kind:<21}", style=KIND_STYLES.get(event.kind, ""))
    if event.node_name is not None:
        text.append(f" {printable(event.node_name)}")
        text.append(f" #{event.node_id}", style="dim")
    detail = _event_detail(event)
    if detail:
        text.append("  ")
        text.append_text(detail)
    if event.data.get("derived"):  # replayed from the engine's bookkeeping, not seen
        text.append("  derived", style="dim italic")
    return text


def _event_detail(event: TraceEvent) -> Text:
    data = event.data
    kind = event.kind
    if kind == "dependency_decrement":
        return Text(f"{data.get('remaining', '?')} left", style="dim")
    if kind == "enqueue":
        queue = printable(data.get("queue", "?"))
        if data.get("reason") == "wake-up":  # no node: wakes the thread waiting in backward()
            return Text(f"wake-up → queue {queue}: graph task {event.graph_task} is done")
        return Text(f"→ queue {queue}", style="dim")
    if kind == "accumulate":
        grad = data.get("grad")
        if data.get("target") == "leaf":
            leaf = printable(data.get("leaf_name") or "leaf")
            head = Text(f"{data.get('action', '')} {leaf}.grad ")
        else:
            head = Text().append(f"slot {data.get('slot')} {data.get('action', '')} ", style="dim")
        if isinstance(grad, TensorSummary):
            head.append_text(summary_text(grad, brief=True))
        return head
    if kind in ("error", "anomaly", "derived_mismatch"):
        message = str(data.get("message") or data.get("value") or "")
        return Text(printable(message.splitlines()[0]) if message else "", style="red")
    if kind == "reentrant_enter":
        return Text(f"depth {data.get('depth', '?')}", style="dim")
    return Text("")


def cut_front(name: str, room: int) -> str:
    """``name`` in at most ``room`` characters: its end kept, ``…`` where its start was cut.

    A module path or a parameter's name says the most at its end
    (``…h.3.attn.c_attn``), so that end is what stays.
    """
    if len(name) <= room:
        return name
    return "…" + name[len(name) - room + 1 :]


def cut_dotted(name: str, room: int) -> str:
    """A dotted name (a parameter's, ``layers.3.attn.q_proj.weight``) in at most ``room``
    characters, so that names that differ only by a layer's number stay apart.

    Its parts but the last are cut to their first letter from the left, numbers kept
    whole (``l.3.a.q.weight``); if it is still too long, those letters are left out from
    the left, then the numbers, ``…`` where they were (``…3.q.weight``); if even its last
    part does not fit, :func:`cut_front`.
    """
    if len(name) <= room:
        return name
    parts = name.split(".")
    for i in range(len(parts) - 1):
        if not parts[i].isdigit() and len(parts[i]) > 1:
            parts[i] = parts[i][0]
            if len(shorter := ".".join(parts)) <= room:
                return shorter
    while len(parts) > 1:
        words = [i for i, part in enumerate(parts[:-1]) if not part.isdigit()]
        parts.pop(words[0] if words else 0)
        if len(shorter := "…" + ".".join(parts)) <= room:
            return shorter
    return cut_front(name, room)
