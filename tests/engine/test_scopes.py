"""engine.scope: nodes remember the scopes they were made in, and nothing else changes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import engine
from engine import anomaly
from engine.scopes import current_scope, node_scope


def test_nodes_remember_the_scopes_open_when_they_were_made() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    before = x * 2.0
    with engine.scope("encoder", kind="Encoder") as outer:
        a = before.exp()
        with engine.scope("layer0", kind="Layer") as inner:
            b = a * a
        c = b.sum()
    after = c * 3.0
    assert (outer, inner) == ("encoder", "encoder.layer0")
    assert node_scope(before.grad_fn) == () and node_scope(after.grad_fn) == ()
    ((path, _, kind),) = node_scope(a.grad_fn)
    assert (path, kind) == ("encoder", "Encoder")
    assert [(p, k) for p, _, k in node_scope(b.grad_fn)] == [
        ("encoder", "Encoder"),
        ("encoder.layer0", "Layer"),
    ]
    assert node_scope(c.grad_fn) is node_scope(a.grad_fn)  # one shared tuple per call
    assert node_scope(b.grad_fn)[0] == node_scope(a.grad_fn)[0]
    assert current_scope() == ()


def test_each_entry_is_a_new_call_with_a_later_id() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    nodes = []
    for _ in range(3):
        with engine.scope("cell"):
            x = x * 2.0
            nodes.append(x.grad_fn)
    ids = [node_scope(n)[0][1] for n in nodes]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert {node_scope(n)[0][0] for n in nodes} == {"cell"}
    assert {node_scope(n)[0][2] for n in nodes} == {"scope"}


def test_nodes_of_every_kind_get_the_scope() -> None:
    class Double(engine.Function):
        @staticmethod
        def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
            return x * 2.0

        @staticmethod
        def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
            return grad * 2.0

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with engine.scope("part"):
        made = [x + 1.0, x * x, Double.apply(x), engine.cat([x, x])]
    for t in made:
        assert [p for p, _, _ in node_scope(t.grad_fn)] == ["part"], t.grad_fn
    assert [p for p, _, _ in node_scope(x.grad_fn or x._get_grad_accumulator())] == ["part"]


def test_scopes_are_per_thread() -> None:
    seen: dict[str, object] = {}
    started, release = threading.Event(), threading.Event()

    def other() -> None:
        y = engine.tensor([1.0], requires_grad=True) * 2.0
        seen["outside"] = node_scope(y.grad_fn)
        with engine.scope("theirs"):
            started.set()
            release.wait(5)
            seen["inside"] = node_scope((y * 3.0).grad_fn)

    thread = threading.Thread(target=other)
    thread.start()
    assert started.wait(5)
    mine = engine.tensor([1.0], requires_grad=True) * 2.0  # while the other thread is in a scope
    release.set()
    thread.join()
    assert node_scope(mine.grad_fn) == () and seen["outside"] == ()
    assert [p for p, _, _ in seen["inside"]] == ["theirs"]  # type: ignore[attr-defined]


def test_the_flag_is_restored_after_scopes_and_errors() -> None:
    state = anomaly.STATE
    assert not state.node_metadata and state.open_scopes == 0
    with pytest.raises(KeyError), engine.scope("a"), engine.scope("b"):
        assert state.open_scopes == 2 and state.node_metadata
        raise KeyError("inside")
    assert not state.node_metadata and state.open_scopes == 0 and current_scope() == ()
    x = engine.tensor([1.0], requires_grad=True)
    assert (x * 2.0).grad_fn._metadata is None  # type: ignore[union-attr]


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_anomaly_mode_and_scopes_together() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    with engine.scope("a"), engine.detect_anomaly():
        y = x * 2.0
    with engine.detect_anomaly():
        with engine.scope("b"):
            z = x * 3.0
        assert anomaly.STATE.node_metadata
        w = x * 4.0
    assert not anomaly.STATE.node_metadata
    for t, path in ((y, "a"), (z, "b")):
        meta = t.grad_fn.metadata  # type: ignore[union-attr]
        assert meta["traceback_"] and [p for p, _, _ in meta["scope_"]] == [path]
    assert "scope_" not in w.grad_fn.metadata  # type: ignore[union-attr]
    assert w.grad_fn.metadata["traceback_"]  # type: ignore[union-attr]


def test_results_are_the_same_with_and_without_scopes() -> None:
    def run(scoped: bool) -> tuple[np.ndarray, np.ndarray]:
        engine.manual_seed(0)
        w = engine.randn(4, 4, requires_grad=True)
        h = engine.randn(4)
        for step in range(5):
            if scoped:
                with engine.scope("cell", kind="Cell"):
                    h = (w @ h).tanh()
            else:
                h = (w @ h).tanh()
            assert h.grad_fn is not None
            if step == 0:
                first = h.grad_fn.sequence_nr
        h.sum().backward()
        assert w.grad is not None
        return w.grad.data.copy(), np.array([first, h.grad_fn.sequence_nr])

    plain, scoped = run(False), run(True)
    assert plain[0].tobytes() == scoped[0].tobytes()
    assert plain[1][1] - plain[1][0] == scoped[1][1] - scoped[1][0]  # no number taken


@pytest.mark.parametrize(
    ("name", "kind", "error", "message"),
    [
        ("", None, ValueError, "must not be empty"),
        (3, None, TypeError, "name must be a string, got int"),
        ("a", 3, TypeError, "kind must be a string, got int"),
    ],
)
def test_bad_names_are_refused(name: object, kind: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message), engine.scope(name, kind):  # type: ignore[arg-type]
        pass
    assert current_scope() == () and anomaly.STATE.open_scopes == 0
