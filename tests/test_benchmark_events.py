"""``benchmarks.no_events``: the engine with and without its emit sites, in child processes."""

from __future__ import annotations

import ast

import pytest

from benchmarks import no_events


@pytest.mark.parametrize("strip", [True, False])
def test_child_times_the_chain_with_or_without_emit_sites(strip: bool) -> None:
    timings = no_events.chain_backward(30, collect=False, strip=strip)
    assert timings["backward"] > 0
    if strip:
        assert timings["stripped_sites"] >= 10
    else:
        assert timings["stripped_sites"] == 0


def test_stripping_turns_every_hub_active_guard_into_dead_code() -> None:
    source = (
        "def f(x):\n"
        "    if HUB.active:\n"
        "        emit(x)\n"
        "    active = HUB.active\n"
        "    if active and x:\n"
        "        emit(x)\n"
        "    if x or HUB.active:\n"
        "        return 1\n"
        "    return 2\n"
    )
    strip = no_events._StripEmits()
    tree = ast.fix_missing_locations(strip.visit(ast.parse(source)))
    text = ast.unparse(tree)
    assert strip.stripped == 2
    assert "emit" not in text and "HUB" not in text
    assert "if x or False:" in text  # kept: not dead
