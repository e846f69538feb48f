"""The drawn DAG of a model with modules: it never refuses, boxes open and close, `/` finds names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.draw.model.tree import MAX_BOXES
from autograd_viz.trace import Trace
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.listing import module_rows, module_tree
from autograd_viz.tui.pictures import Picture
from tests.viz.tui.test_tui_dag import drawn_edges
from tests.viz.tui.tuiting import find_in_tree, node_list, prompt_bar, replay_app, run_app, status

LAYERS = 40


def blocks(layers: int = LAYERS) -> None:
    """A residual stack of ``layers`` blocks (linear, then tanh), each in its own scopes."""
    rng = np.random.default_rng(0)
    h = engine.tensor(rng.standard_normal((4, 8)))
    with engine.scope("model", "MLP"):
        for i in range(layers):
            with engine.scope(f"layers.{i}", "Block"):
                w = engine.tensor(
                    rng.standard_normal((8, 8)) * 0.3, requires_grad=True, name=f"layers.{i}.weight"
                )
                b = engine.tensor(np.zeros(8), requires_grad=True, name=f"layers.{i}.bias")
                with engine.scope("linear", "Linear"):
                    z = h @ w + b
                with engine.scope("act", "Tanh"):
                    h = z.tanh() + h
    (h * h).sum().backward()


@pytest.fixture(scope="module")
def trace() -> Trace:
    with autograd_viz.record() as recorded:
        blocks()
    return recorded


def dag_of(app: Any) -> DagView:
    return app.query_one(DagView)


def check_picture(picture: Picture, rows: list[str]) -> None:
    """Every label drawn once, every edge line leads from its own sender."""
    assert len(picture.items) <= MAX_BOXES
    drawn = drawn_edges(rows, picture.layout)
    assert len(drawn) == len(set(drawn)) == len(picture.layout.routes)
    assert {(r.sender, r.receiver) for r in picture.layout.routes} == set(drawn)


def test_a_graph_of_more_than_150_nodes_is_drawn_by_module(trace: Trace) -> None:
    task = next(iter(trace.graph_tasks.values()))
    assert len(task.nodes) > MAX_BOXES
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        picture = dag.picture
        assert picture is not None
        boxes = [item for item in picture.items.values() if item.is_box]
        assert boxes, "the modules are boxes"
        assert sum(len(item.members) for item in picture.items.values()) == len(task.nodes)
        rows = [row.plain for row in dag._drawn_rows[dag._head :]]
        check_picture(picture, rows)
        drawn = "\n".join(rows)
        assert "too many to draw" not in drawn
        assert any(item.name in drawn for item in boxes)

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_stepping_opens_the_box_of_the_current_node_and_no_other(
    trace: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        seen_boxes = set()
        most_folds = 0
        for _ in range(25):
            await pilot.press("n")
            event = app.driver.state().event
            assert event is not None and event.node_id is not None
            picture = dag.picture
            assert picture is not None
            item = picture.items[picture.item_of[event.node_id]]
            assert not item.is_box, "the node the step is about is drawn as itself"
            seen_boxes.add(frozenset(i.name for i in picture.items.values() if i.is_box))
            # Only the current node's modules are open: few nodes are drawn as themselves.
            assert sum(not i.is_box for i in picture.items.values()) <= 12
            # The fold holding it opens only the current layer: the others are one box per
            # status (done, not started), each status true of every layer in its box.
            folds = [i for i in picture.items.values() if i.is_box and i.group is not None]
            assert sum(f.count for f in folds) in (LAYERS - 1, LAYERS)
            pictures, step = dag._pictures, app.driver.state().step
            assert pictures is not None
            statuses = [pictures.status(picture, f, step)[0] for f in folds]
            assert len(set(statuses)) == len(folds), [f.name for f in folds]
            for f, word in zip(folds, statuses, strict=True):
                assert {pictures._call_status(i, step) for i in f.scopes} == {word}, f.name
            most_folds = max(most_folds, len(folds))
            assert sum(i.is_box for i in picture.items.values()) <= 4
            assert len(picture.items) <= MAX_BOXES
        assert len(seen_boxes) > 1  # the open box moved with the step, the others closed again
        assert most_folds >= 2  # layers done and layers not started: two boxes

    run_app(app, actions, size=size)


def test_enter_opens_a_box_and_closes_it_again(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        assert dag.has_focus
        picture = dag.picture
        assert picture is not None
        # Pick labels along the drawing until one is a box.
        for _ in range(len(picture.items)):
            await pilot.press("right")
            selected = node_list(app).selected
            assert selected is not None
            item = picture.items[picture.item_of[selected]]
            if item.is_box:
                break
        assert item.is_box and selected is not None
        before = len(picture.items)
        await pilot.press("enter")
        opened = dag.picture
        assert opened is not None and len(opened.items) > before
        inside = opened.items[opened.item_of[selected]]
        assert set(inside.members) < set(item.members) or not inside.is_box
        # Enter on what is inside closes the module around it again.
        while opened.items[opened.item_of[selected]].is_box:
            await pilot.press("enter")
            opened = dag.picture
            assert opened is not None
        count = len(opened.items)
        await pilot.press("enter")
        closed = dag.picture
        assert closed is not None and len(closed.items) < count

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("model.layers.7", "module"),
        ("layers.3.weight", "parameter"),
        ("model.layers.7.act", "module"),
    ],
)
def test_find_takes_a_module_or_a_parameter(trace: Trace, query: str, kind: str) -> None:
    task = next(iter(trace.graph_tasks.values()))
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        selected = await find_in_tree(pilot, query)
        assert selected is not None
        info = task.nodes[selected]
        if kind == "module":
            assert info.scope and any(path == query for path, _ in info.scope)
        else:
            assert info.leaf is not None and info.leaf.name == query
        assert f"{kind} {query}" in status(app)
        picture = dag_of(app).picture
        assert picture is not None
        assert not picture.items[picture.item_of[selected]].is_box  # opened to show it

    run_app(app, actions, size=(120, 40))


def test_a_20000_node_chain_is_drawn_folded() -> None:
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(20_000):
        y = y * 1.0001
    with autograd_viz.record() as chain:
        y.sum().backward()
    app = replay_app(chain)

    async def actions(pilot: Pilot[Any]) -> None:
        app.action_cycle_view()  # as v does, twice, and look before anything else runs
        app.action_cycle_view()
        assert "drawing 20,002 nodes by their modules" in dag_of(app)._drawn_rows[0].plain
        await dag_of(app).drawn()  # the first picture of a big task: in a thread
        picture = dag_of(app).picture
        assert picture is not None
        assert len(picture.items) <= MAX_BOXES
        assert any(item.count > 1000 for item in picture.items.values())  # the folded chain
        await pilot.press("e")
        assert dag_of(app).picture is not None

    run_app(app, actions, size=(80, 24))


def test_the_tree_view_is_the_module_tree(trace: Trace) -> None:
    task = next(iter(trace.graph_tasks.values()))
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        assert nodes.view == "tree"
        headings = [row.heading for row in nodes.rows if row.node_id is None]
        assert f"model.layers.{{0..{LAYERS - 1}}} × {LAYERS} · Block · 240 nodes" in headings
        # Every call open (as Enter opens them): each node once, under its innermost call.
        rows = module_rows(*module_tree(task))
        listed = [row.node_id for row in rows if row.node_id is not None]
        assert sorted(listed) == sorted(task.nodes)  # every node once
        headings = [row.heading for row in rows if row.node_id is None]
        assert "model.layers.7 · Block · 6 nodes" in headings
        assert "model.layers.7.act · Tanh · 2 nodes" in headings
        current = ""
        for row in rows:
            if row.scope is not None:
                current = row.heading.split(" · ")[0]
            elif row.node_id is not None and task.nodes[row.node_id].leaf is None:
                scope = task.nodes[row.node_id].scope
                assert not scope or scope[-1][0] == current
        for i, row in enumerate(nodes.rows):
            if row.node_id is None:
                assert nodes.row_text(i).plain.strip().endswith(f"{row.heading}")

    run_app(app, actions, size=(120, 40))


def test_live_stepping_draws_the_module_of_each_new_node() -> None:
    from autograd_viz.live import LiveSession
    from autograd_viz.tui import LiveDriver, VizApp
    from tests.viz.tui.tuiting import settle

    driver = LiveDriver(LiveSession(blocks))
    app = VizApp(driver, source="blocks")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("v", "v")
        for _ in range(8):
            await pilot.press("n")
            await settle(pilot)
            event = driver.trace.events[driver.position - 1]
            assert event.kind == "node_start" and event.node_id is not None
            picture = dag_of(app).picture
            assert picture is not None  # drawn while the program is paused, not refused
            assert not picture.items[picture.item_of[event.node_id]].is_box
            assert len(picture.items) <= MAX_BOXES
        await pilot.press("q")

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize("key", ["rich_action", "osc_title", "rtl", "newlines", "long"])
def test_hostile_module_names_are_text_in_the_drawn_dag(key: str) -> None:
    from autograd_viz.trace.text import printable
    from tests.hostile.names import ACTING, HOSTILE
    from tests.hostile.test_hostile_modules import scoped_trace

    name = HOSTILE[key]
    trace = scoped_trace(name)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        picture = dag.picture
        assert picture is not None
        for _ in range(len(picture.items)):  # every label, boxes closed and opened
            await pilot.press("right", "enter")
        drawn = "\n".join(row.plain for row in dag._drawn_rows)
        assert not [c for c in ACTING if c in drawn]
        assert printable(name)[:10] in drawn  # the name, as text
        lines = ["".join(seg.text for seg in dag.render_line(y)) for y in range(dag.size.height)]
        assert not [c for c in ACTING if c in "".join(lines)]

    run_app(app, actions, size=(120, 40))


def test_deep_in_a_fold_of_hundreds_of_calls_the_current_node_is_drawn() -> None:
    with autograd_viz.record() as long:
        blocks(400)  # 400 blocks of one kind: 2,400 nodes, the fold far past 150 labels
    task = next(iter(long.graph_tasks.values()))
    app = replay_app(long)
    middle = sorted(task.nodes)[len(task.nodes) // 2]
    start = next(e for e in long.events if e.kind == "node_start" and e.node_id == middle)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        app.driver.goto(start.index + 1)
        app.refresh_view(follow=True)
        await dag_of(app).drawn()  # 2,400 nodes: drawn in a thread
        picture = dag_of(app).picture
        assert picture is not None and len(picture.items) <= MAX_BOXES
        assert middle in picture.item_of
        assert not picture.items[picture.item_of[middle]].is_box

    run_app(app, actions, size=(120, 40))


@pytest.fixture(scope="module")
def big() -> Trace:
    from autograd_viz.tui.dag import LATER_NODES

    with autograd_viz.record() as recorded:
        blocks(LATER_NODES // 6 + 50)
    task = next(iter(recorded.graph_tasks.values()))
    assert len(task.nodes) > LATER_NODES
    return recorded


def test_a_graph_of_a_few_hundred_nodes_is_listed_and_drawn_at_once() -> None:
    from autograd_viz.tui import dag as dag_module
    from autograd_viz.tui import nodes as nodes_module

    with autograd_viz.record() as small:
        blocks(60)  # 60 blocks: ~370 nodes, more than resnet18's backward
    task = next(iter(small.graph_tasks.values()))
    assert 300 < len(task.nodes) <= min(dag_module.LATER_NODES, nodes_module.LATER_NODES)
    app = replay_app(small)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        dag = dag_of(app)
        for view in ("tree", "dag"):  # as v does, and look before anything else runs
            app.action_cycle_view()
            if view == "tree":
                assert node_list(app).listing is not None, "the rows made by the key itself"
        assert not dag.redrawing and dag.picture is not None, "no line saying it is drawn"
        assert "drawing" not in dag._drawn_rows[0].plain
        assert not [w for w in app.workers if w.group in ("listing", "picture")]

    run_app(app, actions, size=(120, 40))


def test_in_a_big_graph_the_first_picture_comes_after_the_key_is_answered(big: Trace) -> None:
    task = next(iter(big.graph_tasks.values()))
    app = replay_app(big)
    starts = [e for e in big.events if e.kind == "node_start" and e.graph_task == task.id]
    middle = starts[len(starts) // 2]

    async def actions(pilot: Pilot[Any]) -> None:
        dag = dag_of(app)
        app.driver.goto(middle.index + 1)
        app.refresh_view(follow=True)
        await pilot.pause()
        app.action_cycle_view()  # as v does, twice, and look before anything else runs
        app.action_cycle_view()
        assert dag.picture is None
        assert dag._drawn_rows[0].plain.startswith(f"drawing {len(task.nodes):,} nodes")
        assert not app.workers._workers, "the thread starts after the screen is painted"
        await dag.drawn()
        picture = dag.picture
        assert picture is not None and len(picture.items) <= MAX_BOXES
        assert middle.node_id is not None  # the step's node drawn, its modules opened
        assert not picture.items[picture.item_of[middle.node_id]].is_box
        assert "drawing" not in dag._drawn_rows[0].plain
        check_picture(picture, [row.plain for row in dag._drawn_rows[dag._head :]])

    run_app(app, actions, size=(120, 40))


def test_in_a_big_graph_a_new_picture_is_drawn_without_holding_the_key(big: Trace) -> None:
    task = next(iter(big.graph_tasks.values()))
    app = replay_app(big)
    # Nodes far apart, none among the next ones a replay reaches: never made ahead.
    starts = [e for e in big.events if e.kind == "node_start" and e.graph_task == task.id]
    far = starts[len(starts) // 3 :: len(starts) // 5][:3]

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        await dag.drawn()
        for start in far:
            await dag.maker.wait()
            before = dag.picture
            app.driver.goto(start.index + 1)
            app.refresh_view(follow=True)  # as a click on the event does; look at once
            assert "drawing the modules around this step" in dag._drawn_rows[0].plain
            assert dag.picture is before  # the last picture stays up meanwhile
            await dag.drawn()
            picture = dag.picture
            assert picture is not None and picture is not before
            assert start.node_id is not None
            assert not picture.items[picture.item_of[start.node_id]].is_box

    run_app(app, actions, size=(120, 40))


def test_in_a_big_graph_the_next_nodes_pictures_are_made_ahead(big: Trace) -> None:
    app = replay_app(big)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        await dag.drawn()
        pictures = dag._pictures
        assert pictures is not None
        made = set()
        for _ in range(24):
            await dag.maker.wait()  # what is made ahead is made while the user looks
            count = pictures.made
            app.action_move("step_node")  # as n does, and look before anything else runs
            assert "drawing" not in dag._drawn_rows[0].plain, "n found its picture made"
            assert pictures.made == count, "the key made no picture itself"
            event = app.driver.state().event
            picture = dag.picture
            assert event is not None and event.node_id is not None and picture is not None
            assert not picture.items[picture.item_of[event.node_id]].is_box
            made.add(id(picture))
        assert len(made) > 4, "the steps went into other modules: new pictures"

    run_app(app, actions, size=(120, 40))


def test_quitting_while_a_picture_is_made_leaves_no_thread_behind(big: Trace) -> None:
    import threading

    app = replay_app(big)
    before = set(threading.enumerate())

    async def actions(pilot: Pilot[Any]) -> None:
        import asyncio

        dag = dag_of(app)
        app.action_cycle_view()  # as v does, twice
        app.action_cycle_view()
        for _ in range(500):  # the job starts once the placeholder is painted
            if app.workers._workers:
                break
            await asyncio.sleep(0.01)
        assert dag.maker.busy and dag.redrawing
        await app.action_quit()  # as q does, while the thread makes the first picture

    run_app(app, actions, size=(80, 24))
    for thread in set(threading.enumerate()) - before:
        thread.join(30)
        assert not thread.is_alive(), f"{thread.name} still runs after the app closed"


def test_a_picture_that_cannot_be_made_is_said_in_the_view(
    big: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autograd_viz.tui import dag as dag_module

    def broken(trace: Trace, task: Any) -> None:
        raise ValueError("a module tree with \x1b[31m in it")

    monkeypatch.setattr(dag_module, "Pictures", broken)
    app = replay_app(big)

    async def actions(pilot: Pilot[Any]) -> None:
        dag = dag_of(app)
        await pilot.press("v", "v")
        await dag.drawn()  # returns: the view says what went wrong instead of drawing
        text = dag._drawn_rows[0].plain
        assert text.startswith("could not draw this graph: a module tree with")
        assert "\x1b" not in text  # the message shown as text
        assert not dag.maker.busy
        await pilot.press("s")  # the app goes on
        assert app.driver.position == 1

    run_app(app, actions, size=(80, 24))


@pytest.mark.parametrize(
    ("query", "kind"), [("model.layers.120", "module"), ("layers.60.weight", "parameter")]
)
def test_find_in_a_big_graph_reads_names_in_a_thread_and_draws_no_picture(
    big: Trace, query: str, kind: str
) -> None:
    task = next(iter(big.graph_tasks.values()))
    app = replay_app(big)

    async def actions(pilot: Pilot[Any]) -> None:
        dag = dag_of(app)
        await pilot.press("slash")  # the prompt opens; the names are read while one types
        prompt_bar(app).action_cancel()
        await dag.maker.wait()
        pictures = dag._pictures
        assert pictures is not None and pictures.task is task
        assert pictures.made == 0, "reading names draws no picture"
        assert not dag.display
        app.finder.find(query)  # as Enter in the prompt does
        assert f"{kind} {query}" in status(app)
        selected = node_list(app).selected
        assert selected is not None
        info = task.nodes[selected]
        if kind == "module":
            assert info.scope and any(path == query for path, _ in info.scope)
        else:
            assert info.leaf is not None and info.leaf.name == query
        assert pictures.made == 0
        await pilot.press("v", "v")  # the drawing then opens on what was found
        await dag.drawn()
        picture = dag.picture
        assert picture is not None and dag._pictures is pictures
        assert not picture.items[picture.item_of[selected]].is_box

    run_app(app, actions, size=(120, 40))


def test_find_in_a_big_graph_answers_at_once_and_selects_once_names_are_read(
    big: Trace,
) -> None:
    task = next(iter(big.graph_tasks.values()))
    app = replay_app(big)

    async def actions(pilot: Pilot[Any]) -> None:
        dag = dag_of(app)
        before = node_list(app).selected
        app.finder.find("model.layers.100.act")  # Enter before any name was read
        assert "finding model.layers.100.act" in status(app)
        assert node_list(app).selected == before
        assert dag._pictures is None and not app.workers._workers  # a thread, after the paint
        await dag.maker.wait()
        await pilot.pause()
        selected = node_list(app).selected
        assert selected is not None and selected != before
        assert ("model.layers.100.act", 0) in task.nodes[selected].scope
        assert "module model.layers.100.act: 2 nodes" in status(app)
        assert "finding" not in status(app)
        assert dag._pictures is not None and dag._pictures.made == 0

    run_app(app, actions, size=(80, 24))


def test_in_a_big_graph_find_reads_no_names_on_the_ui_thread(
    big: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from autograd_viz.draw.model import targets

    task = next(iter(big.graph_tasks.values()))
    app = replay_app(big)
    built_in: list[str] = []
    made = targets.Names.__init__

    def recorded(self: targets.Names, *args: Any, **kwargs: Any) -> None:
        built_in.append(threading.current_thread().name)
        made(self, *args, **kwargs)

    monkeypatch.setattr(targets.Names, "__init__", recorded)

    async def actions(pilot: Pilot[Any]) -> None:
        dag = dag_of(app)
        await pilot.press("v", "v")  # the drawing first: its pictures are made in a thread
        await dag.drawn()
        await pilot.press("slash")
        app.query_one("#prompt-input").value = "model.layers.110"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        selected = node_list(app).selected
        assert selected is not None
        assert ("model.layers.110", 0) in task.nodes[selected].scope
        assert built_in and threading.main_thread().name not in built_in

    run_app(app, actions, size=(120, 40))


def test_in_a_big_graph_a_new_pictures_box_times_are_sorted_in_its_thread(
    big: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from autograd_viz.tui.pictures import Pictures

    app = replay_app(big)
    sorted_in: list[str] = []
    box_times = Pictures._box_times

    def recorded(self: Pictures, *args: Any) -> Any:
        sorted_in.append(threading.current_thread().name)
        return box_times(self, *args)

    monkeypatch.setattr(Pictures, "_box_times", recorded)

    async def actions(pilot: Pilot[Any]) -> None:
        dag = dag_of(app)
        await pilot.press("s", "s", "v", "v")
        await dag.drawn()
        await pilot.press("n", "n", "n")
        await dag.drawn()
        await pilot.pause()
        picture = dag.picture
        assert picture is not None
        boxes = [i for i in picture.items.values() if i.is_box]
        assert boxes and all(i.index in picture.times for i in boxes)
        assert sorted_in and threading.main_thread().name not in sorted_in

    run_app(app, actions, size=(120, 40))


def test_enter_on_a_folded_chain_says_how_to_see_it_whole() -> None:
    x = engine.tensor(np.linspace(-1.0, 1.0, 4), requires_grad=True)
    with autograd_viz.record() as chain:
        y = x
        for _ in range(MAX_BOXES):  # no modules: past MAX_BOXES nodes the chain is folded
            y = (y * 0.5).tanh()
        y.sum().backward()
    app = replay_app(chain)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        picture = dag.picture
        assert picture is not None
        folds = [i for i in picture.items.values() if i.is_box]
        assert folds and all(not i.scopes and i.group is None for i in folds)
        for _ in range(len(picture.items)):
            await pilot.press("right")
            selected = node_list(app).selected
            assert selected is not None
            if picture.items[picture.item_of[selected]].is_box:
                break
        assert selected is not None
        item = picture.items[picture.item_of[selected]]
        assert item.is_box
        await pilot.press("enter")
        await pilot.pause()
        assert dag.picture is picture  # nothing to open; the drawing stays
        notices = [str(n.message) for n in app._notifications]
        assert any(item.name in n and "--expand" in n for n in notices), notices

    run_app(app, actions, size=(120, 40))


def _cell_by_cell(canvas: Any, count: int) -> list[Any]:
    """The canvas's rows read one column at a time: a label where one starts, else a cell."""
    from rich.text import Text

    canvas._seal()  # the rectangles' edges, written as labels once the lines are drawn
    rows = []
    for r in range(count):
        out, c = Text(), 0
        while c < canvas.columns:
            label = canvas.text.get((r, c))
            if label is not None:
                out.append_text(label)
                c += label.cell_len
                continue
            glyph, style = canvas.cells.get((r, c), (" ", ""))
            out.append(glyph, style=style)
            c += 1
        rows.append(out)
    return rows


def test_a_tall_picture_is_drawn_as_its_cells_read_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.console import Console

    from autograd_viz.tui import canvas
    from autograd_viz.tui.pictures import Pictures

    with autograd_viz.record() as recorded:
        blocks(50)
    task = next(iter(recorded.graph_tasks.values()))
    pictures = Pictures(recorded, task)
    tree = pictures.tree
    middle = [e for e in recorded.events if e.kind == "node_end"][len(task.nodes) // 2]
    state = recorded.state_at(middle.index + 1)  # lines delivered bold, labels by status
    everything = pictures.choice(
        set(tree.scope_of.values()), (), set(tree.group_of.values()), None, state.step
    )
    picture = pictures.picture(everything)
    assert picture.layout.size[1] > 100  # far taller than a screen
    selected = middle.node_id
    assert selected is not None
    fast = canvas.draw_picture(pictures, picture, state, selected, (selected,))
    monkeypatch.setattr(canvas._Canvas, "rows", _cell_by_cell)
    slow = canvas.draw_picture(pictures, picture, state, selected, (selected,))
    console = Console(width=1000)

    def cells(row: Any) -> list[tuple[str, Any]]:
        return [(ch, s.style) for s in row.render(console, end="") for ch in s.text]

    assert [row.plain for row in fast] == [row.plain for row in slow]
    assert [cells(row) for row in fast] == [cells(row) for row in slow]
