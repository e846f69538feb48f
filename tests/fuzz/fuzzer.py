"""A fuzzer over trace files: mutate valid traces, load them, run every view on what loads.

A trace file is untrusted input. Loading a mutated file may only raise
:class:`~autograd_viz.trace.TraceFormatError`; a file that loads must go through
every view without an exception: replay at several steps, DOT, the timeline,
the NaN report, a save and load again, and (for a few) the TUI headless.

Run a longer campaign with ``python -m tests.fuzz.fuzzer [FILES] [SEED]``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import re
import signal
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import engine
from autograd_viz.trace import Trace, TraceFormatError
from autograd_viz.trace.recording import record
from tests.graphs import FailsInBackward, Reentrant
from tests.hostile.names import HOSTILE
from tests.hostile.program import hostile_program

# -- seeds: valid traces of the shapes the engine makes --------------------------------


def _seed_programs() -> dict[str, Callable[[], Any]]:
    def plain() -> None:
        a = engine.tensor([2.0, 3.0], requires_grad=True, name="a")
        b = engine.tensor([6.0, 4.0], requires_grad=True, name="b")
        (3 * a**3 - b**2).backward(engine.ones(2))

    def devices() -> None:
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        a = (x.to("sim:0") * 2.0).to("sim:1")
        b = (x.to("sim:1") * 3.0).to("sim:0")
        (a.to("cpu") * b.to("cpu")).sum().backward()

    def reentrant() -> None:
        x = engine.tensor([2.0], requires_grad=True, name="x")
        Reentrant.apply(x, 2).sum().backward()

    def error() -> None:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        with contextlib.suppress(ValueError):
            (FailsInBackward.apply(x * 2.0) * 3.0).sum().backward()

    def grad_and_hooks() -> None:
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        w = engine.tensor([3.0, 4.0], requires_grad=True, name="w")
        h = x * w
        h.register_hook(lambda g: g * 2.0)
        engine.grad((h * h).sum(), (x, h))

    def nan() -> None:
        x = engine.tensor([0.0, 1.0, 2.0], requires_grad=True, name="x")
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode says it is on
            with engine.detect_anomaly(check_inf=True, check_forward=True, mode="collect"):
                ((x * 0.0).log() * x).sum().backward()

    def hostile() -> None:
        for key in ("rich_close", "osc_title", "newlines"):
            hostile_program(HOSTILE[key])

    def modules() -> None:
        w = engine.tensor([0.5, -1.0], requires_grad=True, name="w")
        h = engine.tensor([1.0, 2.0])
        with engine.scope("rnn", kind="RNN"):
            for _ in range(3):
                with engine.scope(HOSTILE["dot_break"], kind=HOSTILE["rich_close"]):
                    h = (h * w).tanh()
        h.sum().backward()

    return {
        "hostile": hostile,
        "plain": plain,
        "devices": devices,
        "reentrant": reentrant,
        "error": error,
        "grad_and_hooks": grad_and_hooks,
        "nan": nan,
        "modules": modules,
    }


def seed_files() -> dict[str, bytes]:
    """Each seed program's trace, saved."""
    from engine.devices import set_sim_device_count, sim_device_count

    before = sim_device_count()
    set_sim_device_count(max(before, 2))
    files = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, program in _seed_programs().items():
                with record() as trace:
                    program()
                path = os.path.join(tmp, f"{name}.jsonl")
                trace.save(path)
                with open(path, "rb") as f:
                    files[name] = f.read()
    finally:
        engine.get_default_engine().shutdown()
        set_sim_device_count(before)
    return files


# -- mutations ---------------------------------------------------------------------------

_HUGE = [
    2**63,
    -(2**63),
    2**64,
    2**64 + 1,
    10**30,
    -1,
    0,
    1e308,
    -1e308,
    1.5,
    "nan",
    "inf",
]
_ODD = [None, True, False, "", "x", [], {}, [1, 2], {"a": 1}, 0.5, -7, "\x1b[31m", "[/bold]"]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*prefix, i))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    new = copy.deepcopy(new)  # never a shared object: a later edit could nest it in itself
    if not path:
        return new
    _get(value, path[:-1])[path[-1]] = new
    return value


def _short(value: Any) -> str:
    if isinstance(value, int) and abs(value) > 10**20:
        return f"<{value.bit_length()}-bit int>"
    return repr(value)[:20]


def _ids(records: list[Any]) -> list[int]:
    ids = set()
    for item in records:
        if isinstance(item, dict):
            for key in ("id", "graph_task", "root"):
                if isinstance(item.get(key), int):
                    ids.add(item[key])
            node = item.get("node")
            if isinstance(node, list) and node and isinstance(node[0], int):
                ids.add(node[0])
    return sorted(ids) or [1]


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """One random mutation of a trace file; returns the new bytes and what was done."""
    choice = rng.randrange(13)
    lines = data.split(b"\n")[:-1]
    if choice == 12:  # a number of thousands of digits, or a deep nesting
        numbers = list(re.finditer(rb"(?<=[:,\[])-?\d+(?=[,\]}])", data))
        if numbers:
            hit = rng.choice(numbers)
            new = b"9" * rng.choice([20, 400, 5000]) if rng.random() < 0.7 else b"[" * 3000
            return data[: hit.start()] + new + data[hit.end() :], "long number"
    if choice == 0:  # byte flips
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out), "byte flips"
    if choice == 1:  # truncation
        return data[: rng.randrange(len(data))], "truncated"
    if choice == 2:  # drop, duplicate or swap lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        how = rng.choice(["drop", "dup", "swap", "move"])
        if how == "drop":
            del lines[i]
        elif how == "dup":
            lines.insert(j, lines[i])
        elif how == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines.insert(j, lines.pop(i))
        return b"\n".join(lines) + b"\n", f"line {how}"
    try:
        records = [json.loads(line) for line in lines]
    except (ValueError, RecursionError):  # an earlier mutation broke the JSON: cut it
        return data[: rng.randrange(len(data))], "truncated"
    ids = _ids(records)
    how = ""
    try:
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(records))
            item = records[i]
            if choice in (3, 4, 5, 6):  # a value replaced: another type, a huge number, an id
                path = rng.choice(_paths(item))
                if choice == 3:
                    new: Any = rng.choice(_ODD)
                elif choice == 4:
                    new = rng.choice(_HUGE)
                elif choice == 5:
                    new = rng.choice([*ids, max(ids) + 1, -rng.choice(ids)])
                else:
                    old = json.loads(json.dumps(_get(item, path)))  # a copy: no cycles
                    new = [old, old] if not isinstance(old, list) else old * rng.randint(0, 3)
                records[i] = _set(item, path, new)
                how += f" {'/'.join(map(str, path))}={_short(new)}"
            elif choice == 7 and isinstance(item, dict) and item.get("type") == "node":
                # an edge back to itself or to another node: a cycle, or a wrong id
                target = rng.choice([item["id"], *ids])
                item["next_edges"] = [*item.get("next_edges", []), [target, rng.randint(0, 2)]]
                how += " edge to " + str(target)
            elif choice == 8 and isinstance(item, dict) and item.get("type") == "graph_task":
                # a graph task's record and its nodes gone, or its id changed
                gid = item["id"]
                roll = rng.random()
                if roll < 0.3:
                    field_ = rng.choice(["parent", "root"])
                    item[field_] = rng.choice([gid, *ids, max(ids) + 1])
                    how += f" graph task {gid} {field_}={item[field_]}"
                elif roll < 0.6:
                    records = [
                        r
                        for r in records
                        if not (
                            isinstance(r, dict)
                            and r.get("type") in ("graph_task", "node")
                            and (r.get("id") == gid or r.get("graph_task") == gid)
                        )
                    ]
                    how += f" graph task {gid} removed"
                else:
                    new_id = rng.choice(ids) + rng.randint(0, 2)
                    item["id"] = new_id
                    how += f" graph task {gid} renamed {new_id}"
            elif choice == 9 and isinstance(item, dict) and item.get("type") == "event":
                item["kind"] = rng.choice(sorted(engine.events.EVENT_KINDS))
                how += f" kind {item['kind']}"
            elif choice == 10 and isinstance(item, dict) and item.get("type") == "event":
                # an event of another graph task or node
                if rng.random() < 0.5:
                    item["graph_task"] = rng.choice([*ids, 0, 10**6])
                elif isinstance(item.get("node"), list):
                    item["node"][0] = rng.choice([*ids, 10**6])
                how += " event moved"
            elif choice == 11 and isinstance(item, dict):
                key = rng.choice(sorted(item))  # a field removed
                del item[key]
                how += f" -{key}"
            if isinstance(records, list) and not records:
                break
    except (TypeError, KeyError, IndexError, AttributeError, ValueError):
        # An earlier mutation left a record these operations cannot read: cut it instead.
        return data[: rng.randrange(len(data))], "truncated"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return text.encode("utf-8", "surrogatepass"), f"json{how}"


# -- running the views ---------------------------------------------------------------------


@dataclass
class Tally:
    """What a campaign found."""

    tried: int = 0
    loaded: int = 0
    rejected: int = 0
    crashes: list[str] = field(default_factory=list)
    """One line per crash: the mutation, the view, the exception."""
    kinds: Counter[str] = field(default_factory=Counter)


def views(trace: Trace, tui: bool = False) -> None:
    """Run every view on ``trace``; raise whatever a view raises."""
    from rich.console import Console

    from autograd_viz import to_dot
    from autograd_viz.draw.model.graph_view import GraphViewError
    from autograd_viz.nan.scan import find_nans
    from autograd_viz.nan.text import print_report
    from autograd_viz.timeline import to_chrome_trace

    n = len(trace)
    trace.stats()
    for step in sorted({0, 1, n // 3, n // 2, n - 1, n} & set(range(n + 1))):
        state = trace.state_at(step)
        state.nodes()
        with contextlib.suppress(GraphViewError):  # nothing to draw: documented
            to_dot(trace, step, values=True, saved=True).source
        for gid in list(trace.graph_tasks)[:3]:
            with contextlib.suppress(GraphViewError):
                to_dot(state, graph_task=gid, collapse=True).source
    json.dumps(to_chrome_trace(trace), allow_nan=False)
    report = find_nans(trace)
    print_report(report, Console(file=io.StringIO(), width=120))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "again.jsonl")
        trace.save(path)
        Trace.load(path)
    if tui:
        _tui(trace)


def _tui(trace: Trace) -> None:
    import asyncio

    from autograd_viz.tui import ReplayDriver, VizApp

    async def run() -> None:
        app = VizApp(ReplayDriver(trace), source="fuzz")
        async with app.run_test(size=(120, 40)) as pilot:
            for key in ("s", "s", "a", "e", "v", "v", "v", "t", "escape", "r", "n"):
                await pilot.press(key)

    asyncio.run(run())


class Hang(Exception):
    """A load or a view ran past :data:`TIME_LIMIT`."""


TIME_LIMIT = 20
"""Seconds a file's load and views may take before it counts as a hang."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"still running after {TIME_LIMIT} s")


def check(data: bytes, how: str, tally: Tally, tui: bool = False) -> None:
    """Load ``data`` as a trace file and run the views; count what happened."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT)
    try:
        _check(data, how, tally, tui)
    finally:
        signal.alarm(0)


def _check(data: bytes, how: str, tally: Tally, tui: bool) -> None:
    tally.tried += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fuzz.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        try:
            trace = Trace.load(path)
        except TraceFormatError:
            tally.rejected += 1
            return
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            tally.crashes.append(f"load [{how}]: {_describe(exc)}")
            tally.kinds[f"load {type(exc).__name__}"] += 1
            return
    tally.loaded += 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            views(trace, tui)
    except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
        tally.crashes.append(f"views [{how}]: {_describe(exc)}")
        tally.kinds[f"views {type(exc).__name__}"] += 1


def _describe(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    where = f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return f"{type(exc).__name__} at {where}: {str(exc)[:200]}"


def campaign(files: int, seed: int, tui_every: int = 0) -> Tally:
    """Mutate the seed traces ``files`` times with a fixed ``seed``."""
    rng = random.Random(seed)
    seeds = seed_files()
    names = sorted(seeds)
    tally = Tally()
    for i in range(files):
        data = seeds[names[i % len(names)]]
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            data, how = mutate(rng, data) if data.count(b"\n") > 1 else (data, "")
        tui = bool(tui_every) and i % tui_every == 0
        check(data, f"{names[i % len(names)]}: {how}", tally, tui)
    return tally


def main(argv: list[str]) -> int:
    files = int(argv[0]) if argv else 2000
    seed = int(argv[1]) if len(argv) > 1 else 0
    tally = campaign(files, seed, tui_every=int(argv[2]) if len(argv) > 2 else 100)
    print(
        f"tried {tally.tried}, loaded {tally.loaded}, rejected {tally.rejected}, "
        f"crashes {len(tally.crashes)}"
    )
    for kind, count in tally.kinds.most_common():
        print(f"  {count:5} {kind}")
    for line in sorted(set(tally.crashes))[:60]:
        print(" ", line)
    return 1 if tally.crashes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
