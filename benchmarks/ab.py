"""Our engine at two commits, side by side: did a change make it faster?

The working tree's engine ("new") runs against the engine of another
revision ("old", checked out into a temporary git worktree). Each
measurement runs in a fresh child process that imports the engine from one
tree; old and new alternate, and each child reports its best of several
runs, so that a machine whose speed drifts over minutes hurts both sides
alike. Workloads: W1's chain (forward and backward), W2's add tree and cat
(backward), W3's MLP step (forward and backward, ms per step: big arrays,
few nodes), W1's backward under a recorder, and FAN: the backward of one
large tensor (2**21 float64 elements) used eight times, whose gradients
meet in one input buffer.

Usage::

    python -m benchmarks.ab f9101d2                  # old = that revision, new = this tree
    python -m benchmarks.ab HEAD~3 --repeat 5 --workload W1,REC
    python -m benchmarks.ab HEAD --gc on             # with the cyclic collector running
    python -m benchmarks.ab HEAD --clock cpu         # CPU time: a busy machine disturbs it less
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("W1", "W2", "W3", "REC", "FAN")
BRIDGE = ("TGRU", "TMLP")
"""Workloads of the PyTorch bridge (``record()`` on PyTorch's backward; need torch), run only
when named: TGRU, a GRUCell unrolled 20 steps (326 small nodes), µs per node over plain for
``record()`` and ``record(values="none")``; TMLP, W3's MLP in PyTorch, × plain."""
FAN_USES = 8
STEP = 1.0001
MLP_WIDTHS = (1024, 1024, 1024, 10)
"""W3's layers, as benchmarks.workloads has them: input, two tanh layers, classes."""


def _chain(engine: Any, n: int) -> tuple[Any, Any]:
    x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    return x, y


def _check(x: Any, expected: float) -> None:
    grad = float(x.grad.numpy().sum())
    if abs(grad - expected) > 1e-9 * abs(expected):
        raise SystemExit(f"wrong gradient: {grad}, expected {expected}")


def _mlp_data(batch: int) -> tuple[Any, Any, list[Any], list[Any]]:
    """W3's batch, labels, weights and biases (float32), the same for every tree."""
    import numpy as np

    rng = np.random.default_rng(0)
    pairs = list(itertools.pairwise(MLP_WIDTHS))
    weights = [(rng.standard_normal((m, k)) / np.sqrt(m)).astype(np.float32) for m, k in pairs]
    biases = [np.full(k, 0.01, dtype=np.float32) for _, k in pairs]
    inputs = rng.standard_normal((batch, MLP_WIDTHS[0])).astype(np.float32)
    return inputs, rng.integers(0, MLP_WIDTHS[-1], batch), weights, biases


def _mlp_grad_norm(inputs: Any, targets: Any, weights: list[Any], biases: list[Any]) -> float:
    """‖∂loss/∂W₀‖ of W3's step written out in float64 NumPy: what the engine must match."""
    import numpy as np

    h = inputs.astype(np.float64)
    layers = [h]
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = h @ w.astype(np.float64) + b
        if i < len(weights) - 1:
            h = np.tanh(h)
        layers.append(h)
    p = np.exp(h - h.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(targets)), targets] -= 1.0
    g = p / len(targets)  # ∂loss/∂logits of the mean cross entropy
    for i in range(len(weights) - 1, 0, -1):
        g = (g @ weights[i].astype(np.float64).T) * (1.0 - layers[i] ** 2)
    return float(np.linalg.norm(layers[0].T @ g))


def _best(runs: int, once: Callable[[], dict[str, float]]) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(runs):
        for key, value in once().items():
            best[key] = min(best.get(key, value), value)
    return best


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
"""``wall``: elapsed time. ``cpu``: this process's CPU time, which other processes on a
busy machine disturb much less (a change's cost shows there; waiting for a core does not)."""


def measure(workload: str, n: int, runs: int, clock: str = "wall") -> dict[str, float]:
    """µs per node (W3: ms per step) of ``workload`` with the engine this process imported.

    Each figure is the best of ``runs``.
    """
    import numpy as np

    perf_counter = CLOCKS[clock]

    import engine

    def w1() -> dict[str, float]:
        start = perf_counter()
        x, y = _chain(engine, n)
        built = perf_counter()
        y.backward()
        done = perf_counter()
        _check(x, STEP**n)
        return {"W1 forward": (built - start) / (2 * n), "W1 backward": (done - built) / (2 * n)}

    def w2() -> dict[str, float]:
        out = {}
        for join in ("tree", "cat"):
            x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
            parts = [x * (1.0 + i / n) for i in range(n)]
            if join == "tree":
                while len(parts) > 1:
                    pairs = [
                        operator.add(a, b) for a, b in zip(parts[::2], parts[1::2], strict=False)
                    ]
                    parts = pairs + ([parts[-1]] if len(parts) % 2 else [])
                loss = parts[0]
            else:
                loss = engine.cat(parts).sum()
            del parts
            start = perf_counter()
            loss.backward()
            nodes = 2 * n - 1 if join == "tree" else n + 2  # as W2 counts them
            out[f"W2 {join} backward"] = (perf_counter() - start) / nodes
            _check(x, sum(1.0 + i / n for i in range(n)))
        return out

    def w3() -> dict[str, float]:
        inputs, targets, weights, biases = data
        ws = [engine.tensor(w, requires_grad=True) for w in weights]
        bs = [engine.tensor(b, requires_grad=True) for b in biases]
        x, labels = engine.tensor(inputs), engine.tensor(targets)
        start = perf_counter()
        h = x
        for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
            h = h @ w + b
            if i < len(ws) - 1:
                h = h.tanh()
        loss = functional.cross_entropy(h, labels)
        built = perf_counter()
        loss.backward()
        done = perf_counter()
        assert ws[0].grad is not None
        grad = ws[0].grad.numpy().astype(np.float64)
        norm = float(np.sqrt((grad * grad).sum()))
        if abs(norm - expected_norm) > 1e-3 * expected_norm:  # float32 against float64
            raise SystemExit(f"wrong gradient norm: {norm}, expected {expected_norm}")
        # Per step, not per node: a few nodes on large arrays.
        return {"W3 forward (ms/step)": built - start, "W3 backward (ms/step)": done - built}

    def rec() -> dict[str, float]:
        from autograd_viz import record

        x, y = _chain(engine, n)
        with record():
            start = perf_counter()
            y.backward()
            done = perf_counter()
        _check(x, STEP**n)
        return {"W1 backward, recorded": (done - start) / (2 * n)}

    def fan() -> dict[str, float]:
        # One large tensor used FAN_USES times: its gradients meet in one input buffer.
        values = np.arange(n, dtype=np.float64) / n
        x = engine.tensor(values, requires_grad=True)
        a = x.tanh()
        loss = a * 1.0
        for i in range(1, FAN_USES):
            loss = loss + a * float(i + 1)
        loss = loss.sum()
        start = perf_counter()
        loss.backward()
        done = perf_counter()
        nodes = 2 * FAN_USES + 2  # tanh, the products, the adds, sum
        expected = sum(range(1, FAN_USES + 1)) * float(np.sum(1 - np.tanh(values) ** 2))
        _check(x, expected)
        return {"large fan-in backward": (done - start) / nodes}

    if workload in BRIDGE:
        return {key: _scale(key, v) for key, v in _bridge(workload, n, runs, perf_counter).items()}
    if workload == "W3":
        from engine import functional

        data = _mlp_data(n)
        expected_norm = _mlp_grad_norm(*data)
    once = {"W1": w1, "W2": w2, "W3": w3, "REC": rec, "FAN": fan}[workload]
    once()  # warm the process up: allocator arenas, specialized bytecode
    return {key: _scale(key, value) for key, value in _best(runs, once).items()}


def _scale(key: str, value: float) -> float:
    """A figure as the table shows it: µs per node, ms per step, or a ratio as it is."""
    if key.endswith("(× plain)"):
        return value
    return value * (1e3 if key.endswith("(ms/step)") else 1e6)


def _bridge(workload: str, n: int, runs: int, clock: Callable[[], float]) -> dict[str, float]:
    """``record()`` on PyTorch's backward against plain, in this process's tree.

    Each backward is timed alone (its forward built untimed), the collector
    off, plain and each recorded way interleaved ``n`` times in each of
    ``runs`` rounds; a way's figure is its fastest backward. TGRU: µs per
    node over plain; TMLP: × plain.
    """
    import gc
    import warnings

    import torch

    import autograd_viz

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if workload == "TGRU":
        cell = torch.nn.GRUCell(32, 32)
        xs = torch.randn(20, 8, 32)

        def build() -> Any:
            cell.zero_grad(set_to_none=True)
            h = torch.zeros(8, 32)
            for x in xs:
                h = cell(x, h)
            return h.pow(2).sum()

    else:
        layers: list[Any] = []
        for a, b in itertools.pairwise(MLP_WIDTHS):
            layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
        model = torch.nn.Sequential(*layers[:-1])
        x, y = torch.randn(256, MLP_WIDTHS[0]), torch.randint(0, MLP_WIDTHS[-1], (256,))

        def build() -> Any:
            model.zero_grad(set_to_none=True)
            return torch.nn.functional.cross_entropy(model(x), y)

    def recorded(values: str) -> Callable[[Any], None]:
        def run(loss: Any) -> None:
            with autograd_viz.record(values=values):
                loss.backward()

        return run

    ways: dict[str, Callable[[Any], None]] = {
        "plain": lambda loss: loss.backward(),
        "record()": recorded("all"),
        'record(values="none")': recorded("none"),
    }
    nodes = 0
    stack, seen = [build().grad_fn], set()
    while stack:  # the graph's nodes, once each
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            nodes += 1
            stack += [f for f, _ in fn.next_functions]
    best = dict.fromkeys(ways, float("inf"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bridge's note on a forward it did not watch
        for _ in range(runs):
            for _ in range(n):
                for way, run in ways.items():
                    loss = build()
                    gc.collect()
                    gc.disable()
                    started = clock()
                    run(loss)
                    best[way] = min(best[way], clock() - started)
                    gc.enable()
    base = best.pop("plain")
    if workload == "TGRU":
        return {f"GRU {way}, µs/node over plain": (t - base) / nodes for way, t in best.items()}
    return {f"MLP {way} (× plain)": t / base for way, t in best.items()}


def _child(
    tree: Path, workload: str, n: int, runs: int, collect: bool, clock: str = "wall"
) -> dict[str, float]:
    # This file is loaded by path, so that everything else (engine, autograd_viz) comes from
    # ``tree``, which may predate it.
    code = (
        "import gc, importlib.util, json, sys; sys.path.insert(0, sys.argv[1]); "
        "spec = importlib.util.spec_from_file_location('_ab', sys.argv[2]); "
        "ab = importlib.util.module_from_spec(spec); spec.loader.exec_module(ab); "
        "gc.enable() if sys.argv[6] == 'on' else gc.disable(); "
        "print(json.dumps(ab.measure(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), "
        "*sys.argv[7:])))"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(tree),
            __file__,
            workload,
            str(n),
            str(runs),
            "on" if collect else "off",
            *(() if clock == "wall" else (clock,)),  # an old ab.py reads no clock: wall
        ],
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.splitlines()[-1]))


SIZES = {
    "W1": 10_000,
    "W2": 3_000,
    "W3": 256,
    "REC": 3_000,
    "FAN": 1 << 21,
    "TGRU": 5,
    "TMLP": 3,
}
"""Each workload's ``n``: W1's steps, W2's and REC's width or steps, W3's batch, FAN's elements,
TGRU's and TMLP's backward calls per way and round."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="the revision to compare with (a commit, tag or HEAD~N)")
    parser.add_argument(
        "--workload",
        default=",".join(WORKLOADS),
        help="W1, W2, W3, REC and/or FAN; TGRU and TMLP (the PyTorch bridge) when named",
    )
    parser.add_argument("--repeat", type=int, default=3, help="alternations of old and new")
    parser.add_argument("--runs", type=int, default=5, help="runs per child (its best counts)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every size")
    parser.add_argument(
        "--gc", choices=("on", "off"), default="off", help="the cyclic garbage collector"
    )
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="wall time, or the process's CPU time (steadier on a shared machine)",
    )
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    from benchmarks.run import parse_list

    workloads = parse_list(args.workload, WORKLOADS + BRIDGE, "workload")
    with tempfile.TemporaryDirectory(prefix="ab-") as tmp:
        old_tree = Path(tmp) / "old"
        checkout = subprocess.run(
            ["git", "worktree", "add", "--detach", "--force", str(old_tree), args.old],
            cwd=ROOT,
            check=False,
            capture_output=True,
            text=True,
        )
        if checkout.returncode:
            raise SystemExit(f"cannot check out {args.old!r}: {checkout.stderr.strip()}")
        try:
            samples: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.repeat):
                for workload in workloads:
                    n = max(2, int(SIZES[workload] * args.scale))
                    for side, tree in (("old", old_tree), ("new", ROOT)):
                        got = _child(tree, workload, n, args.runs, args.gc == "on", args.clock)
                        for key, value in got.items():
                            samples.setdefault((key, side), []).append(value)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=False
            )
    table = Table(
        title=f"µs per node (W3: ms per step; {args.clock}), median of {args.repeat}, gc {args.gc} "
        f"(old = {args.old}, new = this tree)"
    )
    for column in ("measure", "old", "new", "new/old"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for key in dict.fromkeys(k for k, _ in samples):
        old = statistics.median(samples[key, "old"])
        new = statistics.median(samples[key, "new"])
        table.add_row(key, f"{old:.2f}", f"{new:.2f}", f"{new / old:.2f}×")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
