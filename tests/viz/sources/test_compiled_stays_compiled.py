"""Compiled code stays compiled under the NaN checks, during and after, however it was made.

Dynamo skips a frame entered while a ``TorchDispatchMode`` is on the stack
and marks it to be skipped from then on: a compiled model reached by the
checks' modes would run eagerly (a few ulps off on a GPU) for the rest of the
program. Each case runs in a child, where the order of imports is the
program's: a model or a function compiled before autograd_viz was loaded,
and Dynamo laid out as in PyTorch 2.11 (``OptimizeContext`` inherits its
``__call__``). A counting backend tells whether the compiled graph ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch._dynamo")

ROOT = Path(__file__).resolve().parents[3]

CHILD = r"""
import json, sys, warnings
import torch, torch._dynamo
from torch._dynamo import eval_frame

case = sys.argv[1]
if case == "inherited_call" and "__call__" in vars(eval_frame.OptimizeContext):
    del eval_frame.OptimizeContext.__call__  # PyTorch 2.11's layout

runs = []
def counting(gm, inputs):
    def run(*args):
        runs.append(1)
        return gm.forward(*args)
    return run

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
if case == "function_first":
    def f(x):
        return model(x).tanh()
    step = torch.compile(f, backend=counting)
else:
    step = torch.compile(model, backend=counting)

import autograd_viz  # loaded after the model was compiled

x = torch.randn(4, 6)
def one():
    for p in model.parameters():
        p.grad = None
    step(x).pow(2).sum().backward()
    return [p.grad.numpy().tobytes().hex() for p in model.parameters()]

plain = one(); before = len(runs)
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    with autograd_viz.watch_nan() as w:
        watched = one()
during = len(runs) - before
after = one()
print(json.dumps({
    "watched_equal": watched == plain, "after_equal": after == plain,
    "compiled_ran_during": during, "compiled_ran_after": len(runs) - before - during,
    "found": w.found, "said": sorted({str(m.message)[:60] for m in said}),
}))
"""


def _child(case: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, case],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["model_first", "function_first", "inherited_call"])
def test_compiled_code_runs_compiled_while_watched_and_after(case: str) -> None:
    got = _child(case)
    assert got["compiled_ran_during"] == 1, got  # not skipped for the checks' modes
    assert got["compiled_ran_after"] == 1, got  # and not skipped from then on
    assert got["watched_equal"] and got["after_equal"], got
    assert got["found"] is False
