"""Rendering many frames of one graph with Graphviz, fast and with a layout that stays still.

:func:`render_frames` turns a list of :class:`graphviz.Digraph` (the frames of
an animation) into SVG or PNG images: a few ``dot`` processes, several graphs
each (see Note [One dot per batch]), and the same positions for every node in
every frame of one graph (see Note [Still layout]).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import graphviz

from autograd_viz.draw.render import dot

MIN_BATCH = 16
"""Fewest frames worth a ``dot`` process of their own (one starts in about 20 ms)."""


class GraphvizError(RuntimeError):
    """Graphviz's ``dot`` failed to draw a frame; the message has what it printed."""


class GraphvizNotFoundError(dot.GraphvizNotFoundError):
    """Graphviz's ``dot`` program is not on ``PATH``.

    A :class:`autograd_viz.draw.render.dot.GraphvizNotFoundError`, so that callers handle a
    missing ``dot`` the same way whether they draw one graph or animate many.
    """

    def __init__(self) -> None:
        # The base class suggests writing DOT source, which an animation cannot be.
        RuntimeError.__init__(
            self,
            "animating needs Graphviz's 'dot' program, which is not on PATH; install Graphviz "
            "(apt-get install graphviz, brew install graphviz, https://graphviz.org/download/)",
        )


# -- rendering with dot ---------------------------------------------------------------

# Note [One dot per batch]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# dot reads any number of graphs from one input and writes one image per graph,
# in order; given several -T flags it writes each graph's outputs in flag order.
# Starting a process costs about as much as laying out a small graph, so the
# frames go to a few processes (one per core, at least MIN_BATCH frames each)
# running side by side, and each output is cut back into one image per graph.

# Note [Still layout]
# ~~~~~~~~~~~~~~~~~~~
# Frames of one graph task have the same nodes and edges; only colours and some
# text change. Colours never move anything, but text does: a longer label makes
# its node or edge label bigger and dot lays the graph out again around it (with
# values=True, every delivered gradient grows an edge label). So:
#
# 1. dot lays out every frame and writes the layout (-Tjson0: the position and
#    size of every node, edge, cluster and label);
# 2. frames with the same clusters, nodes and edges form a group; its reference
#    layout is its last frame's (the one with the most text), laid out again
#    with every node at least as big as it is in any frame of the group;
# 3. when a frame's layout is not the reference, every frame of its group is
#    drawn again by neato -n2, which draws at the positions it is given and lays
#    out nothing, with all the reference's positions stated (see _pinned) and on
#    a page the reference's size.
#
# When no label changes size, dot lays out a group's frames alike, and the
# frames of step 1 (drawn in the same pass for SVG) are the result.

_LAYOUT = "json0"
"""dot's format for layouts: every attribute, positions included, without drawing commands."""
_KEEP_POSITIONS = ("-Kneato", "-n2")
"""dot's flags to draw at the stated positions (in points) and lay out nothing."""
_NODE_GEOMETRY = ("pos", "width", "height", "xlp")
_EDGE_GEOMETRY = ("pos", "lp", "head_lp", "tail_lp", "xlp")
_GRAPH_GEOMETRY = ("bb", "lp")

Layout = dict[str, Any]
"""A graph's layout as dot writes it with ``-Tjson0``."""


def render_frames(
    graphs: Sequence[graphviz.Digraph], fmt: str = "svg", *, labels: Sequence[str] | None = None
) -> list[bytes]:
    """Render every graph with ``dot`` in a few processes, with a layout that stays still.

    See Note [One dot per batch] and Note [Still layout].

    Args:
        graphs: the frames, in order.
        fmt: ``"svg"`` or ``"png"``.
        labels: what to call each frame in an error message (its index if ``None``).

    Returns:
        One image per graph, in order.

    Raises:
        GraphvizNotFoundError: ``dot`` is not installed.
        GraphvizError: ``dot`` failed; the message names the frame and quotes dot.
    """
    names = list(labels) if labels is not None else [f"frame {i}" for i in range(len(graphs))]
    # An SVG costs about what its layout does, so most frames are done in the first pass; a
    # PNG costs ten times more, so it waits until the layouts say how to draw each frame.
    first = [_LAYOUT, fmt] if fmt == "svg" else [_LAYOUT]
    drawn = _render([g.source for g in graphs], names, first)
    layouts: list[Layout] = [outputs[0] for outputs in drawn]
    images: list[bytes | None] = [outputs[1] if len(outputs) > 1 else None for outputs in drawn]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, layout in enumerate(layouts):
        groups.setdefault(_structure(layout), []).append(i)
    references = _reference_layouts(graphs, layouts, list(groups.values()), names)
    pinned: dict[int, graphviz.Digraph] = {}
    for members, reference in zip(groups.values(), references, strict=True):
        still = _geometry(reference)
        if any(_geometry(layouts[i]) != still for i in members):
            # All of them: neato clips arrowheads a hundredth of a point off dot's.
            pinned.update((i, _pinned(graphs[i], reference)) for i in members)
    _draw(images, pinned, names, fmt, _KEEP_POSITIONS)
    _draw(images, {i: graphs[i] for i, image in enumerate(images) if image is None}, names, fmt)
    return cast(list[bytes], images)  # _draw filled every gap


def _draw(
    images: list[bytes | None],
    graphs: Mapping[int, graphviz.Digraph],
    names: Sequence[str],
    fmt: str,
    flags: Sequence[str] = (),
) -> None:
    """Draw ``graphs`` (by frame index) into ``images``."""
    if graphs:
        drawn = _render(
            [g.source for g in graphs.values()], [names[i] for i in graphs], [fmt], flags
        )
        for i, outputs in zip(graphs, drawn, strict=True):
            images[i] = outputs[0]


def dot_executable() -> str:
    """The path of Graphviz's ``dot``.

    Raises:
        GraphvizNotFoundError: it is not on ``PATH``.
    """
    found = shutil.which("dot")
    if found is None:
        raise GraphvizNotFoundError()
    return found


def _reference_layouts(
    graphs: Sequence[graphviz.Digraph],
    layouts: Sequence[Layout],
    groups: Sequence[Sequence[int]],
    names: Sequence[str],
) -> list[Layout]:
    """Each group's reference layout (see Note [Still layout], step 2)."""
    references = [layouts[members[-1]] for members in groups]
    resized: dict[int, graphviz.Digraph] = {}
    for position, members in enumerate(groups):
        largest: dict[str, tuple[float, float]] = {}
        for i in members:
            for name, (width, height) in _node_sizes(layouts[i]).items():
                w, h = largest.get(name, (0.0, 0.0))
                largest[name] = (max(w, width), max(h, height))
        last = members[-1]
        smaller = {
            n: largest[n] for n, size in _node_sizes(layouts[last]).items() if size != largest[n]
        }
        if smaller:
            resized[position] = _with_sizes(graphs[last], smaller)
    if resized:
        sources = [g.source for g in resized.values()]
        again = _render(sources, [names[groups[p][-1]] for p in resized], [_LAYOUT])
        for position, outputs in zip(resized, again, strict=True):
            references[position] = outputs[0]
    return references


def _objects(layout: Layout) -> tuple[list[Layout], list[Layout]]:
    """A layout's subgraphs and nodes (dot lists the subgraphs first)."""
    objects = sorted(layout.get("objects", []), key=lambda o: o["_gvid"])
    count = layout.get("_subgraph_cnt", 0)
    return objects[:count], objects[count:]


def _edge_ends(layout: Layout) -> list[tuple[str, str]]:
    """``(tail name, head name)`` of each edge, in dot's order."""
    names = {o["_gvid"]: o["name"] for o in layout.get("objects", [])}
    return [(names[e["tail"]], names[e["head"]]) for e in layout.get("edges", [])]


def _structure(layout: Layout) -> tuple[Any, ...]:
    """What a frame draws, regardless of where: its clusters, nodes and edges."""
    subgraphs, nodes = _objects(layout)
    return (
        tuple(sorted(s["name"] for s in subgraphs)),
        tuple(sorted(n["name"] for n in nodes)),
        tuple(sorted(_edge_ends(layout))),
    )


def _geometry(layout: Layout) -> tuple[Any, ...]:
    """Where a frame draws everything; equal for frames that look still between each other."""
    subgraphs, nodes = _objects(layout)
    return (
        tuple(layout.get(key) for key in _GRAPH_GEOMETRY),
        tuple((s["name"], *(s.get(key) for key in _GRAPH_GEOMETRY)) for s in subgraphs),
        tuple((n["name"], *(n.get(key) for key in _NODE_GEOMETRY)) for n in nodes),
        tuple(tuple(e.get(key) for key in _EDGE_GEOMETRY) for e in layout.get("edges", [])),
    )


def _node_sizes(layout: Layout) -> dict[str, tuple[float, float]]:
    """``name: (width, height)`` in inches of each node."""
    return {n["name"]: (float(n["width"]), float(n["height"])) for n in _objects(layout)[1]}


def _with_sizes(
    graph: graphviz.Digraph, sizes: Mapping[str, tuple[float, float]]
) -> graphviz.Digraph:
    """A copy of ``graph`` with these nodes at least this big (width and height are minimums)."""
    sized = graph.copy()
    for name, (width, height) in sizes.items():
        # A later statement of an existing node only adds attributes to it.
        sized.body.append(f"\t{_quote(name)} [width={width} height={height}]\n")
    return sized


_ID = r'"(?:[^"\\]|\\.)*"|[^\s"\[\]{};=]+'
_EDGE_STATEMENT = re.compile(rf"\s*(?P<tail>{_ID}) -[->] (?P<head>{_ID})(?P<end> \[|\n)")
"""An edge statement as the ``graphviz`` package writes it: ``\\tTAIL -> HEAD [ATTRS]``."""


def _pinned(graph: graphviz.Digraph, layout: Layout) -> graphviz.Digraph:
    """A copy of ``graph`` with every position of ``layout`` stated, for ``neato -n2``.

    A node or a cluster stated again only gets the attributes added, so they are
    stated again at the end. An edge stated again would be a second edge, so the
    edge's own statement gets them; the k-th edge from A to B in the source is
    the k-th in the layout, as dot keeps parallel edges in the order they came.
    An edge this cannot find is left for neato to draw, in a straight line.
    """
    by_ends: dict[tuple[str, str], list[Layout]] = {}
    for ends, edge in zip(_edge_ends(layout), layout.get("edges", []), strict=True):
        by_ends.setdefault(ends, []).append(edge)
    pinned = graph.copy()
    seen: dict[tuple[str, str], int] = {}
    for position, statement in enumerate(pinned.body):
        match = _EDGE_STATEMENT.match(statement)
        if match is None:
            continue
        ends = (_node_name(match["tail"]), _node_name(match["head"]))
        k = seen[ends] = seen.get(ends, -1) + 1
        same = by_ends.get(ends, [])
        if k < len(same):
            attrs = _attrs(same[k], _EDGE_GEOMETRY)
            cut = match.end() if match["end"] == " [" else match.end() - 1
            opened = f"{attrs} " if match["end"] == " [" else f" [{attrs}]"
            pinned.body[position] = statement[:cut] + opened + statement[cut:]
    subgraphs, nodes = _objects(layout)
    pinned.body.extend(f"\t{_quote(n['name'])} [{_attrs(n, _NODE_GEOMETRY)}]\n" for n in nodes)
    by_id = {s["_gvid"]: s for s in subgraphs}
    nested = {child for s in subgraphs for child in s.get("subgraphs", [])}
    pinned.body.extend(f"\t{_subgraph(by_id, s)}\n" for s in subgraphs if s["_gvid"] not in nested)
    # neato would move the drawing to the origin and size the page to what it draws, which
    # changes with the text; dot's page is the layout's box and its padding.
    page = f'notranslate=true viewport="{_viewport(layout)}"'
    pinned.body.append(f"\tgraph [{_attrs(layout, _GRAPH_GEOMETRY)} {page}]\n")
    return pinned


def _viewport(layout: Layout) -> str:
    """dot's page for ``layout`` as a ``viewport``: ``width,height,zoom,centre x,centre y``."""
    x0, y0, x1, y1 = (float(v) for v in layout["bb"].split(","))
    pad = [float(v) * 72 for v in layout["pad"].split(",")] if "pad" in layout else [4.0]
    return f"{x1 - x0 + 2 * pad[0]},{y1 - y0 + 2 * pad[-1]},1,{(x0 + x1) / 2},{(y0 + y1) / 2}"


def _subgraph(by_id: Mapping[int, Layout], subgraph: Layout) -> str:
    """``subgraph NAME { graph [bb=...] ... }``, nested as in the layout."""
    inner = " ".join(_subgraph(by_id, by_id[child]) for child in subgraph.get("subgraphs", []))
    own = _attrs(subgraph, _GRAPH_GEOMETRY)
    return f"subgraph {_quote(subgraph['name'])} {{ graph [{own}] {inner}}}"


def _attrs(item: Layout, keys: Sequence[str]) -> str:
    return " ".join(f'{key}="{item[key]}"' for key in keys if key in item)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '\\"') + '"'


def _node_name(token: str) -> str:
    """The node of an edge end as written: ``"a \\"b\\""``, ``n3`` or ``n3:port``."""
    if token.startswith('"'):
        return token[1:-1].replace('\\"', '"')
    return token.split(":", 1)[0]


def _render(
    sources: Sequence[str], names: Sequence[str], formats: Sequence[str], flags: Sequence[str] = ()
) -> list[list[Any]]:
    """Each source's outputs in ``formats`` (layouts as dicts, images as bytes), in batches.

    See Note [One dot per batch].
    """
    workers = max(1, min(os.cpu_count() or 1, len(sources) // MIN_BATCH))
    bounds = [len(sources) * i // workers for i in range(workers + 1)]
    batches = [(sources[a:b], names[a:b]) for a, b in itertools.pairwise(bounds)]
    executable = dot_executable()

    def run(batch: tuple[Sequence[str], Sequence[str]]) -> list[list[Any]]:
        return _run_dot([executable, *flags], batch[0], batch[1], formats)

    if len(batches) == 1:
        return run(batches[0])
    with ThreadPoolExecutor(len(batches)) as pool:
        try:
            return [outputs for done in pool.map(run, batches) for outputs in done]
        except BaseException:
            # Stopped (Ctrl-C, SIGTERM) or failed: the pool waits for its threads on the
            # way out, and they for their dot processes (Note [No dot outlives us] in dot.py).
            dot.end_dot_processes()
            raise


def _run_dot(
    command: Sequence[str], sources: Sequence[str], names: Sequence[str], formats: Sequence[str]
) -> list[list[Any]]:
    """One dot process for several graphs (see Note [One dot per batch])."""
    try:
        returncode, stdout, stderr_bytes = dot.run_dot_process(
            [*command, *(f"-T{fmt}" for fmt in formats)], "".join(sources).encode("utf-8")
        )
    except FileNotFoundError:
        raise GraphvizNotFoundError() from None
    if returncode != 0:
        stderr = stderr_bytes.decode("utf-8", "replace").strip()
        where = _failed_frame(stderr, sources, names)
        raise GraphvizError(f"dot failed{where} (exit status {returncode}): {stderr}")
    outputs = _split(stdout, formats)
    if len(outputs) != len(sources):
        raise GraphvizError(f"dot wrote {len(outputs)} results for {len(sources)} graphs")
    return outputs


def _failed_frame(stderr: str, sources: Sequence[str], names: Sequence[str]) -> str:
    """`` on the frame for step k`` when dot names a line of its input, else ``""``."""
    match = re.search(r"\bline (\d+)", stderr)
    if match is None:
        return ""
    line = int(match.group(1))
    end = 0
    for source, name in zip(sources, names, strict=True):
        end += source.count("\n")  # dot numbers the lines of its whole input from 1
        if line <= end:
            return f" on the frame for {name}"
    return ""


def _split(output: bytes, formats: Sequence[str]) -> list[list[Any]]:
    """Cut dot's output for several graphs into each graph's outputs, in ``formats`` order."""
    readers = {_LAYOUT: _read_json, "svg": _read_svg, "png": _read_png}
    graphs: list[list[Any]] = []
    position = _skip_space(output, 0)
    while position < len(output):
        outputs = []
        for fmt in formats:
            item, position = readers[fmt](output, position)
            outputs.append(item)
            position = _skip_space(output, position)
        graphs.append(outputs)
    return graphs


def _skip_space(data: bytes, position: int) -> int:
    while position < len(data) and data[position] in b" \t\r\n":
        position += 1
    return position


def _read_json(data: bytes, start: int) -> tuple[Layout, int]:
    # dot indents everything inside the top-level object, which alone closes at column 0.
    end = data.find(b"\n}", start)
    while end != -1:
        try:
            return json.loads(data[start : end + 2]), end + 2
        except ValueError:
            end = data.find(b"\n}", end + 1)
    raise GraphvizError(f"could not read dot's layout output at byte {start}")


def _read_svg(data: bytes, start: int) -> tuple[bytes, int]:
    end = data.find(b"</svg>", start)
    if not data.startswith((b"<?xml", b"<svg"), start) or end == -1:
        raise GraphvizError(f"could not read dot's SVG output at byte {start}")
    end += len(b"</svg>")
    return data[start:end], end


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _read_png(data: bytes, start: int) -> tuple[bytes, int]:
    if not data.startswith(_PNG_SIGNATURE, start):
        raise GraphvizError(f"could not read dot's PNG output at byte {start}")
    position = start + len(_PNG_SIGNATURE)
    while position + 8 <= len(data):
        length = int.from_bytes(data[position : position + 4], "big")
        kind = data[position + 4 : position + 8]
        position += 12 + length  # length, type, data, CRC
        if kind == b"IEND":
            return data[start:position], position
    raise GraphvizError(f"dot's PNG output at byte {start} is truncated")
