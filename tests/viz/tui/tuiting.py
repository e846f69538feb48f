"""Shared pieces of the TUI tests: reproducible traces and a way to drive the app."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from textual.pilot import Pilot
from textual.widgets import Static

import engine
from autograd_viz.cli.demo_program import demo_program
from autograd_viz.live import LiveSession
from autograd_viz.trace import Trace
from autograd_viz.tui import ReplayDriver, VizApp
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.panels import EventLog
from autograd_viz.tui.prompt import PromptBar


def stepped_trace(target: Callable[[], Any]) -> Trace:
    """Record ``target`` one engine event at a time, so the order is the same every run."""
    with LiveSession(target) as session:
        while session.step(timeout=10) is not None:
            pass
    if session.error is not None:
        raise session.error
    return session.trace


def demo_trace() -> Trace:
    """The demo program's trace (three devices, a reentrant graph task)."""
    return stepped_trace(demo_program)


def nan_program() -> None:
    """``log`` of a tensor with a zero: the gradient of the log is Inf there, then NaN."""
    x = engine.tensor([0.0, 1.0, 2.0], requires_grad=True, name="x")
    with np.errstate(all="ignore"):  # the NaN is the point
        y = (x * 0.0).log()
        (y * x).sum().backward()


def run_app(
    app: VizApp, actions: Callable[[Pilot[Any]], Awaitable[None]], size: tuple[int, int] = (100, 32)
) -> None:
    """Run ``app`` headless at ``size``, apply ``actions``, then leave."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await actions(pilot)

    asyncio.run(main())


def replay_app(trace: Trace) -> VizApp:
    """The app on a recorded trace."""
    return VizApp(ReplayDriver(trace), source="test trace")


async def settle(pilot: Pilot[Any]) -> None:
    """Wait until a live move running in a worker has come back."""
    app = pilot.app
    assert isinstance(app, VizApp)
    await pilot.pause()
    for _ in range(400):
        if not app.busy:
            break
        await pilot.pause(0.025)
    await pilot.pause()
    assert not app.busy, "the live move did not come back"


def status(app: VizApp) -> str:
    """The status bar's text."""
    return _plain(app.query_one("#status", Static))


def engine_panel(app: VizApp) -> str:
    """The ready queues and thread lanes, as text."""
    return _plain(app.query_one("#engine-body", Static))


def inspector(app: VizApp) -> str:
    """The inspector's text."""
    return _plain(app.query_one("#inspector-body", Static))


def _plain(widget: Static) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


def node_list(app: VizApp) -> NodeList:
    """The node list widget."""
    return app.query_one(NodeList)


async def find_in_tree(pilot: Pilot[Any], query: str) -> int | None:
    """In the tree view, ``/`` then ``query`` then Enter: the node selected after."""
    app = pilot.app
    assert isinstance(app, VizApp)
    await pilot.press("v", "v", "slash")
    app.screen.query_one("#prompt-input").value = query  # type: ignore[attr-defined]
    await pilot.press("enter")
    await pilot.pause()
    return node_list(app).selected


def prompt_bar(app: VizApp) -> PromptBar:
    """The one-line prompt of ``/`` and ``d``."""
    return app.query_one(PromptBar)


def event_log(app: VizApp) -> EventLog:
    """The event timeline widget."""
    return app.query_one(EventLog)


async def export_via_prompt(pilot: Pilot[Any], path: str) -> None:
    """Press ``d``, type ``path`` into the prompt, and wait for the file to be written."""
    app = pilot.app
    await pilot.press("d")
    assert prompt_bar(app).asking
    app.screen.query_one("#prompt-input").value = path  # type: ignore[attr-defined]
    await pilot.press("enter")
    await app.workers.wait_for_complete()
    await pilot.pause()
