"""Modules in a graph snapshot: call ids turned into call numbers within one graph.

Every source finds, for each node, the module calls that were open when the
forward made it, outermost first, as ``(path, call id, class name)``: our
engine from :func:`engine.scope` blocks (``engine.scopes``), PyTorch from its
module hooks. A call id only orders calls in the process; a trace wants
"which call of this module it was in this graph", so :func:`number_calls`
ranks the call ids of each path among the nodes of one graph: an unrolled
cell's steps become calls 0..T-1, a module used at two places calls 0 and 1,
whatever ran before in the process.

An ``AccumulateGrad`` is made once per parameter and lives across steps: its
call id may come from an earlier forward than the graph's. Its scope names
the module that owns the parameter, and a call id not seen among the graph's
other nodes becomes call 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from autograd_viz.trace.records import Scope

RawScope = Sequence[tuple[str, int, str]]
"""The module calls open when a node was made, outermost first: ``(path, call id, class)``."""


def number_calls(
    raw: Iterable[tuple[RawScope, bool]],
) -> tuple[list[Scope], dict[str, str]]:
    """Each node's scope with call numbers, and the class name of every path.

    Args:
        raw: per node, in order: its raw scope and whether it is an ``AccumulateGrad``.
            Nodes made in the same module call usually share one raw scope object; the
            numbered scopes of such nodes are shared too.

    Returns:
        The numbered scope of each node, in the same order, and ``{path: class name}``
        for every path that appears (the class of its first call when calls disagree).
    """
    items = list(raw)
    distinct: dict[int, RawScope] = {}
    in_graph: dict[int, RawScope] = {}  # the scopes of nodes other than AccumulateGrad
    for scope, is_leaf in items:
        if scope:
            distinct[id(scope)] = scope
            if not is_leaf:
                in_graph[id(scope)] = scope
    kinds: dict[str, tuple[int, str]] = {}
    for path, call_id, kind in _calls_in(distinct.values()):
        known = kinds.get(path)
        if known is None or call_id < known[0]:
            kinds[path] = (call_id, kind)
    calls: dict[str, set[int]] = {}
    for path, call_id, _kind in _calls_in(in_graph.values()):
        calls.setdefault(path, set()).add(call_id)
    ranks = {path: {c: n for n, c in enumerate(sorted(ids))} for path, ids in calls.items()}
    numbered: dict[tuple[tuple[str, int, str], ...], Scope] = {(): ()}
    by_object: dict[int, Scope] = {}
    out: list[Scope] = []
    for scope, _is_leaf in items:
        done = by_object.get(id(scope))
        if done is None:
            done = by_object[id(scope)] = _numbered(tuple(scope), numbered, ranks)
        out.append(done)
    return out, {path: kind for path, (_call, kind) in kinds.items()}


# Note [Scopes share their outer calls]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Calls nest: the scope of a node made D calls deep is the scope one call
# shorter plus one call, and a model whose calls nest D deep has D such
# scopes. Read entry by entry, they cost D²/2 steps; so each scope is taken
# as its outer scope (found by value, which Python compares without a step of
# ours per entry) and its innermost call, and only scopes not met before are
# read: one step per distinct call, and each numbered scope is its outer
# one's tuple plus one entry.


def _calls_in(scopes: Iterable[RawScope]) -> Iterator[tuple[str, int, str]]:
    """Each distinct call of ``scopes`` once, as its innermost entry in the shortest scope that
    ends with it (Note [Scopes share their outer calls])."""
    seen: set[tuple[tuple[str, int, str], ...]] = {()}
    for scope in scopes:
        whole = tuple(scope)
        end = len(whole)
        while whole[:end] not in seen:
            seen.add(whole[:end])
            yield whole[end - 1]
            end -= 1


def _numbered(
    scope: tuple[tuple[str, int, str], ...],
    numbered: dict[tuple[tuple[str, int, str], ...], Scope],
    ranks: dict[str, dict[int, int]],
) -> Scope:
    """``scope`` with each call id as its rank among the graph's calls of its path (0 for an
    id none of them has), built on its outer scopes' (Note [Scopes share their outer calls])."""
    end = len(scope)
    while scope[:end] not in numbered:
        end -= 1
    done = numbered[scope[:end]]
    for at in range(end, len(scope)):
        path, call_id, _kind = scope[at]
        done = numbered[scope[: at + 1]] = (*done, (path, ranks.get(path, {}).get(call_id, 0)))
    return done
