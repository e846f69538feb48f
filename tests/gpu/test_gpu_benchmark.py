"""``python -m benchmarks.gpu``: a smoke test on the fake CuPy, and its exit without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu
from engine import devices


def test_the_gpu_benchmark_runs_on_the_fake_cupy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gpu.jsonl"
    saved = devices._cupy_module
    argv = ["--fake", "--batch", "8", "--width", "16", "--sizes", "30", "--repeat", "2"]
    assert gpu.main([*argv, "--gc", "on", "--out", str(out)]) == 0
    assert devices._cupy_module is saved, "the fake is uninstalled afterwards"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    cells = {(r["workload"], r["peer"]) for r in records}
    assert cells == {("W1-gpu", "ours"), ("W1-gpu", "cupy"), ("W3-gpu", "ours"), ("W3-gpu", "cupy")}
    for record in records:
        assert record["fake"] and record["gpu"] == "fake CuPy on the CPU"
        assert record["unsupported"] is None and all(v > 0 for v in record["median"].values())
        assert len(record["samples_s"]["forward"]) == 2
    printed = capsys.readouterr().out
    assert "W3 on the GPU: MLP 16-16-16-10" in printed and "W1 on the GPU" in printed


def test_without_a_gpu_it_says_so_and_exits_with_status_2(
    cupy_missing: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpu.main(["--out", str(tmp_path / "gpu.jsonl")]) == gpu.NO_GPU_STATUS
    printed = " ".join(capsys.readouterr().out.split())
    assert "No GPU to benchmark on: cuda devices need CuPy, which is not installed" in printed
    assert "pip install 'autograd-viz[cuda]'" in printed and "--fake runs this script" in printed
    assert not (tmp_path / "gpu.jsonl").exists()
