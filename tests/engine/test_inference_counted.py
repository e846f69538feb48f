"""Inference mode counted across threads (Note [Inference mode counted] in engine.grad_mode)."""

from __future__ import annotations

import threading

import pytest

import engine
from engine import grad_mode


def test_the_count_follows_entering_nesting_and_leaving() -> None:
    assert grad_mode.inference_threads == 0
    with engine.inference_mode():
        assert grad_mode.inference_threads == 1
        with engine.inference_mode():  # nested: still one thread
            assert grad_mode.inference_threads == 1
        with engine.inference_mode(False):  # a no-op, as in torch
            assert grad_mode.inference_threads == 1
        assert engine.is_inference_mode_enabled()
    assert grad_mode.inference_threads == 0
    assert not engine.is_inference_mode_enabled()


def test_an_error_inside_leaves_the_count_as_it_was() -> None:
    with pytest.raises(ValueError, match="inside"), engine.inference_mode():
        raise ValueError("inside")
    assert grad_mode.inference_threads == 0


def test_as_a_decorator() -> None:
    @engine.inference_mode()
    def made() -> tuple[int, engine.Tensor]:
        return grad_mode.inference_threads, engine.ones(2) * 2.0

    count, t = made()
    assert count == 1 and t.is_inference()
    assert grad_mode.inference_threads == 0


def test_tensors_are_marked_on_the_thread_in_inference_mode_only() -> None:
    """While one thread is in inference mode, another's tensors stay ordinary, and vice versa."""
    entered, release = threading.Event(), threading.Event()
    theirs: list[engine.Tensor] = []

    def inside() -> None:
        with engine.inference_mode():
            entered.set()
            release.wait(10)
            x = engine.ones(3)
            theirs.extend([x * 2.0, x + 1.0, engine.tensor([1.0, 2.0])])

    thread = threading.Thread(target=inside)
    thread.start()
    try:
        assert entered.wait(10)
        assert grad_mode.inference_threads == 1
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        ours = [x * 2.0, x + 1.0, engine.ones(2)]
        (x * 3.0).sum().backward()  # a backward while another thread is in inference mode
    finally:
        release.set()
        thread.join(10)
    assert all(not t.is_inference() for t in ours) and x.grad is not None
    assert not x.grad.is_inference() and x.grad.tolist() == [3.0, 3.0]
    assert len(theirs) == 3 and all(t.is_inference() for t in theirs)
    assert grad_mode.inference_threads == 0


def test_many_threads_entering_and_leaving_at_once_leave_zero() -> None:
    def churn() -> None:
        for _ in range(200):
            with engine.inference_mode():
                assert engine.ones(1).is_inference()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert grad_mode.inference_threads == 0


def test_a_backward_gradient_made_in_inference_mode_is_an_inference_tensor() -> None:
    """The backward's own products are marked as make_tensor marks them."""
    x = engine.tensor([1.0, 2.0], dtype=engine.float64, requires_grad=True)
    y = x * 3.0
    g = engine.ones(2, dtype=engine.float64)
    with engine.inference_mode():
        inside = y.grad_fn.apply([g])[0]
    outside = y.grad_fn.apply([g])[0]
    assert inside.is_inference() and not outside.is_inference()
