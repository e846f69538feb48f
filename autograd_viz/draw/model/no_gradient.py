"""Leaves that got no gradient, in a picture of the call: marked, with why and the line.

Note [Leaves without gradient in a picture]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A trace recorded with the gradient watch on holds, per call, every parameter
that got no gradient and why (Note [Gradient findings in a trace] in
``autograd_viz/grads/recorded.py``). A picture of the call shows them two ways:

* a leaf on the graph (its ``AccumulateGrad`` ran or was pruned, but its
  gradient was none or all zeros) keeps its box, drawn dashed in red, its
  tooltip saying why and at which line;
* a parameter off the graph (cut by ``.detach()``, never used, used without
  grad, dropped before the loss) has no node to hang from: it gets a box of
  its own hanging from the call's root, parameters with the same reason and
  line in one box, on a dashed edge labelled with the reason and its line
  (``cut at model.py:28``), as the gradient that would have come from the loss
  stopped there. At most :data:`OFF_GRAPH` such boxes; one more counts the rest.

Names are data: the box's title, its tooltip and the edge's label are escaped
where they are drawn (:mod:`autograd_viz.draw.render.escape`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from autograd_viz.draw.model.drawn import TensorBox
from autograd_viz.trace import Trace
from autograd_viz.trace.notes import MISSING_REASONS, grads_notes

OFF_GRAPH = 12
"""The most boxes drawn for parameters off the graph (the rest are counted in one more)."""


NAMES = 3
"""Parameters named in one box's title before the rest are counted."""


def why_text(finding: Mapping[str, Any]) -> str:
    """A finding in words, with its line: ``no gradient (cut): cut by .detach() ...``."""
    reason = finding["reason"]
    head = "gradient all zeros" if reason == "exact zeros" else f"no gradient ({reason})"
    text = f"{finding['parameter']}: {head}: {finding['why']}"
    where = finding.get("where")
    if where:
        text += f"\nat {where['file']}:{where['line']}  {where['code']}"
    return text


def line_of(finding: Mapping[str, Any]) -> str:
    """Where a finding happened, short: ``model.py:28`` (empty when it has no line)."""
    where = finding.get("where")
    return f"{os.path.basename(where['file'])}:{where['line']}" if where else ""


def marked(
    trace: Trace, graph_task: int, boxes: tuple[TensorBox, ...], keys: Mapping[int, str]
) -> tuple[TensorBox, ...]:
    """``boxes`` with the leaves of ``graph_task`` that got no gradient marked, and a box for
    each group of parameters off the graph (Note [Leaves without gradient in a picture]).

    Args:
        trace: the recorded trace.
        graph_task: the call drawn.
        boxes: its leaf boxes.
        keys: its node ids' keys in the drawing.
    """
    data = grads_notes(trace).get(graph_task)
    info = trace.graph_tasks.get(graph_task)
    if not data or info is None:
        return boxes
    findings = data["findings"]
    by_name = {f["parameter"]: f for f in findings}
    found: dict[str, Mapping[str, Any]] = {}  # leaf box key -> finding
    on_graph: set[str] = set()
    for node_id, node in info.nodes.items():
        leaf = node.leaf
        if leaf is None or node_id not in keys:
            continue
        for name in (leaf.name, *leaf.aliases):
            if name is None:
                continue
            on_graph.add(name)
            if name in by_name:
                found.setdefault(f"{keys[node_id]}_leaf", by_name[name])
    out = [
        dataclasses.replace(box, why=why_text(found[box.key])) if box.key in found else box
        for box in boxes
    ]
    root = keys.get(info.root) or next(iter(keys.values()), None)
    if root is not None:
        off = [
            f for f in findings if f["reason"] in MISSING_REASONS and f["parameter"] not in on_graph
        ]
        out.extend(_off_graph_boxes(off, root))
    return tuple(out)


def _off_graph_boxes(findings: Sequence[Mapping[str, Any]], root: str) -> list[TensorBox]:
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for f in findings:
        where = f.get("where")
        at = (where["file"], where["line"]) if where else None
        groups.setdefault((f["reason"], f["why"], at), []).append(f)
    boxes = []
    for i, members in enumerate(list(groups.values())[:OFF_GRAPH]):
        first = members[0]
        names = [m["parameter"] for m in members]
        title = ", ".join(names[:NAMES]) + (f" +{len(names) - NAMES}" if len(names) > NAMES else "")
        line = line_of(first)
        label = f"{first['reason']} at {line}" if line else first["reason"]
        why = "\n".join(why_text(m) for m in members[:NAMES])
        if len(members) > NAMES:
            why += f"\n... and {len(members) - NAMES} more"
        boxes.append(
            TensorBox(
                f"nograd{i}",
                "leaf",
                root,
                title,
                None,
                tuple(first["shape"]),
                "",
                why=why,
                cut=label,
            )
        )
    rest = sum(len(m) for m in list(groups.values())[OFF_GRAPH:])
    if rest:
        boxes.append(
            TensorBox(
                f"nograd{OFF_GRAPH}",
                "leaf",
                root,
                f"+{rest} more parameters",
                None,
                (),
                "",
                why=f"{rest} more parameters got no gradient (autograd-viz grads lists them)",
                cut="no gradient",
            )
        )
    return boxes
