"""Take the README's screenshots of the real TUI: SVG from Textual, PNG from rsvg-convert.

Run:  .venv/bin/python scripts/screenshots.py [--out screenshots]

Each scene drives the app headless (Textual's Pilot) exactly as a user would:
``autograd-viz demo`` live, stepping until something worth showing is on
screen, and ``autograd-viz run examples/nan_log_zero.py``. The live engine is
stepped one event at a time, so every run takes the same pictures; a last one
is ``autograd-viz dot`` of ``examples/torch_encoder.py``, its default picture. PNGs need
``rsvg-convert`` (Debian's librsvg2-bin) and the Fira Code font Textual's SVG
asks for (fonts-firacode); they are installed with apt-get when missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from autograd_viz.cli.demo_program import demo_program
from autograd_viz.live import LiveSession
from autograd_viz.tui import LiveDriver, VizApp

ROOT = Path(__file__).resolve().parents[1]
SIZE = (150, 44)
Scene = Callable[[Pilot[Any], VizApp], Awaitable[None]]


async def settle(pilot: Pilot[Any], app: VizApp) -> None:
    await pilot.pause()
    while app.busy:
        await pilot.pause(0.02)
    await pilot.pause()


async def step_until(
    pilot: Pilot[Any], app: VizApp, done: Callable[[], bool], key: str = "s", limit: int = 400
) -> None:
    for _ in range(limit):
        if done():
            return
        await pilot.press(key)
        await settle(pilot, app)
    raise RuntimeError("the scene never reached what it waits for")


def queued(app: VizApp) -> int:
    return sum(len(q) for q in app.driver.state().queues.values())


async def first_screen(pilot: Pilot[Any], app: VizApp) -> None:
    await settle(pilot, app)
    await pilot.press("n")
    await settle(pilot, app)


async def pytorch_step(pilot: Pilot[Any], app: VizApp) -> None:
    """PyTorch's own backward paused between two nodes, parameters named by their module."""
    await step_until(pilot, app, lambda: queued(app) >= 2 and app.driver.state().step > 40)


async def queues_busy(pilot: Pilot[Any], app: VizApp) -> None:
    await step_until(pilot, app, lambda: queued(app) >= 4)


async def reentrant_call(pilot: Pilot[Any], app: VizApp) -> None:
    def inside() -> bool:
        task = app.driver.state().graph_task
        info = app.driver.trace.graph_tasks.get(task) if task is not None else None
        event = app.driver.state().event
        deeper = info is not None and info.reentrant_depth > 0
        return deeper and event is not None and event.kind == "node_start"

    await step_until(pilot, app, inside)
    await pilot.press("v", "v")  # the drawn DAG
    await settle(pilot, app)


async def nan_found(pilot: Pilot[Any], app: VizApp) -> None:
    await settle(pilot, app)
    await pilot.press("e")  # the whole program: the Inf is born in the forward pass,
    await settle(pilot, app)  # before backward has shown the graph a could select it in
    await pilot.press("a")  # the first NaN/Inf: selected, its cause, the path to it
    await settle(pilot, app)


def export_scene(out: Path) -> Scene:
    async def scene(pilot: Pilot[Any], app: VizApp) -> None:
        await step_until(pilot, app, lambda: queued(app) >= 4)
        await pilot.press("d")
        await pilot.pause()
        app.screen.query_one("#prompt-input").value = str(out / "dot-export.svg")  # type: ignore[attr-defined]
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()

    return scene


async def encoder_by_module(pilot: Pilot[Any], app: VizApp) -> None:
    """The 12-layer encoder's replay at step 1,500, in the drawn DAG: boxes, one layer open."""
    await settle(pilot, app)
    app.driver.goto(1500)
    app.refresh_view(follow=True)
    await pilot.press("v", "v")
    await settle(pilot, app)


def recorded(script: str) -> Any:
    """A replay of ``autograd-viz record SCRIPT``, as ``autograd-viz replay`` opens it."""
    from autograd_viz.trace import Trace
    from autograd_viz.tui import ReplayDriver

    trace = ROOT / "screenshots" / ".encoder.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "autograd_viz", "record", script, "-o", str(trace)]
    subprocess.run(command, check=True, cwd=ROOT, env=env, capture_output=True)
    try:
        return ReplayDriver(Trace.load(trace))
    finally:
        trace.unlink()


async def shoot(name: str, target: Any, scene: Scene, out: Path) -> Path:
    if isinstance(target, tuple):  # ("replay", script): a recorded trace
        app = VizApp(recorded(target[1]), source=os.path.relpath(target[1], ROOT))
    else:
        app = VizApp(LiveDriver(LiveSession(target)), source=_source(target))
    async with app.run_test(size=SIZE) as pilot:
        await scene(pilot, app)
        path = out / f"{name}.svg"
        app.save_screenshot(str(path))
    keep_spaces(path)
    return path


def keep_spaces(svg: Path) -> None:
    """Mark Textual's SVG ``xml:space="preserve"``, so that converters keep every space.

    Textual writes a terminal line as one ``<text>`` per run of one style, its
    spaces as no-break spaces, and a run may begin or end with them (``" #25"``
    after a bold name). Under SVG's default ``xml:space``, librsvg (and so
    ``rsvg-convert``) strips a text's leading and trailing white space and
    collapses runs of it, and a no-break space counts as white space there:
    the PNG showed ``AddBackward0#25`` and ``sstep``. Browsers lay the text out
    as written, with or without the mark.
    """
    text = svg.read_text(encoding="utf-8")
    if 'xml:space="preserve"' in text[:500]:
        return
    marked = text.replace("<svg ", '<svg xml:space="preserve" ', 1)
    if marked == text:
        raise ValueError(f"{svg} has no <svg> element to mark")
    svg.write_text(marked, encoding="utf-8")


def _source(target: Any) -> str:
    if callable(target):
        return "demo: RNN cell + MLP on cpu, sim:0, sim:1"
    return os.path.relpath(target, ROOT)


def ensure_tools() -> None:
    """rsvg-convert and Fira Code, through apt-get when they are missing."""
    has_font = subprocess.run(["fc-list", "Fira Code"], capture_output=True, text=True, check=False)
    if shutil.which("rsvg-convert") and has_font.stdout.strip():
        return
    if not shutil.which("apt-get"):
        sys.exit("install rsvg-convert (librsvg2-bin) and the Fira Code font, then run again")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    packages = ["librsvg2-bin", "fonts-firacode"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-qq", *packages]
    if subprocess.run(install, env=env, check=False).returncode:
        subprocess.run([*sudo, "apt-get", "update", "-qq"], env=env, check=True)
        subprocess.run(install, env=env, check=True)


def to_png(svg: Path) -> Path:
    png = svg.with_suffix(".png")
    subprocess.run(["rsvg-convert", "--zoom", "1.5", str(svg), "-o", str(png)], check=True)
    return png


def dot_modules(out: Path) -> Path:
    """``autograd-viz dot`` of a 12-layer TransformerEncoder: the default picture, by module."""
    svg = out / "dot-modules.svg"
    script = ROOT / "examples" / "torch_encoder.py"
    command = [sys.executable, "-m", "autograd_viz", "dot", str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for path in (svg, svg.with_suffix(".png")):  # Graphviz draws both
        subprocess.run([*command, "-o", str(path)], check=True, cwd=ROOT, env=env)
    return svg.with_suffix(".png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots"), help="output directory")
    parser.add_argument("--scene", default=None, help="take only this scene")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    ensure_tools()
    nan_script = str(ROOT / "examples" / "nan_log_zero.py")
    scenes: list[tuple[str, Any, Scene]] = [
        ("demo-first-screen", demo_program, first_screen),
        ("queues-busy", demo_program, queues_busy),
        ("reentrant-call", demo_program, reentrant_call),
        ("nan-found", nan_script, nan_found),
        ("dot-export-tui", demo_program, export_scene(out)),
        ("pytorch-live", str(ROOT / "examples" / "torch_transformer.py"), pytorch_step),
        ("tui-modules", ("replay", str(ROOT / "examples" / "torch_encoder.py")), encoder_by_module),
    ]
    chosen = parser.parse_args().scene
    if chosen is None:
        # One process per scene: node and graph-task ids start at 1 in each, as for a user.
        for name, _, _ in scenes:
            command = [sys.executable, __file__, "--out", str(out), "--scene", name]
            subprocess.run(command, check=True)
        print(f"{to_png(out / 'dot-export.svg').relative_to(ROOT)}")
        print(f"{dot_modules(out).relative_to(ROOT)}")
        return
    name, target, scene = next(s for s in scenes if s[0] == chosen)
    svg = asyncio.run(shoot(name, target, scene, out))
    print(f"{to_png(svg).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
