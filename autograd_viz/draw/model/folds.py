"""Folds: runs of alike sibling module calls drawn as one box, and their names.

Part of the view model (:mod:`autograd_viz.draw.model.tree`): which sibling calls
fold (Note [What folds]), and the one name a fold is shown and typed back by.
A run repeats one call (GPT-2's blocks: ``transformer.h.{0..11}`` ×12) or a
pattern of up to :data:`MAX_PERIOD` calls (an unrolled loop calling ``emb``
then ``cell``: ``(emb:{0..9}, cell:{0..9})`` ×10).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class Call(Protocol):
    """What folding reads of a module call (:class:`~autograd_viz.draw.model.tree.Scope` is
    one): folds are found before, and without, the tree that holds them."""

    @property
    def index(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def children(self) -> tuple[int, ...]: ...
    @property
    def signature(self) -> int: ...
    @property
    def shapes(self) -> bool: ...


MAX_PERIOD = 4
"""The most sibling calls one repetition of a fold holds (``emb, cell``: 2)."""


@dataclass(frozen=True, slots=True)
class FoldGroup:
    """A run of at least two sibling calls with the same inside, drawn as one box until opened."""

    index: int
    """Its position in :attr:`~autograd_viz.draw.model.tree.ModuleTree.groups`."""
    parent: int | None
    """The call the siblings are made in, or ``None`` at the top."""
    scopes: tuple[int, ...]
    """The folded calls, in forward order."""
    name: str
    """Its members' names in one (``"transformer.h.{0..11}"``, ``"cell:{0..11}"``,
    ``"(emb:{0..9}, cell:{0..9})"``)."""
    kind: str
    """The members' class name (``"Embedding, GRUCell"`` for a pattern of calls)."""
    period: int = 1
    """How many calls one repetition holds: 1, or the length of a pattern (``emb, cell``: 2)."""
    shapes: bool = True
    """Whether its calls were found alike by their ops and the shapes of the tensors they take;
    ``False`` where the trace did not record shapes: by their ops only (Note [Alike calls] in
    :mod:`~autograd_viz.draw.model.tree`)."""

    @property
    def count(self) -> int:
        """How many repetitions it folds (the ``×12``)."""
        return len(self.scopes) // self.period

    def repetitions(self) -> list[tuple[int, ...]]:
        """The calls of each repetition, in forward order."""
        p = self.period
        return [self.scopes[i : i + p] for i in range(0, len(self.scopes), p)]


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
#
# A repetition may hold several calls: an unrolled encoder-decoder calls
# ``emb`` then ``cell`` at each step, a weight-shared stack ``attn`` then
# ``mlp``. The siblings' signatures then repeat with a period (``A B A B``);
# the longest cover wins, the shorter period on a tie (``A A A A`` folds as
# four calls of one, not two pairs), and the same rule holds between
# repetitions: each leads to the next. Alike is not enough where the module
# changes halfway: an encoder's GRUCell and a decoder's have one signature, but
# ``enc, enc, enc, dec, dec`` is two loops. So at each place of the pattern the
# calls are either of one module throughout (``cell:0, cell:1``) or of
# modules called once each (``h.0, h.1``), as the first two repetitions say
# (``shared:0, middle, shared:1`` is a module used twice around another, no loop).


def fold_runs(scopes: Sequence[Call], roots: Sequence[int]) -> Iterable[FoldGroup]:
    """Each run of at least two repetitions of one to :data:`MAX_PERIOD` sibling signatures,
    top first."""
    count = 0
    calls = Counter(s.path for s in scopes)
    parents: list[tuple[int | None, Sequence[int]]] = [(None, roots)]
    parents.extend((s.index, s.children) for s in scopes if s.children)
    for parent, children in parents:
        signatures = [scopes[c].signature for c in children]
        paths = [scopes[c].path for c in children]
        once = [calls[p] == 1 for p in paths]
        for start, end, period in _runs(signatures, paths, once):
            yield group_of_calls(scopes, count, parent, children[start:end], period)
            count += 1


def group_of_calls(
    scopes: Sequence[Call], index: int, parent: int | None, run: Sequence[int], period: int
) -> FoldGroup:
    """The :class:`FoldGroup` of the calls ``run`` (``period`` calls a repetition), named."""
    run = tuple(run)
    names = [[scopes[i].name for i in run[j::period]] for j in range(period)]
    kinds = [scopes[run[j]].kind for j in range(period)]
    if period == 1:
        name, kind = fold_name(names[0]), kinds[0]
    else:
        name = "(" + ", ".join(fold_part(n) for n in names) + ")"
        kind = ", ".join(k for k in kinds if k)
    shapes = all(scopes[i].shapes for i in run)
    return FoldGroup(index, parent, run, name, kind, period, shapes)


def _runs(
    signatures: Sequence[int], paths: Sequence[str], once: Sequence[bool]
) -> Iterable[tuple[int, int, int]]:
    """``(start, end, period)`` of each maximal run of two or more repetitions, left to right
    (Note [What folds]); ``once`` says which calls are their module's only call."""
    i = 0
    while i < len(signatures):
        best_period, best_length = 0, 0
        for period in range(1, MAX_PERIOD + 1):
            pattern = signatures[i : i + period]
            if len(pattern) < period or _periodic(pattern):
                continue
            first = paths[i : i + period]
            same: list[bool] | None = None  # per place: one module throughout, or each once
            repeats = 1
            while signatures[i + repeats * period : i + (repeats + 1) * period] == pattern:
                at = i + repeats * period
                now = [first[j] == paths[at + j] for j in range(period)]
                if same is None:
                    same = now
                if now != same or not all(
                    now[j] or (once[i + j] and once[at + j]) for j in range(period)
                ):
                    break
                repeats += 1
            if repeats >= 2 and repeats * period > best_length:
                best_period, best_length = period, repeats * period
        if best_period:
            yield i, i + best_length, best_period
            i += best_length
        else:
            i += 1


def _periodic(pattern: Sequence[int]) -> bool:
    """Whether ``pattern`` repeats a shorter one (``A A``, ``A B A B``)."""
    n = len(pattern)
    return any(n % d == 0 and list(pattern) == list(pattern[:d]) * (n // d) for d in range(1, n))


class Flow:
    """The graph's edges as folding reads them: every edge by tail, and the edges that cross
    from one module call into another (only those can link two calls or leave one)."""

    __slots__ = ("crossing", "out", "scope_of")

    def __init__(self, edges: Iterable[tuple[str, str]], scope_of: Mapping[str, int]) -> None:
        self.scope_of = scope_of
        self.out: dict[str, list[str]] = {}
        """The heads of each node's edges, by tail key."""
        self.crossing: dict[int | None, list[tuple[str, str]]] = {}
        """``(tail, head)`` of each edge whose ends are in different innermost calls, by the
        tail's call (``None``: outside every module)."""
        out, crossing, where = self.out, self.crossing, scope_of.get
        last: str | None = None
        heads: list[str] = []
        scope: int | None = None
        # One pass over every edge of a big graph: a view lists a node's edges together,
        # so the tail's list and call are looked up once per node.
        for tail, head in edges:
            if tail != last:
                last, scope = tail, where(tail)
                heads = out.setdefault(tail, [])
            heads.append(head)
            if where(head) != scope:
                crossing.setdefault(scope, []).append((tail, head))

    def __bool__(self) -> bool:
        return bool(self.out)


def foldable(
    group: FoldGroup,
    descendants: Callable[[int], list[int]],
    flow: Flow,
    weights: Mapping[str, int],
) -> bool:
    """Whether each call of ``group`` leads to the next, none out and back in (Note [What folds]).

    Args:
        group: the candidate run.
        descendants: a call and every call inside it (:meth:`ModuleTree.descendants`).
        flow: the graph's edges.
        weights: :attr:`ModuleTree.weights` (2 marks a leaf's ``AccumulateGrad``).
    """
    # Which repetition each call inside the run is part of; only edges crossing between
    # calls can link two repetitions or leave the run.
    repetition: dict[int | None, int] = {}
    for r, calls in enumerate(group.repetitions()):
        for index in calls:
            repetition.update(dict.fromkeys(descendants(index), r))
    where = flow.scope_of.get
    linked = [False] * (group.count - 1)
    left: list[str] = []
    for scope, r in repetition.items():
        for _tail, head in flow.crossing.get(scope, ()):
            h = repetition.get(where(head))
            if h is None:
                left.append(head)
            # A leaf's AccumulateGrad aside: two calls using one parameter are not one
            # after the other.
            elif (h == r + 1 or h == r - 1) and weights[head] == 1:
                linked[min(h, r)] = True
    if not all(linked):
        return False
    region = None if group.parent is None else set(descendants(group.parent))
    stack = left
    seen: set[str] = set()
    while stack:
        key = stack.pop()
        if key in seen or (region is not None and where(key) not in region):
            continue
        seen.add(key)
        for head in flow.out.get(key, ()):
            if where(head) in repetition:
                return False
            stack.append(head)
    return True


def fold_name(names: Sequence[str]) -> str:
    """Several names in one: their common start and end around ``{a..b}`` or ``{a,b,c}``.

    ``["transformer.h.0", ..., "transformer.h.11"]`` gives ``"transformer.h.{0..11}"``,
    ``["cell:0", ..., "cell:11"]`` gives ``"cell:{0..11}"``;
    :func:`autograd_viz.draw.model.targets.expand_braces` reads it back. A name that holds
    what would be read as part of the braces (``{``, ``}``, ``,``, ``"``, ``(``, ``)``,
    ``..``: PyTorch allows all but the dots in a module's name) is written quoted
    (Note [Quoted names in a fold]): ``d.{"a,b","{x}",c}``.
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
    if not (plain(head) and plain(tail)):
        return "{" + ",".join(quoted(n) for n in names) + "}"
    numbers = [int(m) for m in middles if m.isdecimal() and m == str(int(m))]
    if len(numbers) == len(middles):
        body = ",".join(_spans(numbers))
    else:
        body = ",".join(m if plain(m) and m else quoted(m) for m in middles)
    return f"{head}{{{body}}}{tail}"


def fold_part(names: Sequence[str]) -> str:
    """One part of a pattern's name (``emb:{0..9}`` in ``(emb:{0..9}, cell:{0..9})``):
    :func:`fold_name`, a lone name quoted where it holds what a pattern's name is read by."""
    if len(names) == 1 and not plain(names[0]):
        return quoted(names[0])
    return fold_name(names)


# Note [Quoted names in a fold]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A fold's name is read back by its braces, commas, ``..`` ranges and, for a
# pattern, its parentheses; module names are the user's data and may hold any
# of them but the dots (``nn.ModuleDict({"a,b": ..., "{x}": ...})``). A name
# holding one is written in double quotes, with ``\`` and ``"`` escaped as
# ``\\`` and ``\"`` (``d.{"a,b","{x}",c}``); where the common start or end of
# the names holds one, every name is quoted whole (``{"{x}.0","{x}.1"}``). A
# quoted name is read back with the escapes a view writes (``\x1b``, ``\n``,
# ``\u202e``: :func:`autograd_viz.trace.text.printable`), so what a view shows
# is what a user types. Names without such characters read as before.

_NOT_PLAIN = frozenset('{},"()')


def plain(name: str) -> bool:
    """Whether ``name`` reads as itself inside a fold's name (Note [Quoted names in a fold])."""
    return not any(c in _NOT_PLAIN for c in name) and ".." not in name and name == name.strip()


def quoted(name: str) -> str:
    """``name`` in double quotes, ``\\`` and ``"`` escaped (Note [Quoted names in a fold])."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _spans(numbers: Sequence[int]) -> Iterable[str]:
    """``0..5``, ``7``, ``9..11``: each run of three or more consecutive numbers as a range
    (all of them when they are consecutive: ``0..11``, ``0..1``)."""
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        yield f"{numbers[0]}..{numbers[-1]}"
        return
    start = 0
    for end in range(1, len(numbers) + 1):
        if end < len(numbers) and numbers[end] == numbers[end - 1] + 1:
            continue
        if end - start >= 3:
            yield f"{numbers[start]}..{numbers[end - 1]}"
        else:
            yield from (str(n) for n in numbers[start:end])
        start = end


def _common_prefix(names: Sequence[str]) -> str:
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


__all__ = [
    "MAX_PERIOD",
    "Flow",
    "FoldGroup",
    "fold_name",
    "fold_part",
    "fold_runs",
    "foldable",
    "group_of_calls",
    "plain",
    "quoted",
]
