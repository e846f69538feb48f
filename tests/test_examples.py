"""The scripts in examples/ run as a newcomer would run them, and do what they say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_mlp_classifier_learns() -> None:
    out = _run("mlp_classifier.py")
    losses = [float(m) for m in re.findall(r"loss (\d+\.\d+)", out)]
    accuracy = [float(m) for m in re.findall(r"accuracy (\d+\.\d+)", out)]
    assert len(losses) == 6 and losses[-1] < losses[0] / 10
    assert accuracy[-1] >= 0.95


def test_two_devices_runs_nodes_on_each_device_thread() -> None:
    out = _run("two_devices.py")
    assert re.search(r"autograd-sim:0\s+node_start ExpBackward0", out)
    assert re.search(r"autograd-sim:1\s+node_start PowBackward0", out)
    grad = [float(v) for v in re.search(r"x.grad = tensor\(\[(.*)\]\)", out).group(1).split(",")]  # type: ignore[union-attr]
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(grad, 2 * np.exp(2 * x) + 2 * x, rtol=1e-4)


def test_nan_log_zero_shows_the_nan_it_describes() -> None:
    out = _run("nan_log_zero.py")
    assert "loss = nan" in out
    assert re.search(r"w\.grad = \[\[nan\], \[nan\], \[nan\]\]", out)


def _numbers(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?(?:nan|inf|\d+\.\d+(?:e[-+]?\d+)?)", text)]


def test_nan_sqrt_zero_shows_the_nan_it_describes() -> None:
    out = _run("nan_sqrt_zero.py")
    assert "loss = 7.0" in out
    assert re.search(r"a\.grad = \[\[-0\.6\d*, -0\.8\d*\], \[0\.0, 1\.0\], \[nan, nan\]\]", out)


def test_nan_softmax_overflow_shows_the_nan_it_describes() -> None:
    out = _run("nan_softmax_overflow.py")
    assert "loss = nan" in out
    assert all(np.isnan(_numbers(out.split("w.grad =")[1])))


def test_nan_zero_norm_shows_the_nan_it_describes() -> None:
    out = _run("nan_zero_norm.py")
    assert "scores = [0.6000000238418579, 1.0, nan]" in out
    grad = _numbers(out.split("emb.grad =")[1])
    assert np.isnan(grad[6:]).all() and np.isfinite(grad[:6]).all()


def test_each_fixed_nan_example_has_a_finite_loss_and_gradients() -> None:
    for name in ("nan_log_zero", "nan_sqrt_zero", "nan_softmax_overflow", "nan_zero_norm"):
        out = _run(f"{name}_fixed.py")
        numbers = _numbers(out)
        assert len(numbers) >= 4, out
        assert np.isfinite(numbers).all(), f"{name}_fixed.py: {out}"
    zero_norm = _numbers(_run("nan_zero_norm_fixed.py").split("emb.grad =")[1])
    np.testing.assert_allclose(zero_norm[6:], [1.0, 0.0, 1.0])  # the padding row: not 1e12
    log_zero = _numbers(_run("nan_log_zero_fixed.py").split("w.grad =")[1])
    np.testing.assert_allclose(log_zero, [0.02933088, 0.05866176, 0.08799264], rtol=1e-5)
