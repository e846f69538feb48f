"""``nan --every`` over several processes: each child checks the calls it leaves out, and says so.

A child counts and chooses its own calls, as under ``record``; a NaN that
reaches the parameters in a call it left out (Note [Checking calls not
recorded]) is in no event of its trace, so its report to the watching
command carries it, and the merged report weighs it by the wall clock
beside the findings of the calls recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograd_viz.launch import processes

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]

JOB = """
    import multiprocessing as mp
    import sys

    import torch


    def work(nan_at, forward):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        for step in range(4):
            out = model(torch.randn(4, 3))
            if step == nan_at:
                if forward:
                    out = torch.log(out - 10)  # born in the forward pass
                else:
                    out = torch.sqrt(out * 0)  # finite forward; 0 * inf = NaN born in backward
            out.sum().backward()
            model.zero_grad()


    if __name__ == "__main__":
        ctx = mp.get_context(sys.argv[1])
        # One child after the other: the first one's NaN comes first by the wall clock.
        for nan_at, forward in ((3, False), (int(sys.argv[2]), True)):
            child = ctx.Process(target=work, args=(nan_at, forward))
            child.start()
            child.join()
"""


def run_nan(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop(processes.ENV, None)
    return subprocess.run(
        [sys.executable, "-m", "autograd_viz", "nan", "--every", "2", str(script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


MISSED = (
    "NaN reached 2.bias (and 3 more) in backward call 3 (not recorded: --every 2); "
    "record that call to see where it was born: --steps 3"
)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_nan_a_child_found_in_a_call_it_left_out_reaches_the_report(
    tmp_path: Path, method: str
) -> None:
    done = run_nan(tmp_path, method, "-1")  # the second child stays clean
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("pid ") and "saw the first NaN or Inf of 2 processes" in lines[0]
    assert "saw one later" not in lines[0]
    assert MISSED in " ".join(done.stdout.split())
    assert "no NaN or Inf found" not in done.stdout


def test_the_first_by_the_wall_clock_is_reported_of_recorded_and_left_out_calls(
    tmp_path: Path,
) -> None:
    # The second child's NaN is born in the forward of call 0, which it records: later.
    done = run_nan(tmp_path, "fork", "0")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert "saw the first NaN or Inf of 2 processes" in lines[0]
    assert lines[0].endswith("1 other saw one later"), lines[0]
    assert MISSED in " ".join(done.stdout.split())
    assert "born in the forward pass" not in done.stdout
