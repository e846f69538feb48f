"""Every name a view shows, read back: one resolver for ``dot --around``, ``--expand`` and ``/``.

A view shows a node as ``Name #id``, a leaf's tensor by its name (a
parameter: ``transformer.h.3.attn.c_attn.weight``), a module call by its
path (``layer4.1.conv2``, ``cell:3`` when the module ran several times), a
fold of calls by its members' names in one (``transformer.h.{0..11}``) and a
folded chain by one repetition's node names and its ends' ids
(``(TanhBackward0, AddBackward0, MmBackward0) #93..#6``, made by
:func:`~autograd_viz.draw.model.chains.chain_name`). :class:`Names` takes any of
them back, and also:

* another name of a parameter modules share (``lm_head.weight``, shown as
  ``transformer.wte.weight``: a leaf's ``aliases``);
* a node id alone (``#17``, or ``17`` where no module is called ``17``, as
  ``nn.Sequential`` names its modules), or a node name only one node has;
* a node as the TUI writes it: its name without ``Backward0``, or an
  ``AccumulateGrad`` as ``Acc(leaf name)`` or ``AccumulateGrad(leaf name)``,
  then its id, with or without a space (``Mul#12``, ``Acc(fc.bias) #3``);
* a module path of several calls (all of them), or of a container that is
  never called itself (``transformer.h``: the calls inside it);
* ``{a..b}`` / ``{a,b}`` braces and ``*`` / ``?`` wildcards over module names, a
  name holding braces, commas, quotes or parentheses quoted in them as a fold's
  name writes it (``d.{"a,b","{x}",c}``: Note [Quoted names in a fold] in
  :mod:`~autograd_viz.draw.model.folds`);
* some steps of a folded loop, as a picture at a step names the steps done or
  not started (``(emb:{0..7}, cell:{0..7}, head:{0..7})``).

A name that matches nothing raises :class:`~autograd_viz.draw.model.graph_view.GraphViewError`
with the closest names the graph has.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autograd_viz.draw.model.graph_view import GraphViewError
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import NodeInfo
from autograd_viz.trace.text import printable

_NAME_AND_ID = re.compile(r"^(.*?\S)\s*#(\d+)$")
_BRACES = re.compile(r"^(.*?)\{([^{}]*)\}(.*)$")
_STEPS = re.compile(r"^\((.+)\)$")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"', re.DOTALL)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[nrt\\\"])")
_NAMED_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'}
_RANGE = re.compile(r"^(\d+)\.\.(\d+)$")
MAX_EXPANDED = 100_000
"""The most names one brace range stands for (``{0..99999}``)."""


@dataclass(frozen=True, slots=True)
class Target:
    """What a name names in one drawn graph."""

    text: str
    """The name as given."""
    kind: str
    """``"node"``, ``"parameter"`` (a leaf's ``AccumulateGrad``), ``"module"``, ``"fold"``
    (of module calls) or ``"chain"`` (a folded chain)."""
    nodes: tuple[str, ...]
    """Keys of the nodes it names: the node, or every node inside the modules."""
    scopes: tuple[int, ...] = ()
    """The module calls it names (:attr:`ModuleTree.scopes` indices); empty for a node."""
    group: int | None = None
    """The fold group whose calls it names exactly, if any."""

    @property
    def label(self) -> str:
        """``kind 'text'``, for notices."""
        return f"{self.kind} {self.text!r}"


class Names:
    """The names of one drawn graph and what each names; built once per graph.

    Args:
        nodes: ``(key, info)`` of every node drawn (``GraphView.nodes``'s keys and infos).
        tree: the graph's module tree.
        chains: gives the folded chains' names and node keys
            (:func:`~autograd_viz.draw.model.chains.chain_folds`); called once, the first
            time a name is none of the others.
    """

    def __init__(
        self,
        nodes: Iterable[tuple[str, NodeInfo]],
        tree: ModuleTree,
        chains: Callable[[], Mapping[str, Sequence[str]]] | None = None,
    ) -> None:
        self.tree = tree
        self._find_chains = chains
        self._chains: Mapping[str, Sequence[str]] | None = None
        self._chains_shown: dict[str, Sequence[str]] | None = None
        self._by_id: dict[int, str] = {}
        self._infos: dict[str, NodeInfo] = {}
        self._by_name: dict[str, list[str]] = {}
        self._by_leaf: dict[str, list[str]] = {}
        aliases: dict[str, list[str]] = {}
        for key, info in nodes:
            self._infos[key] = info
            self._by_id.setdefault(info.id, key)
            self._by_name.setdefault(info.name, []).append(key)
            leaf = info.leaf
            if leaf is not None:
                if leaf.name:
                    self._by_leaf.setdefault(leaf.name, []).append(key)
                for alias in leaf.aliases:
                    aliases.setdefault(alias, []).append(key)
        # A shared parameter's other names (``lm_head.weight``), where no leaf has them as its
        # own; not shown, so not in :meth:`shown`.
        self._aliases = {a: keys for a, keys in aliases.items() if a not in self._by_leaf}
        self._by_scope_name: dict[str, int] = {}
        self._by_path: dict[str, list[int]] = {}
        for scope in tree.scopes:
            self._by_scope_name.setdefault(scope.name, scope.index)
            self._by_path.setdefault(scope.path, []).append(scope.index)
        self._by_group = {g.name: g.index for g in tree.groups}
        # A view shows a name with its control characters escaped (``\x1b``): that is
        # what a user types back.
        for table in (
            self._by_name,
            self._by_leaf,
            self._aliases,
            self._by_scope_name,
            self._by_path,
        ):
            _add_printable(table)
        _add_printable(self._by_group)

    def resolve(self, text: str | int) -> Target:
        """What ``text`` names (see the module docstring for the forms it takes).

        Raises:
            GraphViewError: it names nothing in this graph, or a node name several nodes have.
        """
        given = str(text)
        name = given.strip()
        # A module may be called " " (nn.ModuleDict's keys are the user's): as given first.
        found = None
        if given != name and any(
            given in table
            for table in (
                self._by_scope_name,
                self._by_group,
                self._by_path,
                self._by_leaf,
                self._aliases,
                self._by_name,
            )
        ):
            found = self._exact(given)
        if found is None and not name:
            raise GraphViewError("an empty name names nothing; give a node id, a name or a path")
        if found is None:
            found = self._exact(name)
        if found is None:
            found = self._pattern(name)
        if found is None:
            raise GraphViewError(self._not_the_node(name) or self._unknown(name))
        return found

    def shown(self) -> list[str]:
        """Every name this graph's views show: nodes, parameters, module calls and folds."""
        out = [node_name(info) for info in self._infos.values()]
        out.extend(self._by_leaf)
        out.extend(s.name for s in self.tree.scopes)
        out.extend(g.name for g in self.tree.groups)
        out.extend(self.chains)
        return out

    @property
    def chains(self) -> Mapping[str, Sequence[str]]:
        """The folded chains' names and node keys (empty without ``chains``)."""
        if self._chains is None:
            self._chains = self._find_chains() if self._find_chains is not None else {}
        return self._chains

    def _chains_as_shown(self) -> Mapping[str, Sequence[str]]:
        """:attr:`chains`, each name also as a view writes it (``\\x1b`` for ESC)."""
        if self._chains_shown is None:
            self._chains_shown = dict(self.chains)
            _add_printable(self._chains_shown)
        return self._chains_shown

    # -- the forms of a name ---------------------------------------------------------

    def _exact(self, name: str) -> Target | None:
        if name.startswith("#") and name[1:].isdecimal():
            return self._node(name, int(name[1:]))
        match = _NAME_AND_ID.match(name)
        if match is not None:
            node_id = int(match.group(2))
            key = self._by_id.get(node_id)
            if key is not None and match.group(1) in _shown_as(self._infos[key]):
                return Target(name, "node", (key,))
        if name in self._by_scope_name:
            return self._modules(name, [self._by_scope_name[name]])
        if name in self._by_group:
            return self._modules(name, list(self.tree.groups[self._by_group[name]].scopes))
        if name in self._by_path:
            return self._modules(name, self._by_path[name])
        if name in self._by_leaf:
            return Target(name, "parameter", tuple(self._by_leaf[name]))
        if name in self._aliases:
            return Target(name, "parameter", tuple(self._aliases[name]))
        if name.isdecimal():  # after module paths: nn.Sequential names its modules "0", "1"
            return self._node(name, int(name))
        keys = self._by_name.get(name)
        if keys is None:
            chain = self._chains_as_shown().get(name)
            return None if chain is None else Target(name, "chain", tuple(chain))
        if len(keys) > 1:
            ids = ", ".join(node_name(self._infos[k]) for k in keys[:6])
            more = ", ..." if len(keys) > 6 else ""
            raise GraphViewError(
                f"{len(keys)} nodes are named {name!r}; name one with its id: {ids}{more}"
            )
        return Target(name, "node", (keys[0],))

    def _node(self, text: str, node_id: int) -> Target:
        key = self._by_id.get(node_id)
        if key is None:
            raise GraphViewError(f"no node with id {node_id} in this graph")
        return Target(text, "node", (key,))

    def _not_the_node(self, name: str) -> str | None:
        """Why ``Name #id``, which names nothing else, names no node; ``None`` if not that form."""
        match = _NAME_AND_ID.match(name)
        if match is None or "#" in match.group(1):  # a folded chain's name, mistyped
            return None
        node_id = int(match.group(2))
        key = self._by_id.get(node_id)
        if key is None:
            return f"no node with id {node_id} in this graph"
        return f"node {node_id} is {self._infos[key].name!r}, not {match.group(1)!r}"

    def _pattern(self, name: str) -> Target | None:
        """Braces, wildcards, or a container's path: the topmost module calls matched."""
        tree = self.tree
        steps = self._loop_steps(name)
        if steps is not None:
            scopes = steps
        elif _braces(name) is not None:
            scopes = []
            for one in expand_braces(name):
                if one in self._by_scope_name:
                    scopes.append(self._by_scope_name[one])
                else:
                    scopes.extend(self._by_path.get(one, ()))
        elif any(c in name for c in "*?["):
            scopes = [
                s.index
                for s in tree.scopes
                if fnmatch.fnmatchcase(s.name, name) or fnmatch.fnmatchcase(s.path, name)
            ]
        else:
            prefix = name + "."
            scopes = [s.index for s in tree.scopes if s.path.startswith(prefix)]
        chosen = set(scopes)
        # The topmost: a call inside another matched call is already in it.
        top = [i for i in scopes if not any(a in chosen for a in tree.ancestors(i)[1:])]
        return self._modules(name, list(dict.fromkeys(top))) if top else None

    def _loop_steps(self, name: str) -> list[int] | None:
        """The calls of some steps of a folded loop, named as a view names them at a step
        (``(emb:{0..7}, cell:{0..7})``: the steps done), each part's calls; ``None`` if a
        part names none."""
        match = _STEPS.match(name)
        if match is None:
            return None
        scopes: list[int] = []
        for part in _parts(match.group(1)):
            found = [self._by_scope_name.get(one) for one in expand_braces(part)]
            if not found or None in found:
                return None
            scopes.extend(i for i in found if i is not None)
        return scopes

    def _modules(self, text: str, scopes: list[int]) -> Target:
        tree = self.tree
        nodes = [k for i in scopes for k in tree.members(i)]
        group = None
        groups = {tree.group_of.get(i) for i in scopes}
        only = groups.pop() if len(groups) == 1 else None
        if only is not None and set(tree.groups[only].scopes) == set(scopes):
            group = only
        kind = "fold" if group is not None else "module"
        return Target(text, kind, tuple(nodes), tuple(scopes), group)

    def _unknown(self, name: str) -> str:
        known = {
            *self._by_scope_name,
            *self._by_group,
            *self._by_leaf,
            *self._aliases,
            *self._by_name,
            *self.chains,
        }
        close = difflib.get_close_matches(name, sorted(known), n=4, cutoff=0.6)
        if close:
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?"
        else:
            some = [s.name for s in self.tree.scopes[:8]] or sorted(self._by_name)[:12]
            more = ", ..." if len(known) > len(some) else ""
            hint = f" (it has {', '.join(some)}{more})"
        return (
            f"nothing named {name!r} in this graph: no node id, node name, parameter or "
            f"module path{hint}"
        )


def _add_printable(table: dict[str, Any]) -> None:
    """Each key of ``table`` also as a view writes it (:func:`printable`), where that differs."""
    shown = {printable(key): value for key, value in table.items()}
    for key, value in shown.items():
        table.setdefault(key, value)


def _shown_as(info: NodeInfo) -> set[str]:
    """The names a view writes before a node's id: ``dot``'s (its name) and the TUI's (its
    name without ``Backward0``, an ``AccumulateGrad`` with its leaf's name: see
    :func:`autograd_viz.tui.styled.short_name`), as written and as escaped for display."""
    name = info.name
    base, _, version = name.rpartition("Backward")
    forms = {name, base if base and (version.isdigit() or not version) else name}
    leaf = info.leaf.name if info.leaf is not None else None
    if name == "AccumulateGrad":
        forms.add("Acc")
        if leaf:
            forms.update((f"Acc({leaf})", f"AccumulateGrad({leaf})"))
    return forms | {printable(form) for form in forms}


def node_name(info: NodeInfo) -> str:
    """How every view names a node: ``Name #id``."""
    return f"{info.name} #{info.id}"


def expand_braces(text: str) -> list[str]:
    """The names ``{a..b}`` or ``{a,b,c}`` stand for (the first pair of braces).

    ``"h.{0..2}.attn"`` gives ``["h.0.attn", "h.1.attn", "h.2.attn"]``; ranges and
    names mix in a list: ``"h.{0..2,5}"`` gives ``["h.0", "h.1", "h.2", "h.5"]``. A
    quoted name is that name, escapes read (Note [Quoted names in a fold] in
    :mod:`~autograd_viz.draw.model.folds`): ``'d.{"a,b",c}'`` gives ``["d.a,b", "d.c"]``, and
    a lone ``'"a, b"'`` gives ``["a, b"]``.

    Raises:
        GraphViewError: a range longer than :data:`MAX_EXPANDED`.
    """
    lone = _QUOTED.fullmatch(text)
    if lone is not None:
        return [unquote(lone.group(1))]
    found = _braces(text)
    if found is None:
        return [text]
    head, items, tail = found
    out: list[str] = []
    for part, is_quoted in items:
        span = None if is_quoted else _RANGE.match(part)
        if span is None:
            out.append(f"{head}{part}{tail}")
            continue
        low, high = int(span.group(1)), int(span.group(2))
        if high - low + len(out) >= MAX_EXPANDED:
            raise GraphViewError(f"{text!r} stands for more than {MAX_EXPANDED:,} names")
        out.extend(f"{head}{i}{tail}" for i in range(low, high + 1))
    return out


def unquote(body: str) -> str:
    """The name a quoted name's body stands for: ``\\\\``, ``\\"`` and the escapes a view
    writes (``\\x1b``, ``\\n``, ``\\u202e``) read; any other backslash kept."""
    return _ESCAPE.sub(_unescape, body)


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    named = _NAMED_ESCAPES.get(code)
    return named if named is not None else chr(int(code[1:], 16))


def _braces(text: str) -> tuple[str, list[tuple[str, bool]], str] | None:
    """The start, the items (each with whether it was quoted, its escapes read) and the end
    of the first pair of braces in ``text``; ``None`` if it has none.

    An item is a quoted name (spaces around it skipped) or the text up to the next
    ``,`` or ``}`` as written. Text the items cannot be read from (a brace inside an
    unquoted item) is read as the first pair of braces with none inside.
    """
    start = text.find("{")
    found = _read_braces(text, start) if start >= 0 and '"' not in text[:start] else None
    if found is not None:
        return found
    match = _BRACES.match(text)
    if match is None:
        return None
    head, body, tail = match.groups()
    return head, [(part, False) for part in body.split(",")], tail


def _read_braces(text: str, start: int) -> tuple[str, list[tuple[str, bool]], str] | None:
    items: list[tuple[str, bool]] = []
    at, end = start + 1, len(text)
    while True:
        word = at
        while word < end and text[word] in " \t":
            word += 1
        quote = _QUOTED.match(text, word) if word < end and text[word] == '"' else None
        if quote is not None:
            items.append((unquote(quote.group(1)), True))
            at = quote.end()
            while at < end and text[at] in " \t":
                at += 1
        else:
            stop = at
            while stop < end and text[stop] not in ',{}"':
                stop += 1
            items.append((text[at:stop], False))
            at = stop
        if at >= end:
            return None
        if text[at] == "}":
            return text[:start], items, text[at + 1 :]
        if text[at] != ",":
            return None
        at += 1


def _parts(text: str) -> list[str]:
    """A pattern's parts (``emb:{0..7}, cell:{0..7}``), split at ``", "`` outside quotes and
    braces."""
    parts: list[str] = []
    depth = 0
    quoting = False
    begin = at = 0
    while at < len(text):
        char = text[at]
        if quoting:
            if char == "\\":
                at += 1
            elif char == '"':
                quoting = False
        elif char == '"':
            quoting = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(", ", at):
            parts.append(text[begin:at])
            begin = at + 2
            at += 1
        at += 1
    parts.append(text[begin:])
    return parts


def names_of(view_nodes: Mapping[str, NodeInfo], tree: ModuleTree) -> Names:
    """:class:`Names` of a graph given as ``{key: info}``."""
    return Names(view_nodes.items(), tree)


__all__ = [
    "MAX_EXPANDED",
    "Names",
    "Target",
    "expand_braces",
    "names_of",
    "node_name",
    "unquote",
]
