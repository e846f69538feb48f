"""Every string field of a trace file, found in traces of every shape the recorders write.

:data:`autograd_viz.trace.schema.TEXT_PATHS` is the one list of a trace's
free-text fields; a field's *path* is the record it is in and the keys to it
(``node.inputs[][]``, ``event:error.data.message``; ``[]`` is any item of a
list, ``{}`` any key of a map and ``.*`` its value; ``event.thread`` is a
field every event has). :func:`string_fields` finds every string in
:func:`seed_records`, which cover every field the list names.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from tests.fuzz.fuzzer import seed_files

Record = dict[str, Any]
Path = tuple[Any, ...]

_COMMON = frozenset({"thread", "device", "node"})
"""Fields every event has: their path does not name the event's kind."""
_MAPS = frozenset({"modules"})
"""Fields that map strings to strings: their keys are text too."""


def string_fields(record: Record) -> Iterator[tuple[str, Path]]:
    """``(field path, where in the record)`` for every string in ``record``, keys of maps too."""
    kind = record.get("type")
    for key, value in record.items():
        if key == "type" or (kind == "event" and key == "kind"):
            continue
        if kind == "event":
            head = f"event.{key}" if key in _COMMON else f"event:{record.get('kind')}.{key}"
        else:
            head = f"{kind}.{key}"
        yield from _walk(value, head, (key,), key in _MAPS)


def _walk(value: Any, name: str, at: Path, is_map: bool = False) -> Iterator[tuple[str, Path]]:
    if isinstance(value, str):
        yield name, at
    elif isinstance(value, dict):
        for key, item in value.items():
            if is_map:
                yield f"{name}{{}}", (*at, _Key(key))
                yield from _walk(item, f"{name}.*", (*at, key))
            else:
                yield from _walk(item, f"{name}.{key}", (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{name}[]", (*at, i))


class _Key(str):
    """A path step that names a map's key itself, not its value."""

    __slots__ = ()


def replace_strings(record: Record, field: str | None, change: Callable[[str], str]) -> Record:
    """A copy of ``record`` with every string of ``field`` (every field: ``None``) changed."""
    out = copy.deepcopy(record)
    for name, at in list(string_fields(record)):
        if field is not None and name != field:
            continue
        *parents, last = at
        holder = out
        for step in parents:
            holder = holder[step]
        if isinstance(last, _Key):
            holder[change(last)] = holder.pop(str(last))
        else:
            holder[last] = change(holder[last])
    return out


def records(data: bytes) -> list[Record]:
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def encode(items: list[Record]) -> bytes:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items)
    return text.encode("utf-8", "surrogatepass")


def _torch_seed() -> list[Record] | None:
    """A PyTorch module's NaN, watched: aten ops, module paths, scopes, the modules map."""
    try:
        import torch
    except ImportError:
        return None
    import tempfile
    from pathlib import Path as FilePath

    from autograd_viz.nan.watch import watch_nan

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).log()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watch_nan() as watch:
            net = Net()
            with torch.no_grad():
                net.lin.weight.fill_(-1.0)  # log of a negative number: NaN
            net(torch.ones(1, 3)).sum().backward()
    with tempfile.TemporaryDirectory() as tmp:
        path = FilePath(tmp) / "torch.jsonl"
        watch.trace.save(path)
        return records(path.read_bytes())


def _with_rare_fields(items: list[Record]) -> list[Record]:
    """Fields only some runs write, added where a trace may hold them: a process header,
    a graph task's source and cut, an error's traceback, a derived mismatch of the PyTorch bridge,
    a DDP bucket's allreduce, a shared parameter's other names, the gradient watch's findings."""
    items = copy.deepcopy(items)
    items[0]["process"] = {
        "pid": 1,
        "host": "host",
        "rank": 0,
        "world_size": 1,
        "local_rank": 0,
        "backend": "gloo",
        "launcher": "torchrun",
        "clock": [0, 0],
    }
    for task in (r for r in items if r["type"] == "graph_task"):
        task["cut"] = f"graph task {task['id']}: ValueError: a recorder error"
    leaf = next(r for r in items if r["type"] == "node" and r.get("leaf"))
    leaf["leaf"]["aliases"] = ["head.weight", "decoder.weight"]  # a parameter modules share
    events = [r for r in items if r["type"] == "event"]
    for event in events:
        if event["kind"] == "graph_task_start":
            event["data"]["source"] = "engine"
        if event["kind"] == "error" and not event["data"].get("traceback"):
            event["data"]["traceback"] = ['  File "x.py", line 1, in f\n', "    y = f(x)\n"]
    last = events[-1]
    items.append(
        {
            **{k: last[k] for k in ("type", "thread", "device", "graph_task")},
            "kind": "derived_mismatch",
            "seq": last["seq"] + 1,
            "t_ns": last["t_ns"] + 1,
            "node": None,
            "data": {
                "check": "next node",
                "expected": [1, "MulBackward0"],
                "observed": [2, "AddBackward0"],
                "message": "the bridge expected MulBackward0",
                "derived": True,
            },
        }
    )
    for step, phase in enumerate(("launched", "finished"), 2):
        items.append(
            {
                **{k: last[k] for k in ("type", "thread", "device", "graph_task")},
                "kind": "comm",
                "seq": last["seq"] + step,
                "t_ns": last["t_ns"] + step,
                "node": None,
                "data": {
                    "op": "allreduce",
                    "phase": phase,
                    "bucket": 0,
                    "bytes": 8,
                    "params": ["0.weight", "0.bias"],
                },
            }
        )
    items.append(  # what the gradient watch found about the call (grads -o, record --why)
        {
            **{k: last[k] for k in ("type", "thread", "device", "graph_task")},
            "kind": "grads",
            "seq": last["seq"] + 4,
            "t_ns": last["t_ns"] + 4,
            "node": None,
            "data": {
                "findings": [
                    {
                        "parameter": leaf["leaf"]["name"] or "w",
                        "module": "head",
                        "shape": [2],
                        "reason": "exact zeros",
                        "why": "all zeros",
                    },
                    {
                        "parameter": "aux.weight",
                        "module": None,
                        "shape": [2, 2],
                        "reason": "cut",
                        "why": "cut by .detach()",
                        "where": {"file": "x.py", "line": 3, "function": "f", "code": "h.detach()"},
                    },
                ],
                "flow": [
                    {"module": "head", "grad_norm": 0.5, "param_norm": 2.0, "parameters": 1},
                    {
                        "module": "aux",
                        "grad_norm": 0.0,
                        "param_norm": 1.0,
                        "parameters": 1,
                        "flag": "vanishing",
                    },
                ],
                "call_kind": "backward",
                "parameters": 2,
            },
        }
    )
    return items


def _one_whole_scope(items: list[Record]) -> None:
    """One node's scope written whole, as versions 5 to 11 wrote every node's."""
    table: list[Any] = []
    for record in items:
        if record["type"] == "graph_task":
            table = record.get("scopes", [])
        elif record["type"] == "node" and "scope_ref" in record:
            at, chain = record.pop("scope_ref"), []
            while at is not None:
                at, path, call = table[at]
                chain.insert(0, [path, call])
            record["scope"] = chain
            return


def seed_records() -> dict[str, list[Record]]:
    """Traces of every shape: the fuzzer's seeds, one of PyTorch, and rare fields added."""
    seeds = {name: records(data) for name, data in seed_files().items()}
    torch_seed = _torch_seed()
    if torch_seed is not None:
        for record in torch_seed:
            if record.get("kind") == "anomaly" and "input_ops" in record["data"]:
                record["data"]["input_ops"] = ["norm" for _ in record["data"]["input_ops"]]
        seeds["torch"] = torch_seed
    seeds["rare"] = _with_rare_fields(seeds["error"])
    for items in seeds.values():
        _one_whole_scope(items)  # both forms of a scope, in every seed that has one
    return seeds
