"""The walk-through ``autograd-viz demo`` prints: a small RNN cell, event by event.

It shows the graph the forward pass built (names, sequence and topological
numbers, dependency counts), then every step the engine takes (each event it
emits, with the ready queue after it), then the gradients on the leaves.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autograd_viz.cli.demo_program import rnn_cell
from autograd_viz.draw.render.words import what_happened
from autograd_viz.trace.text import sequence_text, thread_name

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from engine import Node, Tensor
    from engine.events import Event


@dataclass(frozen=True)
class Step:
    """One recorded event with its tensor summaries already computed."""

    event: Event
    """The event as the engine emitted it."""
    data: Mapping[str, Any]
    """``event.data`` with every lazy summary resolved to a :class:`TensorSummary`."""


def _resolve(value: Any) -> Any:
    from autograd_viz.sources.summaries import resolve
    from engine.events import LazySummary

    if isinstance(value, LazySummary):
        return resolve(value)
    if isinstance(value, list | tuple):
        return type(value)(_resolve(v) for v in value)
    return value


def record_backward(loss: Tensor) -> list[Step]:
    """Run ``loss.backward()`` and return every event, summaries resolved.

    Summaries are resolved inside the listener, while the engine still holds
    the gradients they describe.
    """
    import engine

    steps: list[Step] = []

    def listener(event: Event) -> None:
        steps.append(Step(event, {k: _resolve(v) for k, v in event.data.items()}))

    with engine.events.listen(listener):
        loss.backward()
    return steps


def walk_graph(root: Node) -> list[Node]:
    """Every node reachable from ``root``, breadth first (iterative)."""
    seen = {id(root)}
    order = [root]
    for node in order:
        for fn, _ in node.next_functions:
            if fn is not None and id(fn) not in seen:
                seen.add(id(fn))
                order.append(fn)
    return order


class Labels:
    """Short, unique, readable names for nodes: ``MmBackward0 #2``, ``AccumulateGrad(x)``."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self._by_id: dict[int, str] = {}
        counts: dict[str, int] = {}
        for node in nodes:
            name = node.name()
            variable = getattr(node, "variable", None)
            if variable is not None and getattr(variable, "name", None):
                label = f"{name}({variable.name})"
            else:
                counts[name] = counts.get(name, 0) + 1
                label = f"{name} #{counts[name]}"
            self._by_id[node.node_id] = label
        # Names used once need no number.
        for node_id, label in self._by_id.items():
            base, _, _ = label.partition(" #")
            if counts.get(base) == 1:
                self._by_id[node_id] = base

    def __call__(self, node_id: int | None, fallback: str | None = None) -> str:
        if node_id is None:
            return fallback or ""
        return self._by_id.get(node_id, fallback or f"node {node_id}")


def _seq_nr(value: int | None) -> str:
    return sequence_text(value)


_KIND_STYLE = {
    "graph_task_start": "bold magenta",
    "graph_task_end": "bold magenta",
    "enqueue": "cyan",
    "node_start": "bold green",
    "node_end": "green",
    "dependency_decrement": "yellow",
    "accumulate": "blue",
    "release_variables": "dim",
    "skip": "dim",
    "capture": "blue",
    "hook": "cyan",
    "anomaly": "bold red",
    "error": "bold red",
    "reentrant_enter": "magenta",
    "reentrant_exit": "magenta",
}


def describe(step: Step, label: Labels) -> str:
    """One line saying what the engine did at this step (the TUI uses the same words)."""
    return what_happened(step.event, step.data, label)


class QueueView:
    """The CPU ready queue as the events reveal it, in the engine's pop order.

    Among ordinary tasks the engine pops the highest ``sequence_nr`` first:
    the node created last in the forward pass runs first in the backward pass.
    """

    def __init__(self) -> None:
        self._tasks: dict[int, tuple[int, str]] = {}

    def apply(self, event: Event, label: Labels) -> None:
        if event.node_id is None:
            return
        if event.kind == "enqueue":
            self._tasks[event.node_id] = (event.sequence_nr or 0, label(event.node_id))
        elif event.kind == "node_start":
            self._tasks.pop(event.node_id, None)

    def render(self) -> str:
        ordered = sorted(self._tasks.values(), key=lambda t: -t[0])
        return "\n".join(name for _, name in ordered) or "·"


def _graph_table(nodes: Sequence[Node], label: Labels, deps: Mapping[int, int]) -> RenderableType:
    from rich.table import Table

    table = Table(title="The backward graph", title_justify="left", expand=False)
    table.add_column("node", style="bold")
    table.add_column("seq_nr", justify="right")
    table.add_column("topo_nr", justify="right")
    table.add_column("deps", justify="right")
    table.add_column("next_functions: (node, input_nr)")
    for node in nodes:
        nexts = [
            f"({label(fn.node_id)}, {nr})" if fn is not None else "(None, 0)"
            for fn, nr in node.next_functions
        ]
        table.add_row(
            label(node.node_id),
            _seq_nr(node.sequence_nr),
            str(node.topological_nr),
            str(deps.get(node.node_id, 0)),
            "\n".join(nexts) or "[dim]leaf sink: writes .grad[/dim]",
        )
    return table


def _graph_tree(root: Node, label: Labels) -> RenderableType:
    from rich.markup import escape
    from rich.tree import Tree

    def text(node: Node, input_nr: int | None) -> str:
        slot = f" [dim](input_nr {input_nr})[/dim]" if input_nr is not None else ""
        return f"[bold]{escape(label(node.node_id))}[/bold]{slot}"

    tree = Tree(f"loss.grad_fn = {text(root, None)}", guide_style="dim")
    stack: list[tuple[Node, Tree]] = [(root, tree)]
    seen = {id(root)}
    while stack:
        node, branch = stack.pop()
        children = []
        for fn, nr in node.next_functions:
            if fn is None:
                continue
            child = branch.add(
                text(fn, nr) + (" [dim](shown above)[/dim]" if id(fn) in seen else "")
            )
            if id(fn) not in seen:
                seen.add(id(fn))
                children.append((fn, child))
        stack.extend(reversed(children))
    return tree


def _events_table(steps: Sequence[Step], label: Labels) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    threads = sorted({step.event.thread for step in steps})
    one_thread = len(threads) == 1
    title = "Every engine step" + (
        f" (all on thread {thread_name(threads[0])})" if one_thread else ""
    )
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("#", justify="right", style="dim")
    if not one_thread:
        table.add_column("thread", style="dim", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("node", style="bold")
    table.add_column("what happened", ratio=1)
    table.add_column("ready queue after")
    queue = QueueView()
    first_seq = steps[0].event.seq if steps else 0
    for i, step in enumerate(steps):
        e = step.event
        queue.apply(e, label)
        next_starts = i + 1 < len(steps) and steps[i + 1].event.kind == "node_start"
        table.add_row(
            str(e.seq - first_seq + 1),
            *([] if one_thread else [thread_name(e.thread)]),
            Text(e.kind, style=_KIND_STYLE.get(e.kind, "")),
            Text(label(e.node_id, e.node_name)),
            Text(describe(step, label)),
            Text(queue.render()),
            end_section=next_starts,
        )
    return table


def _gradients_table(leaves: Sequence[Tensor]) -> RenderableType:
    import numpy as np
    from rich.table import Table

    table = Table(title="Gradients on the leaves", title_justify="left", expand=False)
    table.add_column("leaf", style="bold")
    table.add_column("shape")
    table.add_column("grad shape")
    table.add_column("‖grad‖", justify="right")
    for leaf in leaves:
        grad = leaf.grad
        if grad is None:
            table.add_row(leaf.name or "?", str(tuple(leaf.shape)), "None", "")
            continue
        norm = float(np.linalg.norm(np.asarray(grad.numpy(), dtype=np.float64)))
        table.add_row(
            leaf.name or "?", str(tuple(leaf.shape)), str(tuple(grad.shape)), f"{norm:.6g}"
        )
    return table


def _console() -> Console:
    from rich.console import Console

    probe = Console()
    # Piped output would otherwise be cut to 80 columns and fold every table.
    return probe if probe.is_terminal else Console(width=130)


def run_demo(args: argparse.Namespace) -> int:
    """``autograd-viz demo``: one backward pass, shown step by step."""
    from collections import Counter

    from rich.markdown import Markdown
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.syntax import Syntax

    console = _console()
    console.print(
        Panel.fit(
            "[bold]autograd-viz demo[/bold]: the backward pass of an RNN cell, step by step\n"
            "[dim]A PyTorch-style reverse-mode engine: Nodes and Edges, sequence and "
            "topological numbers,\ndependency counting and a priority ready queue; "
            "every step is an event.[/dim]",
            border_style="magenta",
        )
    )

    console.print(Rule("1 · forward: build the graph"))
    source = inspect.getsource(rnn_cell)
    console.print(Syntax(source, "python", theme="ansi_dark", background_color="default"))
    leaves, loss = rnn_cell()
    root = loss.grad_fn
    assert root is not None
    nodes = walk_graph(root)
    label = Labels(nodes)

    steps = record_backward(loss)
    start = next((s for s in steps if s.event.kind == "graph_task_start"), None)
    deps: Mapping[int, int] = start.data.get("dependencies", {}) if start else {}

    console.print(
        Markdown(
            "Each operation recorded a **Node** whose `next_functions` point at the nodes of its "
            "inputs. `sequence_nr` (seq_nr) counts nodes in creation order; `topological_nr` "
            "(topo_nr) is the longest path down to a leaf. Leaves end in an `AccumulateGrad` sink. "
            "The dependency count (deps) is how many gradients a node waits for, counted when "
            "backward starts."
        )
    )
    console.print(_graph_tree(root, label))
    console.print()
    console.print(_graph_table(nodes, label, deps))
    console.print()

    console.print(Rule("2 · backward: loss.backward(), event by event"))
    console.print(
        Markdown(
            "The engine seeds the root with a gradient of ones and runs a node once every input "
            "it waits for has arrived (its dependency count reaches 0). Ready nodes wait in a "
            "queue that pops the highest `sequence_nr` first: the node created last in the forward "
            "pass runs first, and `AccumulateGrad` (sequence_nr 2⁶⁴−1) writes a leaf's `.grad` as "
            "soon as it is ready. Gradients bound for a node collect in its input buffer."
        )
    )
    console.print(_events_table(steps, label))
    kinds = Counter(s.event.kind for s in steps)
    console.print(
        f"[dim]{len(steps)} events: "
        + ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
        + "[/dim]"
    )

    console.print(Rule("3 · result"))
    console.print(_gradients_table(leaves))
    console.print(
        "[dim]Every leaf gradient has its leaf's shape. Record your own backward pass with "
        "[bold]engine.events.listen(callback)[/bold].[/dim]"
    )
    return 0
