"""Folds: runs of alike sibling module calls drawn as one box, and their names.

Part of the view model (:mod:`autograd_viz.draw.modules`): which sibling calls
fold (Note [What folds]), and the one name a fold is shown and typed back by.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograd_viz.draw.modules import Scope


@dataclass(frozen=True, slots=True)
class FoldGroup:
    """A run of at least two sibling calls with the same inside, drawn as one box until opened."""

    index: int
    """Its position in :attr:`~autograd_viz.draw.modules.ModuleTree.groups`."""
    parent: int | None
    """The call the siblings are made in, or ``None`` at the top."""
    scopes: tuple[int, ...]
    """The folded calls, in forward order."""
    name: str
    """Its members' names in one (``"transformer.h.{0..11}"``, ``"cell:{0..11}"``)."""
    kind: str
    """The members' class name."""

    @property
    def count(self) -> int:
        """How many calls it folds (the ``×12``)."""
        return len(self.scopes)


# Note [What folds]
# ~~~~~~~~~~~~~~~~~
# A fold draws several sibling calls as one box, so it must read as one step of
# the backward pass: gradients come into it, go through it, and leave. Runs of
# consecutive siblings (in forward order) with one signature are the candidates:
# GPT-2's blocks, a ResNet stage's blocks, an unrolled cell's calls. Two sibling
# Linear layers with a ReLU of their parent between them (a Transformer layer's
# feed-forward) are alike too, but folding them would draw the ReLU's gradient
# leaving the box and coming back into it; two embeddings side by side (GPT-2's
# wte and wpe) are alike but are no repetition. So, given the graph's edges, a
# run folds only when each call sends its gradient straight into the next (or
# takes it from it) and no path from its nodes reaches its nodes again through
# the rest of its parent call.


def fold_runs(scopes: Sequence[Scope], roots: Sequence[int]) -> Iterable[FoldGroup]:
    """Each run of at least two consecutive siblings with one signature, top first."""
    count = 0
    parents: list[tuple[int | None, Sequence[int]]] = [(None, roots)]
    parents.extend((s.index, s.children) for s in scopes if s.children)
    for parent, children in parents:
        start = 0
        while start < len(children):
            end = start + 1
            signature = scopes[children[start]].signature
            while end < len(children) and scopes[children[end]].signature == signature:
                end += 1
            if end - start >= 2:
                run = tuple(children[start:end])
                yield FoldGroup(
                    count,
                    parent,
                    run,
                    fold_name([scopes[i].name for i in run]),
                    scopes[run[0]].kind,
                )
                count += 1
            start = end


def foldable(
    group: FoldGroup,
    members: Callable[[int], list[str]],
    out: Mapping[str, Sequence[str]],
    weights: Mapping[str, int],
) -> bool:
    """Whether each call of ``group`` leads to the next, none out and back in (Note [What folds]).

    Args:
        group: the candidate run.
        members: the node keys inside a call (:meth:`ModuleTree.members`).
        out: the heads of each node's edges, by tail key.
        weights: :attr:`ModuleTree.weights` (2 marks a leaf's ``AccumulateGrad``).
    """
    inside = [set(members(i)) for i in group.scopes]
    for one, after in itertools.pairwise(inside):
        if not _linked(one, after, out, weights) and not _linked(after, one, out, weights):
            return False
    held = set().union(*inside)
    region = None if group.parent is None else set(members(group.parent))
    stack = [h for t in held for h in out.get(t, ()) if h not in held]
    seen: set[str] = set()
    while stack:
        key = stack.pop()
        if key in seen or (region is not None and key not in region):
            continue
        seen.add(key)
        for head in out.get(key, ()):
            if head in held:
                return False
            stack.append(head)
    return True


def _linked(
    tails: set[str], heads: set[str], out: Mapping[str, Sequence[str]], weights: Mapping[str, int]
) -> bool:
    """Whether a gradient goes from ``tails`` into ``heads``, a leaf's AccumulateGrad aside
    (two calls using one parameter are not one after the other)."""
    return any(h in heads and weights[h] == 1 for t in tails for h in out.get(t, ()))


def fold_name(names: Sequence[str]) -> str:
    """Several names in one: their common start and end around ``{a..b}`` or ``{a,b,c}``.

    ``["transformer.h.0", ..., "transformer.h.11"]`` gives ``"transformer.h.{0..11}"``,
    ``["cell:0", ..., "cell:11"]`` gives ``"cell:{0..11}"``;
    :func:`autograd_viz.draw.names.expand_braces` reads it back.
    """
    if len(names) == 1:
        return names[0]
    head = _common_prefix(names)
    # Cut after a separator, so that "h.10" and "h.11" differ in "10"/"11", not "0"/"1".
    cut = max(head.rfind("."), head.rfind(":")) + 1
    head = head[:cut]
    rests = [n[cut:] for n in names]
    tail = _common_prefix([r[::-1] for r in rests])[::-1]
    cut_tail = tail.find(".")
    tail = tail[cut_tail:] if cut_tail >= 0 else ""
    middles = [r[: len(r) - len(tail)] for r in rests]
    numbers = [int(m) for m in middles if m.isdecimal() and m == str(int(m))]
    if len(numbers) == len(middles) and numbers == list(range(numbers[0], numbers[-1] + 1)):
        body = f"{numbers[0]}..{numbers[-1]}"
    else:
        body = ",".join(middles)
    return f"{head}{{{body}}}{tail}"


def _common_prefix(names: Sequence[str]) -> str:
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


__all__ = ["FoldGroup", "fold_name", "fold_runs", "foldable"]
