"""``python -m benchmarks.ab``: our engine at two commits, side by side."""

from __future__ import annotations

import pytest

from benchmarks import ab


def test_measure_reports_every_workload_in_microseconds_per_node() -> None:
    results = {}
    for workload in ab.WORKLOADS:
        results.update(ab.measure(workload, 40, 2))
    assert set(results) == {
        "W1 forward",
        "W1 backward",
        "W2 tree backward",
        "W2 cat backward",
        "W3 forward (ms/step)",
        "W3 backward (ms/step)",
        "W1 backward, recorded",
        "large fan-in backward",
    }
    assert all(0 < value < 1e5 for value in results.values())


def test_ab_against_head_prints_both_sides_and_their_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["HEAD", "--workload", "W1", "--repeat", "1", "--runs", "1", "--scale", "0.01"]
    assert ab.main([*args, "--gc", "on"]) == 0
    out = capsys.readouterr().out
    title = " ".join(out.split("┏")[0].split())  # the title may wrap
    assert "gc on" in title and "old = HEAD" in title
    for row in ("W1 forward", "W1 backward"):
        line = next(line for line in out.splitlines() if row in line)
        old, new, ratio = line.split("│")[2:5]
        assert float(old) > 0 and float(new) > 0 and ratio.strip().endswith("×")


def test_an_unknown_revision_is_refused() -> None:
    with pytest.raises(SystemExit, match="cannot check out 'no-such-revision': .*no-such-revision"):
        ab.main(["no-such-revision", "--repeat", "1"])


def test_w3_checks_its_gradient_against_numpy_by_hand() -> None:
    inputs, targets, weights, biases = ab._mlp_data(8)
    expected = ab._mlp_grad_norm(inputs, targets, weights, biases)
    assert expected > 0
    # A wrong step (another batch's labels) gives another norm, which the check refuses.
    assert abs(ab._mlp_grad_norm(inputs, (targets + 1) % 10, weights, biases) - expected) > 1e-3
    assert "W3 forward (ms/step)" in ab.measure("W3", 8, 1)
