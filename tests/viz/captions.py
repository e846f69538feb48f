"""Every caption a picture carries, checked against the picture itself.

A picture's lines (its notices), its fold boxes' names, counts and node counts,
and the ``× N`` of its DOT labels are statements about what is drawn; these
helpers recount what is drawn and compare, and check that each fold joins
calls alike in what a reader sees: module class, parameters (names below the
module, shapes), and ops on the same tensors.
"""

from __future__ import annotations

import re
from collections import Counter

from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import expand_braces
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.draw.render import dot
from autograd_viz.draw.render.escape import html_text

_NEAR = re.compile(
    r"^showing the ([\d,]+) nodes within (\d+) edges? of (.+?)"
    r"(?:, with the alike calls they reach (folded )?\(([\d,]+) nodes more"
    r"(?:, ([\d,]+) of them folded)?\))?(?:; ([\d,]+) more not shown)?$"
)
_LIMIT = re.compile(
    r"^showing ([\d,]+) of ([\d,]+) (?:boxes and nodes|nodes), nearest the root .*"
    r"; ([\d,]+) more not shown$"
)
_BY_MODULE = re.compile(
    r"^drawn by module \(level (\d+)\): ([\d,]+) boxes? stands? for ([\d,]+) of ([\d,]+) nodes"
    r"(?:; ([\d,]+) stacks? draws? one call for ([\d,]+) more \(([\d,]+) nodes\))?"
    r"(?:; ([\d,]+) parameters? counted in frame labels)?$"
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parameters_of(view: GraphView, path: str) -> list[tuple[str, tuple[int, ...]]]:
    """The named leaves below the module at ``path``, by their names below it, with shapes."""
    out = []
    for node in view.nodes.values():
        leaf = node.info.leaf
        if leaf is not None and leaf.name and leaf.name.startswith(path + "."):
            out.append((leaf.name[len(path) + 1 :], tuple(leaf.shape)))
    return sorted(out)


def _calls(name: str) -> list[list[tuple[str, int]]]:
    """The ``(path, call)`` of each call a fold's name stands for, by place in its repetition."""
    parts = name[1:-1].split(", ") if name.startswith("(") else [name]
    places = []
    for part in parts:
        calls = []
        for one in expand_braces(part) if "{" in part else [part]:
            path, colon, call = one.rpartition(":")
            calls.append((path, int(call)) if colon and call.isdecimal() else (one, 0))
        places.append(calls)
    return places


def check_folds_alike(view: GraphView, picture: GraphView) -> int:
    """Each fold box of ``picture`` (drawn of ``view``) joins calls alike at each place of its
    repetition: one class, one set of parameters by name and shape, one multiset of ops on
    tensors of one shape; its name reads back as as many calls as its count says, and its
    node count is theirs. Returns the folds seen."""
    seen = 0
    for node in picture.nodes.values():
        box = node.box
        if box is None or box.group is None or box.count == 1:
            continue  # a call drawn closed (a fold's call split off by its status, too)
        seen += 1
        places = _calls(box.name)
        assert all(len(calls) == box.count for calls in places), box.name
        assert box.summary.nodes == len(box.members), box.name
        members = [view.nodes[k].info for k in box.members]
        ops_in = 0
        for calls in places:
            assert len({view.modules.get(path, "") for path, _ in calls}) == 1, box.name
            params = {repr(parameters_of(view, path)) for path, _ in calls}
            assert len(params) == 1, (box.name, params)
            ops = []
            for call in calls:
                inside = [m for m in members if m.leaf is None and call in m.scope]
                ops_in += len(inside)
                ops.append(repr(sorted(Counter((m.name, m.inputs) for m in inside).items())))
            assert len(set(ops)) == 1, box.name
        # Every op of the box is in one of the calls its name says (leaves aside).
        assert ops_in == sum(1 for m in members if m.leaf is None), box.name
    return seen


def check_notices(before: GraphView, picture: GraphView) -> None:
    """Each line under ``picture`` (drawn of ``before``, every node) counts what it shows."""
    represented = 0
    boxes = 0
    boxed = 0
    folded = 0
    for key, node in picture.nodes.items():
        if node.box is None:
            represented += 1
            assert key in before.nodes
        else:
            boxes += 1
            boxed += len(node.box.members)
            represented += len(node.box.members)
            if node.box.count > 1:
                folded += len(node.box.members)
    stacks = [c.stack for c in picture.clusters.values() if c.stack is not None]
    counted = sum(len(c.parameters) for c in picture.clusters.values())
    # A stack's calls not drawn stand in for the one drawn; counted parameters are in a label.
    represented += sum(s.hidden for s in stacks) + counted
    limited = any(_LIMIT.match(line) for line in picture.notices)
    for line in picture.notices:
        cut = _LIMIT.match(line)
        if cut:
            shown, total, left_out = (_int(g) for g in cut.groups())
            assert shown == len(picture.nodes) and total - shown == left_out, line
            continue
        near = _NEAR.match(line)
        if near:
            within, _depth, _name, says_folded, more, some, rest = near.groups()
            carried = _int(more) if more else 0
            if not limited:  # a budget after it leaves out more than it counts
                assert _int(within) + carried == represented, line
                assert _int(rest or "0") == len(before.nodes) - represented, line
            if more and says_folded:
                assert folded >= carried > 0, line  # every node carried is in a folded box
            if some:
                assert 0 < _int(some) < carried and folded >= _int(some), line
            if more and not says_folded and not some:
                assert carried > 0
            continue
        by_module = _BY_MODULE.match(line)
        if by_module:
            _level, count, stand, of, n_stacks, calls, hidden, params = by_module.groups()
            assert _int(n_stacks or "0") == len(stacks), line
            assert _int(calls or "0") == sum(s.count - 1 for s in stacks), line
            assert _int(hidden or "0") == sum(s.hidden for s in stacks), line
            assert _int(params or "0") == counted, line
            assert _int(count) == boxes, line
            assert _int(stand) == boxed, line
            assert _int(of) == represented or (limited and _int(of) > represented), line
        elif "alike" in line or "folded" in line or line.startswith("showing"):
            raise AssertionError(f"a line about folds this check does not read: {line}")


def check_dot(picture: GraphView) -> None:
    """The DOT source's box labels say each box's count, and only a fold says ``×``."""
    source = dot.render(picture, legend=False).source
    for node in picture.nodes.values():
        box = node.box
        if box is None:
            continue
        name = f"<B>{html_text(box.name)}</B>"
        if box.count > 1:
            assert f"{name} × {box.count:,}" in source, box.name
        else:
            assert f"{name}</TD>" in source, box.name


def check_stacks(view: GraphView, picture: GraphView) -> int:
    """Each stack of ``picture`` (drawn of ``view``) names a fold that reads back as as many
    calls as its count, alike (one class, one set of parameters, one multiset of ops), one of
    them the call drawn; its nodes are the drawn call's and those it does not draw, and its
    statuses count every call once. Its DOT label says its name and count. Returns the stacks
    seen."""
    source = dot.render(picture, legend=False).source
    seen = 0
    for cluster in picture.clusters.values():
        stack = cluster.stack
        if stack is None:
            continue
        seen += 1
        (calls,) = _calls(stack.name)
        assert len(calls) == stack.count > 1, stack.name
        names = expand_braces(stack.name)
        assert cluster.name in names and stack.drawn == cluster.name, stack.name
        assert sum(n for _, n in stack.statuses) == stack.count, stack.name
        assert stack.summary.nodes == cluster.summary.nodes + stack.hidden, stack.name
        infos = [n.info for n in view.nodes.values()]
        assert len({view.modules.get(path, "") for path, _ in calls}) == 1, stack.name
        assert len({repr(parameters_of(view, path)) for path, _ in calls}) == 1, stack.name
        ops = {
            repr(sorted(Counter((m.name, m.inputs) for m in infos if m.leaf is None
                                and (path, call) in m.scope).items()))
            for path, call in calls
        }  # fmt: skip
        assert len(ops) == 1, stack.name
        assert f"<B>{html_text(stack.name)}</B> × {stack.count:,}" in source, stack.name
    return seen


def check_pictures(view: GraphView, represent: bool = False, **options: object) -> int:
    """Draw ``view`` with ``options`` (a :class:`ViewOptions`'s fields; ``represent`` as
    :func:`showing.show` takes it) and check every caption; returns the folds the picture
    draws."""
    picture = showing.show(view, ViewOptions(**options), represent=represent)  # type: ignore[arg-type]
    check_notices(view, picture)
    check_dot(picture)
    check_stacks(view, picture)
    return check_folds_alike(view, picture)


def names_to_try(view: GraphView) -> list[str]:
    """Names a reader would ask ``--around`` and ``--expand`` about: each fold, a call in each
    fold, and a parameter of that call."""
    tree = ModuleTree.of_view(view)
    names = []
    for group in tree.groups:
        names.append(group.name)
        call = tree.scopes[group.scopes[-1]]
        names.append(call.name)
        params = parameters_of(view, call.path)
        if params and tree.scopes[group.scopes[-1]].call == 0:
            names.append(f"{call.path}.{params[0][0]}")
    return names
