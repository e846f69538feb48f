"""``benchmarks.run``'s clock: peers time with wall time, or with the process's CPU time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import harness, run


@pytest.fixture(autouse=True)
def wall_clock_after() -> Iterator[None]:
    yield
    harness.use_clock("wall")


def test_the_cpu_clock_does_not_count_time_spent_waiting() -> None:
    harness.use_clock("cpu")
    start = harness.now()
    time.sleep(0.2)
    assert harness.now() - start < 0.1
    harness.use_clock("wall")
    start = harness.now()
    time.sleep(0.05)
    assert harness.now() - start >= 0.05


def test_run_times_with_the_chosen_clock_and_says_which(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    argv = ["--workload", "W1", "--peer", "ours", "--gc", "off", "--repeat", "1"]
    run.main([*argv, "--sizes", "20", "--clock", "cpu", "--out", str(out)])
    assert harness.clock_name() == "cpu"
    (line,) = out.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["clock"] == "cpu"
    assert record["median"]["backward"] > 0


def test_an_unknown_clock_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run.parse_args(["--clock", "sundial"])
    assert "invalid choice: 'sundial'" in capsys.readouterr().err
