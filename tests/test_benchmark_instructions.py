"""``benchmarks.instructions`` and the heap each timed run starts from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import harness, instructions


def test_each_timed_run_starts_with_the_heap_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [A heap each contender left]: the C heap is settled before the contender runs."""
    order: list[str] = []
    monkeypatch.setattr(harness, "settle_heap", lambda: order.append("settle"))

    def contender(_case: harness.Case) -> harness.Timings:
        order.append("run")
        return {"backward": 1.0}

    harness.run_once(contender, harness.Case("n=1", {}, 1), collect=True)
    assert order == ["settle", "run"]


def test_settling_the_heap_is_callable_on_any_c_library() -> None:
    harness.settle_heap()  # malloc_trim on glibc, nothing elsewhere: never raises


def test_a_count_runs_the_trees_engine_in_a_fresh_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The child runs in the tree (``-c`` puts the working directory first on the path)."""
    seen: dict[str, Any] = {}

    def run(command: list[str], **kwargs: Any) -> None:
        seen.update(kwargs, command=command)
        out = next(a for a in command if a.startswith("--callgrind-out-file="))
        Path(out.split("=", 1)[1]).write_text("events: Ir\nsummary: 12345\n")

    monkeypatch.setattr(instructions.subprocess, "run", run)
    assert instructions.count(tmp_path, "W1", 10, "full", collect=False) == 12345
    assert seen["cwd"] == tmp_path and seen["env"]["PYTHONPATH"] == str(tmp_path)
    assert seen["env"]["PYTHONHASHSEED"] == "0" and seen["command"][0] == "valgrind"
    code = seen["command"][-1]
    assert "gc.disable()" in code and "'full'" in code and "y.backward()" in code


def test_no_total_in_the_output_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def run(command: list[str], **_kwargs: Any) -> None:
        out = next(a for a in command if a.startswith("--callgrind-out-file="))
        Path(out.split("=", 1)[1]).write_text("events: Ir\n")

    monkeypatch.setattr(instructions.subprocess, "run", run)
    with pytest.raises(RuntimeError, match="no instruction total"):
        instructions.count(tmp_path, "W2", 4, "build", collect=True)


def test_figures_are_per_seed_differences_per_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Note [Instructions move with the hash seed]: each seed's phases, subtracted per seed."""
    totals = {"start": 1_000, "build": 5_000, "full": 9_000}
    calls: list[tuple[str, int]] = []

    def count(_tree: Path, _w: str, _n: int, phase: str, _collect: bool, seed: int = 0) -> int:
        calls.append((phase, seed))
        return totals[phase] + 100 * seed * (phase == "full")

    monkeypatch.setattr(instructions, "count", count)
    forward, backward = instructions.per_node(tmp_path, "W1", 10, False, [0, 3])
    assert sorted(calls) == sorted((p, s) for p in totals for s in (0, 3))
    assert forward == 4_000 / 20  # W1 has two nodes a step
    assert backward == [4_000 / 20, 4_300 / 20]
