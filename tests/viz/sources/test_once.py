"""A watcher's warnings, said once per process and remembered within a bound."""

from __future__ import annotations

import warnings

import pytest

from autograd_viz.sources import once


def test_a_message_is_said_once_and_another_one_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(once, "said", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            once.warn_once("autograd-viz: first")
        once.warn_once("autograd-viz: second")
    assert [str(w.message) for w in caught] == ["autograd-viz: first", "autograd-viz: second"]
    assert all(w.category is RuntimeWarning for w in caught)


def test_what_is_remembered_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(once, "said", set())
    monkeypatch.setattr(once, "MAX_SAID", 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(35):
            once.warn_once(f"autograd-viz: error {i}")
    assert 0 < len(once.said) <= 10
