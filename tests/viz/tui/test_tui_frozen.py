"""What the app builds in threads is frozen out of the collector once built; quitting at once."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from textual import events
from textual.pilot import Pilot

import autograd_viz
from autograd_viz.cli import tui as tui_commands
from autograd_viz.live import LiveSession
from autograd_viz.trace import Trace
from autograd_viz.tui import LiveDriver, ReplayDriver, VizApp
from autograd_viz.tui.dag import LATER_NODES, DagView
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.rows import RowList
from tests.viz.tui.test_tui_modules import blocks
from tests.viz.tui.tuiting import node_list, prompt_bar, replay_app, run_app, settle


@pytest.fixture(scope="module")
def big() -> Trace:
    with autograd_viz.record() as recorded:
        blocks(LATER_NODES // 6 + 50)  # rows and pictures made in threads
    return recorded


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Give the collector back what a test froze (freezing is process-wide)."""
    yield
    gc.unfreeze()


def _tracked_ids() -> set[int]:
    """Ids of what the collector scans (``gc.get_objects`` leaves out what is frozen)."""
    return {id(o) for o in gc.get_objects()}


async def _built(app: VizApp, pilot: Pilot[Any], freezes: int) -> None:
    """Wait until the builds have ended and the app froze ``freezes`` times in all."""
    await app.workers.wait_for_complete()
    for _ in range(400):
        assert app.freezer is not None
        if app.freezer.freezes >= freezes and not app.freezer._pending:
            break
        await pilot.pause(0.05)
    await pilot.pause()


def test_replay_freezes_what_it_built_once_every_build_has_ended(
    big: Trace, unfrozen: None
) -> None:
    driver = ReplayDriver(big)
    app = VizApp(driver, source="test trace", freeze=True)
    before = gc.get_freeze_count()

    async def actions(pilot: Pilot[Any]) -> None:
        assert app.freezer is not None
        await _built(app, pilot, 1)
        await app.workers.wait_for_complete()  # the rows' thread may start after a first freeze
        await _built(app, pilot, app.freezer.freezes)
        assert driver.indexed.is_set()
        freezes = app.freezer.freezes
        listing = node_list(app).listing
        assert listing is not None and gc.is_tracked(listing)
        assert id(listing) not in _tracked_ids()  # frozen: no collection scans it
        assert gc.get_freeze_count() > before
        for key in "ssnp":  # keys build nothing: nothing more is frozen
            await pilot.press(key)
        await pilot.pause()
        assert app.freezer.freezes == freezes
        await pilot.press("v", "v")  # the drawn DAG: a thread makes the task's pictures
        dag = app.query_one(DagView)
        await dag.drawn()
        await _built(app, pilot, freezes + 1)
        assert app.freezer.freezes == freezes + 1
        pictures = dag._pictures
        assert pictures is not None and id(pictures.tree) not in _tracked_ids()

        # What is made after is collected as before.
        class Cycle:
            pass

        cycle = Cycle()
        cycle.me = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert alive() is None

    run_app(app, actions, size=(120, 40))


class Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_live_app_freezes_the_programs_graph_and_collects_what_it_dropped_since(
    unfrozen: None,
) -> None:
    kept: list[tuple[int, weakref.ref[Cycle]]] = []

    def program() -> None:
        cycle = Cycle()  # dropped between the two backward calls, as a program's step does
        kept.append((id(cycle), weakref.ref(cycle)))
        blocks(LATER_NODES // 6 + 50)  # rows made in a thread: a build, then a freeze
        del cycle
        blocks(LATER_NODES // 6 + 50)

    driver = LiveDriver(LiveSession(program))
    app = VizApp(driver, source="test program", freeze=True)

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        assert app.freezer is not None
        await _built(app, pilot, 2)  # on opening, then the first big graph task's rows
        ((cycle_id, alive),) = kept
        assert alive() is not None and cycle_id not in _tracked_ids()  # the program's, frozen
        listing = node_list(app).listing
        assert listing is not None and id(listing) not in _tracked_ids()
        freezes = app.freezer.freezes
        await pilot.press("e")  # the program drops the cycle and runs its second backward
        await settle(pilot)
        assert driver.finished and len(driver.trace.graph_tasks) == 2
        await _built(app, pilot, freezes + 1)  # the second graph task's rows, then a freeze
        assert alive() is None, "what was frozen and dropped since is collected"

    run_app(app, actions, size=(120, 40))


class _Opened(Exception):
    """Raised where the command built its app, with whether it asked to freeze."""


@pytest.mark.parametrize("command", ["demo", "run"])
def test_run_and_demo_freeze_what_they_build_as_replay_does(
    command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def opened(self: VizApp, driver: Any, **kwargs: Any) -> None:
        raise _Opened(kwargs.get("freeze", False))

    monkeypatch.setattr(VizApp, "__init__", opened)
    monkeypatch.setattr(tui_commands, "has_terminal", lambda: True)
    script = tmp_path / "script.py"
    script.write_text("print('hello')\n")
    parser = tui_commands.ArgumentParser(prog="autograd-viz")
    tui_commands.add_tui_commands(parser.add_subparsers())
    args = parser.parse_args([command] + ([str(script)] if command == "run" else []))
    run: Callable[[Any], int] = args.run
    with pytest.raises(_Opened) as opening:
        run(args)
    assert opening.value.args == (True,)


def test_the_app_freezes_nothing_unless_asked(big: Trace) -> None:
    app = replay_app(big)
    before = gc.get_freeze_count()

    async def actions(pilot: Pilot[Any]) -> None:
        await app.workers.wait_for_complete()
        await pilot.press("v", "v")
        await app.query_one(DagView).drawn()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.freezer is None
        listing = node_list(app).listing
        assert listing is not None and id(listing) in _tracked_ids()

    run_app(app, actions, size=(120, 40))
    assert gc.get_freeze_count() == before


def test_pictures_are_made_with_the_collector_paused(
    big: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autograd_viz.tui.pictures import Pictures

    app = replay_app(big)
    during: list[bool] = []
    make = Pictures.picture

    def recorded(self: Pictures, *args: Any, **kwargs: Any) -> Any:
        during.append(gc.isenabled())
        return make(self, *args, **kwargs)

    monkeypatch.setattr(Pictures, "picture", recorded)
    assert gc.isenabled()

    async def actions(pilot: Pilot[Any]) -> None:
        await app.workers.wait_for_complete()
        await pilot.press("v", "v")
        dag = app.query_one(DagView)
        await dag.drawn()
        await pilot.press("n", "n")  # new pictures, and the next nodes' made ahead
        await dag.drawn()
        await dag.maker.wait()
        assert during and not any(during)
        assert gc.isenabled()  # on again once they are made

    run_app(app, actions, size=(120, 40))


def _send(app: VizApp, key: str, character: str | None) -> None:
    """The key as the terminal sends it, not waiting for what it does."""
    event = events.Key(key, character)
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)


@pytest.mark.parametrize("query", ["#3", "Tanh", "model.layers.7.act"])
@pytest.mark.parametrize("view", ["topo", "dag"])
def test_quitting_right_after_a_find_closes_cleanly(big: Trace, query: str, view: str) -> None:
    app = replay_app(big)

    async def actions(pilot: Pilot[Any]) -> None:
        await app.workers.wait_for_complete()
        if view == "dag":
            await pilot.press("v", "v")
        await pilot.press("slash")
        app.screen.query_one("#prompt-input").value = query  # type: ignore[attr-defined]
        _send(app, "enter", "\r")
        while prompt_bar(app).asking:  # no longer than the find itself
            await asyncio.sleep(0)
        _send(app, "q", "q")  # the find's messages still queued
        for _ in range(500):
            if app.return_code is not None:
                break
            await asyncio.sleep(0.01)

    run_app(app, actions, size=(120, 40))  # raises what a handler raised while closing
    assert app.return_code == 0  # q, not an error (1)


def test_messages_handled_after_the_panels_are_gone_do_nothing(big: Trace) -> None:
    app = replay_app(big)
    lists: list[NodeList] = []

    async def actions(pilot: Pilot[Any]) -> None:
        await app.workers.wait_for_complete()
        lists.append(node_list(app))

    run_app(app, actions, size=(120, 40))
    assert not app.is_running and not app.query(NodeList)  # closed, as while quitting
    # What a message or callback still queued would call; each looked up a panel before.
    app.on_row_list_highlighted(RowList.Highlighted(lists[0], 3))
    app.on_dag_view_picked(DagView.Picked(3))
    for query in ("#3", "Tanh", "model.layers.7.act"):
        app.finder.find(query)
    app.refresh_view(follow=True)
    app.refresh_status()
