"""In-place ops through views rebase the base's history (PyTorch's CopySlices)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine


def _select_add(lib: Any, x: Any, w: Any) -> Any:
    h = x * 2.0
    h[0] += 5.0
    h[1:].mul_(w[1:])
    return h


def _transpose_add(lib: Any, x: Any, w: Any) -> Any:
    h = (x * 1.0).reshape(2, 3)
    h.T.add_(w.reshape(3, 2))
    return h * h


def _slice_of_slice_div(lib: Any, x: Any, w: Any) -> Any:
    h = x * 3.0
    inner = h[1:][::2]
    inner.div_(w[:3] * w[:3] + 3.0)
    return h.sum() * h


CASES: dict[str, Callable[[Any, Any, Any], Any]] = {
    "select_then_slice": _select_add,
    "transpose": _transpose_add,
    "slice_of_slice": _slice_of_slice_div,
}


@pytest.mark.parametrize("name", list(CASES))
def test_inplace_through_views_matches_finite_differences(name: str) -> None:
    case = CASES[name]
    rng = np.random.default_rng(0)
    x = engine.tensor(rng.standard_normal(6), dtype=engine.float64, requires_grad=True)
    w = engine.tensor(rng.standard_normal(6), dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda a, b: case(engine, a, b), (x, w))


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(CASES))
def test_inplace_through_views_matches_pytorch(torch: Any, name: str) -> None:
    case = CASES[name]
    data = np.random.default_rng(1).standard_normal((2, 6))
    ours = [engine.tensor(d, requires_grad=True) for d in data]
    theirs = [torch.tensor(d, dtype=torch.float32, requires_grad=True) for d in data]
    out = case(engine, *ours)
    ref = case(torch, *theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_the_base_gets_copyslices_and_the_view_a_fresh_history() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2.0
    old = h.grad_fn
    v = h[1:]
    v.add_(1.0)
    assert h.grad_fn.name() == "CopySlices"
    assert h.grad_fn.next_functions[0][0] is old
    assert v.grad_fn is not None and v.grad_fn is not old
    assert h.tolist() == [2.0, 5.0, 7.0] and h._version == v._version == 1


@pytest.mark.oracle
def test_view_of_a_leaf_and_overlapping_views_are_refused_like_pytorch(torch: Any) -> None:
    for lib in (engine, torch):
        leaf = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError) as info:
            leaf[0].add_(1.0)
        assert str(info.value) == (
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )
        wide = (lib.tensor([1.0], requires_grad=True) * 1.0).expand(3)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            wide.mul_(2.0)


def test_inplace_on_a_view_without_autograd_just_writes() -> None:
    base = engine.tensor([1.0, 2.0, 3.0])
    base[1:].mul_(10.0)
    assert base.tolist() == [1.0, 20.0, 30.0] and base.grad_fn is None


def test_saved_value_changed_through_a_view_still_raises() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = h.exp()
    h[0].mul_(3.0)
    (h.sum() + y.sum()).backward()  # exp saved its output, not h: fine
    z = h * h
    h[1].add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


# -- version counters (Note [Lazy version counters]) ----------------------------------


def test_versions_are_shared_by_views_detached_and_saved_tensors_made_before_a_change(
    torch: Any,
) -> None:
    def run(lib: Any) -> tuple[list[int], str]:
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = x * 2.0  # a fresh op result, never viewed nor changed yet
        view, detached = h[1:], h.detach()
        y = h * h  # saves h
        before = [h._version, view._version, detached._version]
        detached.add_(1.0)
        after = [h._version, view._version, detached._version]
        view.mul_(2.0)
        with pytest.raises(RuntimeError) as info:
            y.sum().backward()
        return before + after + [h._version], str(info.value)

    ours, ours_error = run(engine)
    theirs, their_error = run(torch)
    assert ours == theirs == [0, 0, 0, 1, 1, 1, 2]
    # The saved input's grad_fn as it is now, PyTorch's CopySlices after the view's change.
    assert (
        "[engine.FloatTensor [3]], which is output 0 of CopySlices, is at version 2" in ours_error
    )
    assert "which is output 0 of torch::autograd::CopySlices, is at version 2" in their_error


def _detach_many(h: engine.Tensor, start: threading.Barrier, out: list[engine.Tensor]) -> None:
    start.wait()
    out.extend(h.detach() for _ in range(50))


def test_threads_sharing_a_fresh_tensor_share_one_version_counter() -> None:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(20):
            h = engine.tensor([1.0], requires_grad=True) * 2.0
            detached: list[list[engine.Tensor]] = [[] for _ in range(4)]
            start = threading.Barrier(4)
            threads = [threading.Thread(target=_detach_many, args=(h, start, d)) for d in detached]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            h.data[0] = 0.0
            h._bump_version()
            assert all(d._version == 1 for ds in detached for d in ds)
    finally:
        sys.setswitchinterval(before)


# -- views of a base that changed in place ------------------------------------------
def _view_then_base_mul(lib: Any, x: Any) -> tuple[Any, Any]:
    b = x * 1.0
    v = b.view(2, 3)
    b.mul_(2.0)
    return v, v.sin().sum() + b.sum()


def _slice_then_base_add(lib: Any, x: Any) -> tuple[Any, Any]:
    b = x * 1.0
    v = b[1:4]
    t = b.t() if b.ndim == 2 else b[::2]
    b.add_(x * x)
    return v, (v * v).sum() + t.sum()


def _view_written_then_sibling(lib: Any, x: Any) -> tuple[Any, Any]:
    b = x * 1.0
    first, second = b[:3], b[2:]
    first.mul_(3.0)
    return second, (second * second).sum()


REGENERATED = {
    "view_then_base_mul": _view_then_base_mul,
    "slice_then_base_add": _slice_then_base_add,
    "view_written_then_sibling": _view_written_then_sibling,
}


@pytest.mark.parametrize("name", list(REGENERATED))
def test_views_of_a_changed_base_follow_its_new_history(name: str) -> None:
    x = engine.tensor(np.linspace(-1.0, 1.5, 6), requires_grad=True)
    assert engine.gradcheck(lambda t: REGENERATED[name](engine, t)[1], (x,))
    view, _ = REGENERATED[name](engine, x)
    assert view.grad_fn.name() == "AsStridedBackward0"


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(REGENERATED))
def test_views_of_a_changed_base_match_pytorch(torch: Any, name: str) -> None:
    array = np.linspace(-1.0, 1.5, 6)
    ours, theirs = engine.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    (our_view, our_loss), (their_view, their_loss) = (
        REGENERATED[name](engine, ours),
        REGENERATED[name](torch, theirs),
    )
    assert our_view.grad_fn.name() == their_view.grad_fn.name()
    our_loss.backward()
    their_loss.backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy())


@pytest.mark.oracle
def test_a_saved_regenerated_view_is_named_as_strided_in_the_version_error(torch: Any) -> None:
    messages = []
    for lib in (engine, torch):
        x = lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
        b = x * 1.0
        v = b[1:3]
        b.mul_(2.0)
        y = v * v
        b.mul_(3.0)
        with pytest.raises(RuntimeError) as info:
            y.sum().backward()
        messages.append(str(info.value).split(" Hint:")[0].replace("torch.", "engine."))
    assert messages[0] == messages[1]
    assert "which is output 0 of AsStrided, is at version 2" in messages[0]
