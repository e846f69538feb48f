"""Grad mode set through the thread's dict (Note [Grad mode as the thread's dict])."""

from __future__ import annotations

import threading

import engine
from engine import grad_mode


def test_a_store_into_the_dict_is_this_threads_grad_mode_and_no_other_threads() -> None:
    modes = grad_mode.thread_modes()
    seen: list[bool] = []
    try:
        modes["enabled"] = False
        assert not engine.is_grad_enabled()
        other = threading.Thread(target=lambda: seen.append(engine.is_grad_enabled()))
        other.start()
        other.join()
        assert seen == [True]  # a new thread starts with grad mode on, as in torch
    finally:
        modes["enabled"] = True
    assert engine.is_grad_enabled()
    with engine.no_grad():
        assert grad_mode.thread_modes()["enabled"] is False


def test_a_new_threads_dict_holds_its_defaults() -> None:
    got: list[dict[str, bool]] = []
    thread = threading.Thread(target=lambda: got.append(dict(grad_mode.thread_modes())))
    thread.start()
    thread.join()
    assert got == [{"enabled": True, "inference": False}]
