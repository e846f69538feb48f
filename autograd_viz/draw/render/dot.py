"""Graphviz export: the backward graph with topological numbers and dependency counts.

:func:`to_dot` draws a tensor's graph before backward, or any step of a
recorded trace, as a :class:`graphviz.Digraph`; :func:`save` writes it as DOT
source, or renders it to SVG, PNG or PDF with Graphviz's ``dot``.

Each backward node shows its name and id, ``sequence_nr``, ``topological_nr``,
its dependencies (remaining/total at the step) and its device, filled with
the colour of its status (:data:`STATUS_STYLES`, drawn in the legend).
Gradients flow down the page, from the root to the leaves: an edge goes from
the node that computes a gradient to the node that receives it, labelled with
the input slot (``input_nr``) it fills, bold once the gradient went along it.
Each device is a cluster; a reentrant backward is a cluster of its own, linked
to the node that started it.

Every piece of text comes from user code (tensor names, custom Function
names, exception messages) and is escaped: labels are HTML-like labels whose
text goes through :func:`html_text`, other attributes through
:func:`plain_text`, so nothing a user writes is read as DOT or HTML. The drawing
itself is :func:`~autograd_viz.draw.render.dot_render.render`; this module builds the
view, chooses what to show and writes the file.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import threading
import warnings
from collections.abc import Iterator, Sequence

import graphviz

from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, GraphViewError, from_graph, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render.dot_clusters import unstacked
from autograd_viz.draw.render.dot_render import render
from autograd_viz.draw.render.escape import html_text, plain_text
from autograd_viz.draw.render.styles import NON_FINITE, PATH_COLOR, PATH_NOTICE, STATUS_STYLES
from autograd_viz.trace import Trace
from autograd_viz.trace.records import DERIVED_ORDER, UnrunGraph, observed
from autograd_viz.trace.replay import ExecutionState

FORMATS = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png", ".pdf": "pdf"}
"""Output suffixes :func:`save` understands, and the Graphviz format of each."""


class GraphvizNotFoundError(RuntimeError):
    """Rendering needs Graphviz's ``dot`` program, which is not on ``PATH``."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"rendering {what} needs Graphviz's 'dot' program, which is not on PATH; "
            "install Graphviz (apt-get install graphviz, brew install graphviz) "
            "or write the DOT source instead (a .dot file)"
        )


# -- the public entry points -----------------------------------------------------------


def to_dot(
    target: UnrunGraph | Trace | ExecutionState,
    step: int | None = None,
    *,
    graph_task: int | None = None,
    saved: bool = False,
    values: bool = False,
    legend: bool = True,
    around: int | str | None = None,
    depth: int = 2,
    collapse: bool = False,
    max_nodes: int | None = None,
    highlight: Sequence[int] = (),
    level: int | None = None,
    expand: str | Sequence[str] = (),
    leaves: bool = False,
) -> graphviz.Digraph:
    """Draw a backward graph, before backward or at any step of a trace.

    Example:
        >>> with autograd_viz.record() as trace:
        ...     loss.backward()
        >>> autograd_viz.to_dot(trace, step=5).render("step5", format="svg")

    Args:
        target: a :class:`~autograd_viz.Trace`, an :class:`~autograd_viz.ExecutionState`,
            or a graph that has not run yet (:func:`autograd_viz.to_dot` takes
            tensors, ours or PyTorch's, and reads their graph through their source).
        step: for a trace, how many events have been applied (default: all).
        graph_task: which graph task to draw (default: the top-level call the
            step belongs to, with the reentrant calls its nodes made).
        saved: draw each node's saved tensors.
        values: write gradient summaries on nodes (input buffers) and edges.
        legend: draw the legend of statuses.
        around: draw only what is near this: a node id, ``Name #id``, a unique
            node name, a parameter's name or a module path (a module is drawn whole).
        depth: with ``around``, how many edges away to go.
        collapse: fold repeated chains that no module encloses into one node
            with a count.
        max_nodes: draw at most this many nodes; a notice counts the rest.
        highlight: node ids along a path (such as the loss to the first NaN, from
            :func:`autograd_viz.nan.path_from_root`), drawn in thick red with
            their modules open.
        level: for a graph recorded with its modules, open the modules this
            deep (1: the outermost) and draw deeper ones as one box each; by
            default the deepest level that keeps the picture within 150 boxes.
            Repeated sibling modules fold into one box with their count, and the
            running or failing node's modules open by themselves.
        expand: a module name (or several) to draw whole, or ``"all"`` for
            every node without module boxes.
        leaves: draw every fold as one box and open calls that hold no calls with
            the level, as before a fold opened one representative call (Note [A fold
            shows its inside once] in :mod:`autograd_viz.draw.model.choosing`).

    Returns:
        The graph; ``.source`` is its DOT text, :func:`save` writes it.

    Raises:
        GraphViewError: there is nothing to draw (a leaf tensor, an empty trace),
            or ``around`` / ``graph_task`` name nothing in it.
        IndexError: ``step`` is outside the trace.
        TypeError: ``target`` is none of the above, or ``step`` is given for a
            target that has no steps.
        ValueError: ``depth`` or ``max_nodes`` is out of range.
    """
    expanded = (expand,) if isinstance(expand, str) else tuple(expand)
    options = ViewOptions(
        around, depth, collapse, max_nodes, level, expanded, leaves, tuple(highlight), saved,
        values, legend,
    )  # fmt: skip
    return draw(build_view(target, step, graph_task=graph_task), options)


def draw(view: GraphView, options: ViewOptions) -> graphviz.Digraph:
    """``view`` (every node at a step) drawn as ``options`` choose."""
    marked = set(options.highlight)
    focus = [n.key for n in view.nodes.values() if n.info.id in marked]
    return render(
        select(view, options, focus),
        saved=options.saved,
        values=options.values,
        legend=options.legend,
        highlight=options.highlight,
    )


def build_view(
    target: UnrunGraph | Trace | ExecutionState,
    step: int | None = None,
    *,
    graph_task: int | None = None,
) -> GraphView:
    """The :class:`GraphView` of ``target`` (see :func:`to_dot` for the arguments)."""
    if isinstance(target, Trace):
        view = from_state(target.state_at(len(target) if step is None else step), graph_task)
        if observed(target.header) == "calls":  # Note [Observation levels]
            view = dataclasses.replace(view, notices=(*view.notices, DERIVED_ORDER))
        return view
    if isinstance(target, ExecutionState):
        if step is not None and step != target.step:
            raise TypeError(
                f"step={step} given with an ExecutionState of step {target.step}; "
                "pass the trace to choose the step"
            )
        return from_state(target, graph_task)
    if isinstance(target, UnrunGraph):
        if step is not None or graph_task is not None:
            raise TypeError("step and graph_task need a trace; a tensor's graph has not run yet")
        return from_graph(target)
    raise TypeError(
        "to_dot() draws a Tensor (ours or PyTorch's), a sequence of Tensors, a Trace or an "
        f"ExecutionState, got {type(target).__name__}"
    )


def select(view: GraphView, options: ViewOptions, focus: Sequence[str] = ()) -> GraphView:
    """What to draw of ``view``: :func:`autograd_viz.draw.model.showing.show` (see
    :func:`to_dot`), with ``focus`` (node keys) drawn with their modules open."""
    # Note [A fold shows its inside once] in choosing.py
    return showing.show(view, options, focus=focus, represent=not options.leaves)


def save(
    graph: graphviz.Digraph,
    path: str | os.PathLike[str],
    notices: list[str] | None = None,
) -> str:
    """Write ``graph`` to ``path``; the suffix picks DOT source or a rendered format.

    Args:
        graph: the drawing (from :func:`to_dot` or :func:`render`).
        path: where to write; its suffix is one of :data:`FORMATS`.
        notices: gets a line for what was drawn otherwise than asked (see :func:`pipe`).

    Returns:
        The format written (``"dot"``, ``"svg"``, ``"png"`` or ``"pdf"``).

    Raises:
        ValueError: the suffix is not one of :data:`FORMATS`.
        GraphvizNotFoundError: rendering needs ``dot`` and it is missing.
        RuntimeError: ``dot`` failed; the message has what it printed.
    """
    fmt = output_format(path)
    if fmt == "dot":
        with open(path, "w", encoding="utf-8") as file:
            file.write(graph.source)
        return fmt
    data = pipe(graph, fmt, notices)
    with open(path, "wb") as file:
        file.write(data)
    return fmt


def output_format(path: str | os.PathLike[str]) -> str:
    """The Graphviz format for ``path``'s suffix.

    Raises:
        ValueError: the suffix is not one of :data:`FORMATS`.
    """
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in FORMATS:
        known = ", ".join(FORMATS)
        raise ValueError(f"cannot tell the format of {os.fspath(path)!r}: use one of {known}")
    return FORMATS[suffix]


STACKING_FAILED = (
    "Graphviz's dot failed on the picture with its modules stacked ({problem}); "
    "drawn without stacking"
)
"""The line said when a stacked picture is drawn again without its stacking edges."""

STRAIGHT_EDGES = "Graphviz's dot failed on the picture ({problem}); drawn again with straight edges"
"""The line said when a big picture is drawn again with straight edges (Note [Laying out big
pictures quickly] in dot_render.py)."""


def pipe(graph: graphviz.Digraph, fmt: str, notices: list[str] | None = None) -> bytes:
    """Render ``graph`` with ``dot`` to ``fmt`` bytes.

    A picture that ``dot`` fails on, even by crashing, is drawn again where another
    drawing may pass: a big picture laid out quickly with straight edges (Note [Laying out
    big pictures quickly] in dot_render.py), a picture whose module clusters are stacked
    (Note [Stacking module clusters] in dot_modules.py) without the stacking, and a big
    stacked one without both. What was drawn otherwise is said in one line
    (:data:`STRAIGHT_EDGES`, :data:`STACKING_FAILED`): appended to ``notices``, or as a
    :class:`RuntimeWarning` when no list is given.

    Raises:
        GraphvizNotFoundError: ``dot`` is missing.
        RuntimeError: ``dot`` failed on every drawing; the message has what it printed first.
    """
    if shutil.which("dot") is None:
        raise GraphvizNotFoundError(fmt.upper())
    try:
        return _pipe(graph, fmt)
    except GraphvizNotFoundError:
        raise
    except RuntimeError as exc:
        failure = exc
    for again, said in _drawn_again(graph):
        try:
            data = _pipe(again, fmt)
        except GraphvizNotFoundError:
            raise
        except RuntimeError:
            continue
        problem = str(failure).splitlines()[0].removeprefix(f"dot failed to render {fmt.upper()}: ")
        if len(problem) > 80:
            problem = problem[:79] + "…"
        line = said.format(problem=problem)
        if notices is None:
            warnings.warn(line, RuntimeWarning, stacklevel=2)
        else:
            notices.append(line)
        return data
    raise failure


def _drawn_again(graph: graphviz.Digraph) -> Iterator[tuple[graphviz.Digraph, str]]:
    """The drawings to try when ``dot`` fails on ``graph``, each with the line that says so."""
    quick = "nslimit" in graph.graph_attr  # Note [Laying out big pictures quickly]
    if quick:
        yield _straight(graph), STRAIGHT_EDGES
    flat = unstacked(graph)
    if flat is not None:
        yield flat, STACKING_FAILED
        if quick:
            yield _straight(flat), STACKING_FAILED


def _pipe(graph: graphviz.Digraph, fmt: str) -> bytes:
    executable = shutil.which("dot")
    if executable is None:
        raise GraphvizNotFoundError(fmt.upper())
    command = [executable, f"-K{graph.engine}", f"-T{fmt}"]
    try:
        returncode, data, stderr = run_dot_process(command, graph.source.encode("utf-8"))
    except FileNotFoundError:
        raise GraphvizNotFoundError(fmt.upper()) from None
    if returncode != 0:
        problem = _problem(returncode, stderr)
        raise RuntimeError(f"dot failed to render {fmt.upper()}: {problem}") from None
    return data


def _straight(graph: graphviz.Digraph) -> graphviz.Digraph:
    """``graph`` with straight edges, each drawn apart: dot then routes no spline around its
    placement, and merges no edges (Note [Laying out big pictures quickly] in dot_render.py)."""
    straight = graph.copy()
    straight.graph_attr["splines"] = "line"
    straight.graph_attr.pop("concentrate", None)
    return straight


def _problem(returncode: int, stderr_bytes: bytes) -> str:
    """What ``dot`` printed, or how it ended when it printed nothing (a crash)."""
    stderr = stderr_bytes.decode(errors="replace").strip()
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        ended = f"killed by {name}"
        return f"{ended}: {stderr}" if stderr else ended
    return stderr or f"exit status {returncode}"


# Note [No dot outlives us]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A picture of thousands of nodes keeps Graphviz's ``dot`` busy for minutes.
# Stopped then (Ctrl-C, SIGTERM from a job runner), we must not leave it
# running at 100% CPU with nobody to read what it writes, as a bare Popen
# interrupted in ``communicate`` does. Every dot process is started by
# run_dot_process, which kills and reaps it when its thread is interrupted;
# the batches an animation runs in other threads are killed by the main
# thread (end_dot_processes) before the pool waits for those threads.
# ``autograd-viz dot`` and ``animate`` turn SIGTERM and SIGHUP into an
# exception so that this runs, then end by that signal.

_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()


def run_dot_process(command: Sequence[str], data: bytes) -> tuple[int, bytes, bytes]:
    """Run Graphviz's ``command`` on ``data``: its exit status, stdout and stderr. The process
    is killed if this is interrupted (Note [No dot outlives us]).

    Raises:
        FileNotFoundError: the program is missing.
    """
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    with _running_lock:
        _running.add(process)
    try:
        stdout, stderr = process.communicate(data)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        with _running_lock:
            _running.discard(process)
    return process.returncode, stdout, stderr


def end_dot_processes() -> None:
    """Kill every dot process still running (Note [No dot outlives us])."""
    with _running_lock:
        running = list(_running)
    for process in running:
        process.kill()


__all__ = [
    "FORMATS",
    "NON_FINITE",
    "PATH_COLOR",
    "PATH_NOTICE",
    "STACKING_FAILED",
    "STATUS_STYLES",
    "STRAIGHT_EDGES",
    "GraphViewError",
    "GraphvizNotFoundError",
    "build_view",
    "end_dot_processes",
    "html_text",
    "output_format",
    "pipe",
    "plain_text",
    "render",
    "run_dot_process",
    "save",
    "select",
    "to_dot",
]
