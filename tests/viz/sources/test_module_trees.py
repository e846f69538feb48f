"""Module trees of unusual shapes: a module that is its own child, calls nested hundreds deep.

A module registered as its own child (``m.add_module("me", m)``) made PyTorch's
``named_parameters(remove_duplicate=False)`` recurse forever; calls nested D
deep wrote every node's whole scope, a trace growing with D³ (Note [Scopes by
reference] in ``autograd_viz/trace/writing.py``).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

from autograd_viz.sources.pytorch.module_calls import (
    all_named_parameters,
    named_parameters_once,
    walk_modules,
)
from autograd_viz.trace import GraphTaskInfo, Trace, TraceFormatError
from autograd_viz.trace.recording import record


class Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).tanh()


def _one(trace: Trace) -> GraphTaskInfo:
    (info,) = trace.graph_tasks.values()
    return info


def _recorded(model: nn.Module, x: torch.Tensor) -> GraphTaskInfo:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "cannot follow a module call" fails the test
        with record() as trace:
            model(x).sum().backward()
    return _one(trace)


def test_a_module_that_is_its_own_child_keeps_every_name() -> None:
    model = Cell()
    model.add_module("me", model)
    info = _recorded(model, torch.ones(1, 2))
    assert info.modules == {"model": "Cell", "lin": "Linear"}
    scopes = {n.name: n.scope for n in info.nodes.values() if n.leaf is None}
    assert scopes["TanhBackward0"] == (("model", 0),)
    assert scopes["AddmmBackward0"] == (("model", 0), ("lin", 0))
    names = sorted(n.leaf.name or "" for n in info.nodes.values() if n.leaf is not None)
    assert names == ["lin.bias", "lin.weight"]


def test_a_cycle_through_two_modules_is_cut_where_it_closes() -> None:
    outer = nn.Sequential(Cell(), nn.Identity())
    outer[0].add_module("back", outer)  # outer → 0 → back → outer
    walked = [path for path, _module in walk_modules(outer, remove_duplicate=False)]
    assert walked == ["", "0", "0.lin", "1"]
    assert [name for name, _p in all_named_parameters(outer)] == ["0.lin.weight", "0.lin.bias"]
    info = _recorded(outer, torch.ones(1, 2))
    assert info.modules["model"] == "Sequential"
    assert {"0", "0.lin"} <= set(info.modules)  # nn.Identity makes no node


def _shared_model() -> nn.Module:
    shared = nn.Linear(3, 3)
    return nn.Sequential(
        nn.Sequential(shared, nn.ReLU()),
        nn.ModuleList([shared, nn.Linear(3, 2)]),
        nn.TransformerEncoderLayer(4, 2, 8),
    )


def test_the_walks_name_what_pytorch_names_in_its_order() -> None:
    model = _shared_model()
    for remove_duplicate in (True, False):
        ours = [(p, id(m)) for p, m in walk_modules(model, remove_duplicate)]
        theirs = [(p, id(m)) for p, m in model.named_modules(remove_duplicate=remove_duplicate)]
        assert ours == theirs
    assert [(n, id(p)) for n, p in all_named_parameters(model)] == [
        (n, id(p)) for n, p in model.named_parameters(remove_duplicate=False)
    ]
    assert [(n, id(p)) for n, p in named_parameters_once(model)] == [
        (n, id(p)) for n, p in model.named_parameters()
    ]


class Link(nn.Module):
    """One call of a chain: it calls the next link, which is its sibling, not its child, so
    calls nest as deep as the chain is long while every path stays short."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((2,), 1.01))
        self.next: list[Link] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.scale
        return self.next[0](x) if self.next else x


class Chain(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.links = nn.ModuleList(Link() for _ in range(depth))
        for link, after in zip(self.links, self.links[1:], strict=False):
            link.next.append(after)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.links[0](x).sum()


class Nested(nn.Module):
    """A module tree ``depth`` deep, each level the child of the one above."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((2,), 1.01))
        self.child = Nested(depth - 1) if depth > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.scale
        return self.child(x) if self.child is not None else x


@pytest.fixture
def deep_calls() -> Iterator[None]:
    """Room for Python frames of calls nested a few hundred deep."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _saved(model: nn.Module, tmp_path: Path, name: str) -> tuple[Path, GraphTaskInfo]:
    with record() as trace:
        model(torch.ones(2)).sum().backward()
    path = tmp_path / name
    trace.save(path)
    return path, _one(trace)


def test_a_trace_grows_linearly_with_how_deep_calls_nest(tmp_path: Path, deep_calls: None) -> None:
    sizes = {}
    for depth in (50, 200):
        path, info = _saved(Chain(depth), tmp_path, f"chain{depth}.jsonl")
        sizes[depth] = path.stat().st_size
        deepest = max(len(n.scope) for n in info.nodes.values())
        assert deepest == depth + 1  # the chain's own call, and each link's
        loaded = _one(Trace.load(path))
        assert {n.id: n.scope for n in loaded.nodes.values()} == {
            n.id: n.scope for n in info.nodes.values()
        }
    # Four times the calls: four times the bytes, give or take the fixed header
    # (every node's whole scope written out made it 5.5 times here).
    assert sizes[200] < 4.4 * sizes[50]


def test_a_module_tree_hundreds_deep_records_and_loads_its_scopes(
    tmp_path: Path, deep_calls: None
) -> None:
    depth = 300
    path, info = _saved(Nested(depth), tmp_path, "nested.jsonl")
    loaded = _one(Trace.load(path))
    (deepest,) = [n for n in loaded.nodes.values() if len(n.scope) == depth and not n.leaf]
    assert deepest.name == "MulBackward0"
    assert deepest.scope[-1] == (".".join(["child"] * (depth - 1)), 0)
    assert {n.id: n.scope for n in loaded.nodes.values()} == {
        n.id: n.scope for n in info.nodes.values()
    }
    # Each call's path is written in the scopes, in modules and in the names of its
    # parameter (its node, its accumulate event): a node's scope costs a number. (Every
    # node's whole scope made this trace 57 MB, 21 times these bytes.)
    paths = sum(len(p) for p in loaded.modules)
    assert path.stat().st_size < 6 * paths + 2_000 * len(loaded.nodes)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _small(tmp_path: Path) -> tuple[Path, GraphTaskInfo]:
    torch.manual_seed(0)
    return _saved(Chain(3), tmp_path, "small.jsonl")


def test_a_trace_of_version_11_with_whole_scopes_still_loads(tmp_path: Path) -> None:
    path, info = _small(tmp_path)
    records = _records(path)
    by_task: dict[int, list[Any]] = {}
    for record_ in records:
        if record_["type"] == "header":
            record_["version"] = 11
        elif record_["type"] == "graph_task":
            by_task[record_["id"]] = record_.pop("scopes")
        elif record_["type"] == "node" and "scope_ref" in record_:
            table = by_task[record_["graph_task"]]
            at, chain = record_.pop("scope_ref"), []
            while at is not None:
                parent, path_, call = table[at]
                chain.insert(0, [path_, call])
                at = parent
            record_["scope"] = chain
    old = _one(Trace.load(_write(tmp_path / "v11.jsonl", records)))
    assert {n.id: n.scope for n in old.nodes.values()} == {
        n.id: n.scope for n in info.nodes.values()
    }
    assert any(n.scope for n in old.nodes.values())


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda g, n: g["scopes"][0].__setitem__(0, 0), "does not come before it"),
        (lambda g, n: g["scopes"].__setitem__(0, [None, "nowhere", 0]), "do not list"),
        (lambda g, n: n.__setitem__("scope_ref", 99), "not an index"),
        (lambda g, n: n.__setitem__("scope", [[g["scopes"][0][1], 0]]), "not both"),
    ],
)
def test_a_broken_scope_table_is_refused_in_one_line(
    tmp_path: Path, change: Any, words: str
) -> None:
    path, _info = _small(tmp_path)
    records = _records(path)
    (task,) = [r for r in records if r["type"] == "graph_task"]
    node = next(r for r in records if r["type"] == "node" and "scope_ref" in r)
    change(task, node)
    with pytest.raises(TraceFormatError, match=words) as failed:
        Trace.load(_write(tmp_path / "broken.jsonl", records))
    assert "\n" not in str(failed.value)
