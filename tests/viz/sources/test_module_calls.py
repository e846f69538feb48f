"""Modules in a recorded graph: call numbers within one graph, the class name of each path."""

from __future__ import annotations

import engine
from autograd_viz import record
from autograd_viz.sources.call_numbers import number_calls
from autograd_viz.trace import GraphTaskInfo, NodeInfo


def _scoped(info: GraphTaskInfo) -> dict[str, list[tuple[tuple[str, int], ...]]]:
    """Each node name's scopes, in the graph's discovery order."""
    out: dict[str, list[tuple[tuple[str, int], ...]]] = {}
    for node in info.nodes.values():
        out.setdefault(node.name, []).append(node.scope)
    return out


def _by_id(info: GraphTaskInfo) -> list[NodeInfo]:
    return sorted(info.nodes.values(), key=lambda n: n.id)


def test_an_unrolled_cell_gets_one_call_per_step() -> None:
    w = engine.randn(3, 3, requires_grad=True, name="w")
    h = engine.randn(3)
    with engine.scope("rnn", kind="RNN"):
        for _ in range(4):
            with engine.scope("cell", kind="Cell"):
                h = (w @ h).tanh()
    with record() as trace:
        h.sum().backward()
    (info,) = trace.graph_tasks.values()
    assert info.modules == {"rnn": "RNN", "rnn.cell": "Cell"}
    tanh = [n for n in _by_id(info) if n.name == "TanhBackward0"]
    assert [n.scope for n in tanh] == [(("rnn", 0), ("rnn.cell", t)) for t in range(4)]
    (sum_node,) = [n for n in info.nodes.values() if n.name == "SumBackward0"]
    assert sum_node.scope == ()
    (leaf,) = [n for n in info.nodes.values() if n.leaf is not None]
    assert leaf.scope == (("rnn", 0), ("rnn.cell", 0))  # made at the first step


def test_a_part_used_at_two_places_gets_calls_0_and_1() -> None:
    w = engine.tensor([2.0, 3.0], requires_grad=True, name="w")

    def shared(x: engine.Tensor) -> engine.Tensor:
        with engine.scope("shared", kind="Shared"):
            return x * w

    x = engine.tensor([1.0, 1.0], requires_grad=True, name="x")
    with engine.scope("model", kind="Model"):
        a = shared(x).exp()
        b = shared(a)
    with record() as trace:
        b.sum().backward()
    (info,) = trace.graph_tasks.values()
    muls = [n for n in _by_id(info) if n.name == "MulBackward0"]
    inside = [(("model", 0), ("model.shared", call)) for call in (0, 1)]
    assert [n.scope for n in muls] == inside
    assert info.modules == {"model": "Model", "model.shared": "Shared"}


def test_call_numbers_start_again_in_each_graph() -> None:
    w = engine.tensor([0.5], requires_grad=True, name="w")
    infos = []
    for _ in range(3):
        h = engine.tensor([1.0])
        for _ in range(2):
            with engine.scope("cell"):
                h = h * w
        with record() as trace:
            h.sum().backward()
        infos.extend(trace.graph_tasks.values())
    for info in infos:
        muls = [n for n in _by_id(info) if n.name == "MulBackward0"]
        assert [n.scope for n in muls] == [(("cell", 0),), (("cell", 1),)]
        (leaf,) = [n for n in info.nodes.values() if n.leaf is not None]
        # w's AccumulateGrad was made in the first graph's first call: call 0 in every graph.
        assert leaf.scope == (("cell", 0),)
        assert info.modules == {"cell": "scope"}


def test_number_calls_ranks_each_paths_ids_among_the_graphs_nodes() -> None:
    outer = ("m", 100, "M")
    first, second = (outer, ("m.c", 7, "C")), (outer, ("m.c", 42, "C"))
    stale_leaf = (("m", 3, "M"), ("m.c", 5, "Other"))
    scopes, modules = number_calls(
        [(second, False), (first, False), (first, False), (stale_leaf, True), ((), False)]
    )
    assert scopes == [
        (("m", 0), ("m.c", 1)),
        (("m", 0), ("m.c", 0)),
        (("m", 0), ("m.c", 0)),
        (("m", 0), ("m.c", 0)),
        (),
    ]
    assert scopes[1] is scopes[2]  # one shared tuple per raw scope
    assert modules == {"m": "M", "m.c": "Other"}  # the class of the earliest call


def test_a_graph_drawn_before_backward_has_its_scopes() -> None:
    from autograd_viz.draw.model.graph_view import from_graph
    from autograd_viz.sources.engine import unrun_graph

    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    with engine.scope("enc", kind="Enc"):
        y = (x * 2.0).exp()
    view = from_graph(unrun_graph([y.sum()]))
    assert view.modules == {"enc": "Enc"}
    scoped = sorted(n.info.name for n in view.nodes.values() if n.info.scope == (("enc", 0),))
    assert scoped == ["AccumulateGrad", "ExpBackward0", "MulBackward0"]


def test_a_live_session_keeps_the_scopes_as_a_recording_does() -> None:
    from autograd_viz.live import LiveSession

    def program() -> None:
        w = engine.tensor([0.5, 2.0], requires_grad=True, name="w")
        h = engine.tensor([1.0, 1.0])
        for _ in range(2):
            with engine.scope("cell", kind="Cell"):
                h = (h * w).tanh()
        h.sum().backward()

    with LiveSession(program) as session:
        session.run_to_end(timeout=10)
    with record() as trace:
        program()
    for recorded in (session.trace, trace):
        (info,) = recorded.graph_tasks.values()
        assert info.modules == {"cell": "Cell"}
        tanh = [n for n in _by_id(info) if n.name == "TanhBackward0"]
        assert [n.scope for n in tanh] == [(("cell", 0),), (("cell", 1),)]
