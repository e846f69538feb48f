"""The graph-task picker's rows: a training run's calls by number, with a sparkline.

A trace of a training run holds many backward calls; the picker lists them by
their number in the run (``call 12000``), each with one bar of a sparkline of
the norm of the leaves' gradients after that call (their ``.grad``: in a loop
that zeroes gradients each step, the call's own gradient, the norm a training
loop logs), and says how many NaN or Inf values they held, so that a call
where the gradient jumped or went non-finite stands out down the list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autograd_viz.trace import Trace
from autograd_viz.trace.notes import MISSING_REASONS, grads_notes
from autograd_viz.trace.records import values_recorded
from autograd_viz.trace.text import one_line

BARS = "▁▂▃▄▅▆▇█"
"""A sparkline's eight heights."""


@dataclass(frozen=True)
class CallFigures:
    """What the picker shows of one backward call (a graph task and its reentrant calls)."""

    grad_norm: float
    """The norm of the ``.grad`` of every leaf the call accumulated into (NaN if one held one)."""
    nonfinite: int
    """NaN and Inf values among those gradients, plus the call's anomaly events."""
    modules: tuple[tuple[str, float], ...] = ()
    """Each module's gradient norm in the call, largest first: as ``grads`` recorded it,
    else from its leaves' accumulated gradients (a leaf's module: its name to the last dot)."""
    flagged: tuple[tuple[str, str], ...] = ()
    """``(module, "vanishing" or "exploding")`` as ``grads`` flagged them."""
    missing: int = 0
    """Trainable parameters that got no gradient, as ``grads`` found (Note [Gradient
    findings in a trace])."""


def call_figures(trace: Trace) -> dict[int, CallFigures]:
    """Each graph task's figures, reentrant calls counted with the call they run in."""
    top: dict[int, int] = {}
    for gid, info in trace.graph_tasks.items():
        top[gid] = top.get(info.parent, gid) if info.parent is not None else gid
    squares: dict[int, float] = {}
    nonfinite: dict[int, int] = {}
    by_module: dict[int, dict[str, float]] = {}
    for event in trace.events:
        owner = top.get(event.graph_task)
        if owner is None:
            continue
        if event.kind == "anomaly":
            nonfinite[owner] = nonfinite.get(owner, 0) + 1
        elif event.kind == "accumulate" and event.data.get("target") == "leaf":
            grad = event.data["grad"]
            if grad is None:  # recorded without values (--values none): no figure
                squares[owner] = math.nan
                continue
            bad = (grad.nan_count or 0) + (grad.inf_count or 0)
            if bad:
                nonfinite[owner] = nonfinite.get(owner, 0) + bad
            norm = grad.norm if grad.norm is not None else math.nan
            squares[owner] = squares.get(owner, 0.0) + norm * norm
            name = event.data.get("leaf_name")
            if name:
                modules = by_module.setdefault(owner, {})
                module = name.rpartition(".")[0] or name
                modules[module] = modules.get(module, 0.0) + norm * norm
    notes = grads_notes(trace)
    figures = {}
    for gid in trace.graph_tasks:
        if top.get(gid) != gid:
            continue
        flagged: tuple[tuple[str, str], ...] = ()
        missing = 0
        note = notes.get(gid)
        if note is not None and note["flow"]:
            norms = {row["module"]: row["grad_norm"] for row in note["flow"]}
            flagged = tuple((row["module"], row["flag"]) for row in note["flow"] if row.get("flag"))
        else:
            norms = {m: math.sqrt(sq) for m, sq in by_module.get(gid, {}).items()}
        if note is not None:
            missing = sum(1 for f in note["findings"] if f["reason"] in MISSING_REASONS)
        ranked = tuple(sorted(norms.items(), key=lambda item: -_order(item[1])))
        figures[gid] = CallFigures(
            math.sqrt(squares.get(gid, 0.0)), nonfinite.get(gid, 0), ranked, flagged, missing
        )
    return figures


MODULES_SHOWN = 3
"""Modules named on a call's row, largest gradient first; the smallest follows them."""


def _order(value: float) -> float:
    return math.inf if not math.isfinite(value) else value


def modules_text(figure: CallFigures) -> str:
    """A call's gradient norm per module, in a few words: ``head 0.22 · enc 0.1 … embed 3e-07``."""
    if not figure.modules:
        return ""
    shown = list(figure.modules[:MODULES_SHOWN])
    if len(figure.modules) > MODULES_SHOWN:
        shown.append(figure.modules[-1])
    words = [f"{one_line(module, 40)} {norm:.2g}" for module, norm in shown]
    if len(figure.modules) > MODULES_SHOWN:
        words.insert(-1, "…")
    return " · ".join(words)


NO_FIGURE = "·"
"""A call's mark in a trace recorded without values (``--values none``)."""


def bar(value: float, low: float, high: float) -> str:
    """One sparkline bar for ``value`` between ``low`` and ``high`` (``!`` when not finite)."""
    if not math.isfinite(value):
        return "!"
    if high <= low:
        return BARS[len(BARS) // 2]
    return BARS[min(len(BARS) - 1, int((value - low) / (high - low) * len(BARS)))]


def task_choices(trace: Trace) -> tuple[str, list[tuple[str, str]]]:
    """The picker's title and its ``(key, label)`` rows after "follow the current step"."""
    figures = call_figures(trace)
    unvalued = values_recorded(trace.header) == "none"  # no leaf gradient to take a norm of
    finite = [f.grad_norm for f in figures.values() if math.isfinite(f.grad_norm)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    rows = []
    numbered = False
    for gid, task in trace.graph_tasks.items():
        roots = one_line(", ".join(name for _, name, _ in task.roots) or "?", 80)
        nodes = f"{len(task.nodes)} nodes"
        figure = figures.get(gid)
        if figure is None:  # reentrant: its figures are its call's
            label = f"  graph task {gid}: from {roots}, {nodes}, reentrant depth "
            label += str(task.reentrant_depth)
        else:
            numbered = numbered or task.call is not None
            call = f"call {task.call}" if task.call is not None else f"graph task {gid}"
            norm = "values not recorded" if unvalued else f"grad norm {figure.grad_norm:.3g}"
            bad = f", {figure.nonfinite:,} NaN/Inf" if figure.nonfinite else ""
            mark = NO_FIGURE if unvalued else bar(figure.grad_norm, low, high)
            label = f"{mark} {call}: {norm}{bad}, {nodes}, from {roots}"
            if figure.missing:
                label += f", {figure.missing} without gradient"
            flags = {flag for _, flag in figure.flagged}
            for flag in sorted(flags):
                count = sum(1 for _, f in figure.flagged if f == flag)
                label += f", {count} {flag}"
            per_module = modules_text(figure)
            if per_module:
                label += f"; ‖g‖ by module: {per_module}"
        if task.cut is not None:  # a recorder error ended its recording early
            label += f", cut short: {one_line(task.cut, 120)}"
        rows.append((str(gid), label))
    line = "".join(bar(f.grad_norm, low, high) for f in figures.values())
    if len(line) > 60:  # one bar per group of calls, the group's largest
        size = math.ceil(len(line) / 60)
        values = [f.grad_norm for f in figures.values()]
        groups = [values[i : i + size] for i in range(0, len(values), size)]
        line = "".join(bar(_largest(group), low, high) for group in groups)
    what = "backward call" if numbered else "graph task"
    if unvalued:
        return f"Show which {what}? (recorded with --values none: no gradient norms)", rows
    return f"Show which {what}? Gradient norm per call: {line}", rows


def _largest(values: list[float]) -> float:
    if any(not math.isfinite(v) for v in values):
        return math.nan
    return max(values)
