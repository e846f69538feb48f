"""An animation's frames as changes: one drawing per graph, then what each step redraws.

Note [Frames as changes]
~~~~~~~~~~~~~~~~~~~~~~~~
Between two steps of a backward pass one or two nodes change colour and an
edge turns bold; the other hundreds of nodes stay as they were. So the page
does not hold a drawing per frame. A frame's DOT statements are read as
*elements* (a node, an edge, a cluster's attributes) and *skeleton* (subgraphs
opening and closing, defaults, the graph's own attributes):

1. frames whose skeletons are equal form a group (one graph task: the same
   nodes, edges and clusters at every step); an element's *variants* are the
   different statements it has over the group's frames;
2. each group is laid out once by dot, from its last frame (the one with the
   most text), every node made as big as its biggest variant (Note [Still
   layout] in :mod:`autograd_viz.draw.render.frames`);
3. one ``neato -n2`` pass per group draws, at the positions of that layout, the
   group's drawing (its *base*) and every variant of every element on one
   sheet; each variant's SVG group is cut out of the sheet.

The page keeps a base per group, each variant's SVG once, and each frame as
the elements whose variant differs from the frame before (or from the base when
a group begins). Three Graphviz runs in all, whatever the number of frames.

A frame whose statements cannot be read as elements (a DOT source this module
does not know) is a group of its own, drawn whole by dot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autograd_viz.draw.render.frames import (
    _KEEP_POSITIONS,
    _LAYOUT,
    Layout,
    _edge_ends,
    _node_sizes,
    _objects,
    _render,
    _viewport,
)
from autograd_viz.draw.render.svg_parts import element_groups, inline, renamed

_ID = r'"(?:[^"\\]|\\.)*"|[^\s"\[\]{};=]+'
_OPEN = re.compile(rf"\s*subgraph (?P<name>{_ID}) {{\n\Z")
_CLOSE = re.compile(r"\s*}\n\Z")
_EDGE = re.compile(rf"\s*(?P<tail>{_ID}) -[->] (?P<head>{_ID})(?: \[.*\])?\n\Z", re.DOTALL)
_NODE = re.compile(rf"\s*(?P<name>{_ID})(?: \[.*\])?\n\Z", re.DOTALL)
_ATTRS = re.compile(rf"\s*(?:graph \[.*\]|(?:{_ID})=.*)\n\Z", re.DOTALL)
_DEFAULTS = re.compile(r"\s*(?:node|edge) \[.*\]\n\Z", re.DOTALL)

Key = tuple[str, ...]
"""An element: ``("n", name)``, ``("e", tail, head, k)`` (the k-th such edge), or
``("a", subgraph)`` (a cluster's own attributes)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame's DOT statements, read as skeleton and elements (see Note [Frames as changes])."""

    skeleton: tuple[str | tuple[Key, int], ...]
    """Statements in order; an element's place is ``(key, occurrence)``."""
    elements: Mapping[Key, tuple[str, ...]]
    """Each element's statements (a node stated twice has two)."""

    @property
    def structure(self) -> tuple[Any, ...]:
        """What must be equal for two frames to share a drawing."""
        return self.skeleton

    def source(self, extra: Mapping[Key, str] | None = None) -> str:
        """The DOT source again; ``extra`` attributes are added to each element's statements."""
        lines = []
        for entry in self.skeleton:
            if isinstance(entry, str):
                lines.append(entry)
                continue
            key, occurrence = entry
            line = self.elements[key][occurrence]
            if extra and key in extra:
                line = _with_attrs(line, extra[key]) if key[0] != "a" else line
            lines.append(line)
        return "".join(lines)


def read_frame(body: Sequence[str]) -> Frame | None:
    """``body`` (a :class:`graphviz.Digraph`'s statements) as a :class:`Frame`; ``None`` if unread.

    A frame that cannot be read is drawn whole, on its own.
    """
    skeleton: list[str | tuple[Key, int]] = []
    elements: dict[Key, list[str]] = {}
    path: list[str] = []
    edges_seen: dict[tuple[str, str], int] = {}
    for line in body:
        if not line.endswith("\n"):
            return None
        if _OPEN.match(line):
            path.append(_OPEN.match(line)["name"])  # type: ignore[index]
            skeleton.append(line)
            continue
        if _CLOSE.match(line):
            if not path:
                return None
            path.pop()
            skeleton.append(line)
            continue
        if _DEFAULTS.match(line):
            skeleton.append(line)
            continue
        if _ATTRS.match(line):
            if not path:  # the graph's own attributes: part of the skeleton
                skeleton.append(line)
                continue
            key: Key = ("a", path[-1])
        elif (edge := _EDGE.match(line)) is not None:
            ends = (edge["tail"], edge["head"])
            k = edges_seen[ends] = edges_seen.get(ends, -1) + 1
            key = ("e", *ends, str(k))
        elif (node := _NODE.match(line)) is not None and node["name"] not in _KEYWORDS:
            key = ("n", node["name"])
        else:
            return None
        statements = elements.setdefault(key, [])
        skeleton.append((key, len(statements)))
        statements.append(line)
    if path:
        return None
    return Frame(tuple(skeleton), {k: tuple(v) for k, v in elements.items()})


_KEYWORDS = frozenset({"graph", "node", "edge", "subgraph", "digraph", "strict"})


def _with_attrs(line: str, attrs: str) -> str:
    """A node or edge statement with ``attrs`` added (later attributes win)."""
    if line.endswith("]\n"):
        return f"{line[:-2]} {attrs}]\n"
    return f"{line[:-1]} [{attrs}]\n"


@dataclass(slots=True)
class Changes:
    """What the page holds (see Note [Frames as changes])."""

    drawings: list[str] = field(default_factory=list)
    """Each group's drawing (SVG markup), elements at their last frame's variant."""
    bases: list[dict[str, int]] = field(default_factory=list)
    """For each drawing, the variant each element has in it, by element id."""
    variants: list[str] = field(default_factory=list)
    """Each variant's SVG group, once."""
    frames: list[tuple[int, list[tuple[str, int]]]] = field(default_factory=list)
    """Each frame: its group, and ``(element id, variant)`` for what differs from the frame
    before it (or from the group's drawing when the frame before is of another group)."""


def frame_changes(frames: Sequence[Frame | str], names: Sequence[str] | None = None) -> Changes:
    """Lay out and draw ``frames`` as changes (see Note [Frames as changes]).

    Args:
        frames: each frame read by :func:`read_frame`, or its DOT source when unread.
        names: what to call each frame in an error message (its index if ``None``).

    Raises:
        GraphvizNotFoundError: ``dot`` is not installed.
        GraphvizError: ``dot`` failed; the message names the frame and quotes dot.
    """
    names = list(names) if names is not None else [f"frame {i}" for i in range(len(frames))]
    groups: dict[Any, list[int]] = {}
    for i, frame in enumerate(frames):
        groups.setdefault(frame.structure if isinstance(frame, Frame) else ("whole", i), []).append(
            i
        )
    plans = [_Group(frames, members, names) for members in groups.values()]
    read = [plan for plan in plans if plan.frame is not None]
    # 1: every node variant's size; 2: each group's layout; 3: the drawings and sheets.
    sizes = _render([p.sizes_source() for p in read], [p.name for p in read], [_LAYOUT])
    for plan, (layout,) in zip(read, sizes, strict=True):
        plan.take_sizes(layout)
    layouts = _render([p.reference_source() for p in read], [p.name for p in read], [_LAYOUT])
    sources: list[str] = []
    sheet_names: list[str] = []
    for plan, (layout,) in zip(read, layouts, strict=True):
        plan.layout = layout
        sources.extend(plan.sheet_sources())
        sheet_names.extend([plan.name, plan.name])
    drawn = iter(_render(sources, sheet_names, ["svg"], _KEEP_POSITIONS))
    whole = [plan for plan in plans if plan.frame is None]
    alone = iter(_render([p.whole for p in whole], [p.name for p in whole], ["svg"]))
    changes = Changes()
    index_of: list[int] = []
    for plan in plans:
        if plan.frame is None:
            plan.take_whole(next(alone)[0], changes)
        else:
            plan.take_drawings(next(drawn)[0], next(drawn)[0], changes)
        changes.bases.append(dict(plan.base))
        index_of.append(len(changes.drawings) - 1)
    group_of = {i: g for g, plan in enumerate(plans) for i in plan.members}
    shown: dict[str, int] = {}
    for i in range(len(frames)):
        g = group_of[i]
        plan = plans[g]
        if i == 0 or group_of[i - 1] != g:
            shown = dict(plan.base)
        wanted = plan.variant_ids(i)
        delta = [(eid, v) for eid, v in wanted.items() if shown.get(eid) != v]
        shown.update(delta)
        changes.frames.append((index_of[g], delta))
    return changes


class _Group:
    """The frames of one group and what is worked out for them, step by step."""

    def __init__(self, frames: Sequence[Frame | str], members: list[int], names: Sequence[str]):
        self.members = members
        self.name = names[members[-1]]
        last = frames[members[-1]]
        self.frame: Frame | None = last if isinstance(last, Frame) else None
        self.whole = last if isinstance(last, str) else ""
        self.ids: dict[Key, str] = {}
        self.variants: dict[Key, list[tuple[str, ...]]] = {}
        self.per_frame: dict[int, dict[Key, int]] = {}
        self.base: dict[str, int] = {}
        self.global_ids: dict[tuple[Key, int], int] = {}
        self.sizes: dict[Key, tuple[float, float]] = {}
        self.layout: Layout = {}
        if self.frame is None:
            return
        for key in self.frame.elements:
            self.ids[key] = f"f{len(self.ids)}"
        for i in members:
            frame = frames[i]
            assert isinstance(frame, Frame)
            chosen = {}
            for key, statements in frame.elements.items():
                known = self.variants.setdefault(key, [])
                if statements not in known:
                    known.append(statements)
                chosen[key] = known.index(statements)
            self.per_frame[i] = chosen

    # -- 1: sizes -------------------------------------------------------------------------
    def sizes_source(self) -> str:
        """Every node variant on its own, under the frame's defaults, to measure it."""
        assert self.frame is not None
        defaults = [s for s in self.frame.skeleton if isinstance(s, str) and _DEFAULTS.match(s)]
        top = [
            s
            for s in self.frame.skeleton
            if isinstance(s, str) and _ATTRS.match(s) and not s.lstrip().startswith("label")
        ]
        lines = ["digraph sizes {\n", *top, *defaults]
        for key, variants in self.variants.items():
            if key[0] != "n":
                continue
            for v, statements in enumerate(variants):
                name = _quote(f"s{self.ids[key]}_{v}")
                lines.extend(_renamed(s, key[1], name) for s in statements)
        lines.append("}\n")
        return "".join(lines)

    def take_sizes(self, layout: Layout) -> None:
        measured = _node_sizes(layout)
        for key in self.variants:
            if key[0] != "n":
                continue
            sizes = [measured.get(f"s{self.ids[key]}_{v}") for v in range(len(self.variants[key]))]
            known = [s for s in sizes if s is not None]
            if known:
                self.sizes[key] = (max(w for w, _ in known), max(h for _, h in known))

    # -- 2: the layout --------------------------------------------------------------------
    def reference_source(self) -> str:
        """The group's last frame with every node as big as its biggest variant."""
        assert self.frame is not None
        extra = {
            key: f"width={w} height={h}" for key, (w, h) in self.sizes.items() if key[0] == "n"
        }
        return "digraph reference {\n" + self.frame.source(extra) + "}\n"

    # -- 3: the drawings ------------------------------------------------------------------
    def sheet_sources(self) -> tuple[str, str]:
        """The group's drawing, and the sheet of every variant, both at the layout's positions."""
        assert self.frame is not None
        geometry = self._geometry()
        base = self.frame.source(geometry)
        closing = self._cluster_geometry()
        page = f'notranslate=true viewport="{_viewport(self.layout)}"'
        graph = f"\tgraph [{_attr_text(self.layout, ('bb', 'lp'))} {page}]\n"
        drawing = "digraph drawing {\n" + _with_clusters(base, closing) + graph + "}\n"
        sheet = ["digraph sheet {\n", _with_clusters(base, closing)]
        for key, variants in self.variants.items():
            for v, statements in enumerate(variants):
                name = f"v{self.ids[key]}_{v}z"  # z: no sheet id starts another
                where = geometry.get(key, "")
                if key[0] == "n":
                    sheet.extend(_renamed(s, key[1], _quote(name)) for s in statements)
                    sheet.append(f"\t{_quote(name)} [{where} id={_quote(name)}]\n")
                elif key[0] == "e":
                    line = statements[0]
                    sheet.append(_with_attrs(line, f"{where} id={_quote(name)}"))
                else:
                    cluster = _quote(f"cluster_{name}")
                    box = self._cluster_box(key[1])
                    sheet.append(f"\tsubgraph {cluster} {{\n")
                    sheet.extend(statements)
                    sheet.append(f"\t\tgraph [{box} id={_quote(name)}]\n\t}}\n")
        sheet.append(graph + "}\n")
        return drawing, "".join(sheet)

    def _geometry(self) -> dict[Key, str]:
        """Each node's and edge's position in the layout, and its element id, as attributes."""
        _, nodes = _objects(self.layout)
        at = {n["name"]: n for n in nodes}
        edges: dict[tuple[str, str], list[Layout]] = {}
        for ends, edge in zip(_edge_ends(self.layout), self.layout.get("edges", []), strict=True):
            edges.setdefault(ends, []).append(edge)
        out: dict[Key, str] = {}
        for key, eid in self.ids.items():
            if key[0] == "n":
                found = at.get(_unquote(key[1]))
                where = _attr_text(found, ("pos", "width", "height")) if found else ""
            elif key[0] == "e":
                same = edges.get((_unquote(key[1]), _unquote(key[2])), [])
                k = int(key[3])
                where = _attr_text(same[k], _EDGE_KEYS) if k < len(same) else ""
            else:
                continue
            out[key] = f"{where} id={_quote(eid)}"
        return out

    def _cluster_box(self, name: str) -> str:
        subgraphs, _ = _objects(self.layout)
        found = next((s for s in subgraphs if s["name"] == _unquote(name)), None)
        return _attr_text(found, ("bb", "lp")) if found else ""

    def _cluster_geometry(self) -> dict[str, str]:
        return {
            key[1]: f"{self._cluster_box(key[1])} id={_quote(eid)}"
            for key, eid in self.ids.items()
            if key[0] == "a"
        }

    def take_drawings(self, drawing: bytes, sheet: bytes, changes: Changes) -> None:
        """Keep the drawing, and cut every variant out of the sheet into ``changes``."""
        svg = inline(drawing)
        changes.drawings.append(svg)
        by_id = element_groups(sheet)
        on_base = element_groups(drawing)
        last = self.per_frame[self.members[-1]]
        for key, variants in self.variants.items():
            eid = self.ids[key]
            for v in range(len(variants)):
                markup = by_id.get(f"v{eid}_{v}z")
                if v == last[key] and eid in on_base:
                    markup = on_base[eid]
                elif markup is not None:
                    title = _unquote(key[1]) if key[0] in ("n", "a") else None  # edges: as drawn
                    markup = renamed(markup, f"v{eid}_{v}z", eid, title)
                if markup is None:
                    continue  # dot drew nothing for it (an invisible element)
                self.global_ids[(key, v)] = len(changes.variants)
                changes.variants.append(markup)
        self.base = {
            self.ids[key]: self.global_ids[(key, v)]
            for key, v in last.items()
            if (key, v) in self.global_ids
        }

    def take_whole(self, drawing: bytes, changes: Changes) -> None:
        changes.drawings.append(inline(drawing))

    def variant_ids(self, i: int) -> dict[str, int]:
        """Frame ``i``'s element id → variant index in :attr:`Changes.variants`."""
        chosen = self.per_frame.get(i, {})
        return {
            self.ids[key]: self.global_ids[(key, v)]
            for key, v in chosen.items()
            if (key, v) in self.global_ids
        }


_EDGE_KEYS = ("pos", "lp", "head_lp", "tail_lp", "xlp")


def _attr_text(item: Mapping[str, Any], keys: Sequence[str]) -> str:
    return " ".join(f'{key}="{item[key]}"' for key in keys if key in item)


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(token: str) -> str:
    if token.startswith('"'):
        return token[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return token


def _renamed(statement: str, name: str, new: str) -> str:
    """A node statement for node ``name`` restated for node ``new``, at the top level."""
    return "\t" + new + statement.lstrip()[len(name) :]


def _with_clusters(source: str, boxes: Mapping[str, str]) -> str:
    """``source`` with each cluster's box and id stated just before it closes."""
    out = []
    path: list[str] = []
    for line in source.splitlines(keepends=True):
        opened = _OPEN.match(line)
        if opened:
            path.append(opened["name"])
        elif _CLOSE.match(line) and path:
            name = path.pop()
            if name in boxes:
                out.append(f"\tgraph [{boxes[name]}]\n")
        out.append(line)
    return "".join(out)
