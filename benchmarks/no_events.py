"""The engine with its emit sites compiled out: what "no listener" is compared with.

Every place the engine emits an event is guarded by ``HUB.active`` (see
Note [Free when nobody listens] in ``engine/events.py``). To measure what
those guards cost when nobody listens, this module imports the engine from
its own source with each ``HUB.active`` read replaced by the constant
``False`` and every ``if`` that can then never be taken removed: the same
engine, built without instrumentation. The process that does so can never
emit an event, so it runs in a child process of its own.

Usage (what EV's "emit sites compiled out" contender runs)::

    python -m benchmarks.no_events --n 10000 --gc off
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib.abc
import importlib.machinery
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from benchmarks.harness import CLOCKS, clock_name, now, use_clock

ROOT = Path(__file__).resolve().parent.parent


class _StripEmits(ast.NodeTransformer):
    """``HUB.active`` becomes ``False``; ``if`` statements it makes dead go."""

    def __init__(self) -> None:
        self.stripped = 0

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if (
            node.attr == "active"
            and isinstance(node.value, ast.Name)
            and node.value.id == "HUB"
            and isinstance(node.ctx, ast.Load)
        ):
            return ast.copy_location(ast.Constant(False), node)
        return node

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        if _never_true(node.test):
            self.stripped += 1
            return node.orelse or ast.copy_location(ast.Pass(), node)
        return node


def _never_true(test: ast.expr) -> bool:
    """``False``, the name ``active`` (always bound to ``HUB.active``), or an ``and`` of one."""
    if isinstance(test, ast.Constant):
        return test.value is False
    if isinstance(test, ast.Name):
        return test.id == "active"
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_never_true(value) for value in test.values)
    return False


class _Loader(importlib.machinery.SourceFileLoader):
    stripped: ClassVar[dict[str, int]] = {}

    def source_to_code(self, data: Any, path: Any, *, _optimize: int = -1) -> Any:  # type: ignore[override]
        tree = ast.parse(data, filename=str(path))
        strip = _StripEmits()
        tree = ast.fix_missing_locations(strip.visit(tree))
        _Loader.stripped[str(path)] = strip.stripped
        return compile(tree, path, "exec", dont_inherit=True)

    def get_code(self, fullname: str) -> Any:
        # Always from the source: a valid cached .pyc (written by a normal import) would be
        # loaded as it is, its emit sites in, and the count below would depend on the cache.
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname != "engine" and not fullname.startswith("engine."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path or [str(ROOT)])
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return spec
        spec.loader = _Loader(fullname, spec.origin)
        return spec


def install() -> None:
    """Import ``engine`` (not yet imported) with its emit sites compiled out."""
    if "engine" in sys.modules:
        raise RuntimeError("the engine is already imported; strip it in a fresh process")
    sys.dont_write_bytecode = True  # never cache the stripped modules as the real ones
    sys.meta_path.insert(0, _Finder())


def stripped_sites() -> int:
    """How many ``if`` statements were removed across the imported engine modules."""
    return sum(_Loader.stripped.values())


def chain_backward(n: int, collect: bool, strip: bool = True) -> dict[str, float]:
    """Run W1's chain backward in a child process; its timings.

    With ``strip`` the child imports the engine with its emit sites compiled
    out, without it the engine as it is: the two run the same protocol in
    the same kind of process, so their ratio is what the emit sites cost.
    """
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.no_events",
            "--n",
            str(n),
            "--gc",
            "on" if collect else "off",
            "--clock",
            clock_name(),
            *(() if strip else ("--keep-emits",)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="chain steps (2 nodes each)")
    parser.add_argument("--gc", choices=("on", "off"), default="off")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall")
    parser.add_argument(
        "--keep-emits", action="store_true", help="import the engine as it is (the reference)"
    )
    args = parser.parse_args(argv)
    if not args.keep_emits:
        install()
    import engine
    from benchmarks.peers.common import STEP

    engine.get_default_engine()  # the package loads on first use: load it all, stripped

    if not args.keep_emits and stripped_sites() < 10:
        raise SystemExit(f"only {stripped_sites()} emit sites were found; the engine changed")
    if args.gc == "off":
        gc.disable()
    use_clock(args.clock)
    # The first run only warms the process up (its allocator arenas, the interpreter's
    # specialized code). A fresh process's timings are bimodal here (some runs 1.7x
    # slower), so the best of the next three is reported, for both engines alike.
    times = []
    for _ in range(4):
        x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
        y = x
        for _ in range(args.n):
            y = y * STEP + 0.0
        start = now()
        y.backward()
        times.append(now() - start)
        del y
        assert x.grad is not None
        grad = float(x.grad.numpy()[0])
        if abs(grad - STEP**args.n) > 1e-9 * abs(STEP**args.n):
            raise SystemExit(f"wrong gradient {grad}")
    print(json.dumps({"backward": min(times[1:]), "stripped_sites": stripped_sites()}))


if __name__ == "__main__":
    main()
