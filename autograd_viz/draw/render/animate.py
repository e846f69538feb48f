"""A backward pass as an animation: one graph frame per engine step.

:func:`animate` draws the graph after each selected step of a trace, at module
level like every picture (:mod:`autograd_viz.draw.model.showing`), and writes either
one self-contained HTML page (play / pause / step / slider controls, no network
access needed) or an animated GIF, chosen by the output's suffix.

The page stores what changes between frames, not a drawing per frame
(:mod:`autograd_viz.draw.render.step_frames` draws only what a step changed;
:mod:`autograd_viz.draw.render.frame_diff` lays the graph out once and draws each change
once, Note [Frames as changes]); :mod:`autograd_viz.draw.render.player` writes the page.
A GIF's frames are whole pictures (:func:`autograd_viz.draw.render.frames.render_frames`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import graphviz

from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot
from autograd_viz.draw.render.frame_diff import frame_changes
from autograd_viz.draw.render.frames import (
    GraphvizError,
    GraphvizNotFoundError,
    dot_executable,
    render_frames,
)
from autograd_viz.draw.render.player import DEFAULT_FRAME_MS, script_json, write_html
from autograd_viz.draw.render.step_frames import graph_frames, view_frames
from autograd_viz.trace.text import printable, thread_name

if TYPE_CHECKING:
    from autograd_viz.trace import Trace

HTML_SUFFIXES = (".html", ".htm")
"""Output suffixes that give an HTML page."""
GIF_SUFFIXES = (".gif",)
"""Output suffixes that give an animated GIF."""
LAST_FRAME_MS = 2000
"""How long a GIF holds its last frame before it loops."""

__all__ = [
    "AnimationResult",
    "DotProducer",
    "GraphvizError",
    "GraphvizNotFoundError",
    "animate",
    "describe_step",
    "dot_executable",
    "frame_steps",
    "output_format",
    "render_frames",
    "script_json",
    "write_gif",
    "write_html",
]

DotProducer = Callable[..., graphviz.Digraph]
"""``to_dot(trace, step=k, **options)``: the graph after ``k`` steps."""


@dataclass(frozen=True, slots=True)
class AnimationResult:
    """What :func:`animate` wrote."""

    path: Path
    """The HTML page or GIF."""
    frames: int
    """How many frames it has."""
    steps_shown: tuple[int, ...]
    """The trace step of each frame, in order."""
    skipped: int
    """Steps of the selected range left out to stay within ``max_frames``."""


def animate(
    trace: Trace,
    output: str | os.PathLike[str],
    *,
    first: int = 0,
    last: int | None = None,
    max_frames: int = 600,
    frame_ms: int = DEFAULT_FRAME_MS,
    title: str | None = None,
    to_dot: DotProducer | None = None,
    **dot_options: Any,
) -> AnimationResult:
    """Write an animation of ``trace``: the graph after each step from ``first`` to ``last``.

    Example:
        >>> with autograd_viz.record() as trace:
        ...     loss.backward()
        >>> animate(trace, "run.html", values=True).frames
        20

    Args:
        trace: a recorded or loaded trace with at least one backward call.
        output: where to write; ``.html`` / ``.htm`` gives a page, ``.gif`` a GIF.
        first: the first step shown (0 is before the first event).
        last: the last step shown; ``None`` is the end of the trace.
        max_frames: at most this many frames; a longer range is sampled
            evenly, its first and last step always kept.
        frame_ms: milliseconds per frame at normal speed.
        title: the page's title (the script or trace name); ``output``'s name if ``None``.
        to_dot: draws the graph at a step; :func:`autograd_viz.draw.render.dot.to_dot` if ``None``.
        **dot_options: passed on to ``to_dot`` (``values=True``, ``saved=True``, ...).

    Returns:
        Where it wrote, how many frames and which steps.

    Raises:
        ValueError: the suffix is not supported, the steps are outside the
            trace, or the trace has no backward pass.
        GraphvizNotFoundError: Graphviz's ``dot`` is not installed.
        GraphvizError: ``dot`` failed on a frame.
        ImportError: a GIF was asked for and Pillow is not installed.
        OSError: ``output`` cannot be written.
    """
    path = Path(output)
    kind = output_format(path)
    if not trace.graph_tasks:
        raise ValueError("the trace has no backward pass to animate (it recorded no graph task)")
    if isinstance(frame_ms, bool) or not isinstance(frame_ms, int) or frame_ms <= 0:
        raise ValueError(f"frame_ms must be a positive integer, got {frame_ms!r}")
    steps = frame_steps(len(trace), first, last, max_frames)
    dot_executable()  # fail before the slow part
    labels = [f"step {step}" for step in steps]
    if kind == "gif":
        # No caption strip: dot.to_dot writes the step and its event under each graph.
        draw = dot.to_dot if to_dot is None else to_dot
        graphs = [draw(trace, step=step, **dot_options) for step in steps]
        write_gif(path, render_frames(graphs, "png", labels=labels), frame_ms=frame_ms)
    else:
        if to_dot is None:
            graph_task = dot_options.pop("graph_task", None)
            frames = view_frames(trace, steps, ViewOptions(**dot_options), graph_task=graph_task)
        else:
            frames = graph_frames(to_dot(trace, step=step, **dot_options) for step in steps)
        changes = frame_changes(frames, labels)
        captions = [describe_step(trace, step) for step in steps]
        write_html(path, changes, captions, title=title or path.stem, frame_ms=frame_ms)
    skipped = steps[-1] - steps[0] + 1 - len(steps)
    return AnimationResult(path, len(steps), tuple(steps), skipped)


def output_format(path: str | os.PathLike[str]) -> str:
    """``"html"`` or ``"gif"``: what :func:`animate` writes to ``path``, by its suffix.

    Raises:
        ValueError: the suffix is neither; check before recording, it is quicker.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in HTML_SUFFIXES:
        return "html"
    if suffix in GIF_SUFFIXES:
        return "gif"
    given = repr(path.suffix) if path.suffix else "no suffix"
    supported = ", ".join(HTML_SUFFIXES + GIF_SUFFIXES)
    raise ValueError(
        f"cannot animate to {path.name!r}: unsupported suffix ({given}); use one of {supported}"
    )


def frame_steps(
    total: int, first: int = 0, last: int | None = None, max_frames: int = 600
) -> list[int]:
    """The steps to draw: ``first .. last``, evenly sampled down to ``max_frames``.

    Args:
        total: the trace's length (its last step).
        first: the first step.
        last: the last step; ``None`` is ``total``.
        max_frames: at most this many steps; ``first`` and ``last`` are always kept.

    Raises:
        ValueError: the range is empty or outside ``0 .. total``, or ``max_frames < 2``.
    """
    last = total if last is None else last
    for name, value in (("first", first), ("last", last), ("max_frames", max_frames)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if not 0 <= first <= last <= total:
        raise ValueError(
            f"steps {first} .. {last} are outside this trace; choose 0 <= first <= last <= {total}"
        )
    if max_frames < 2:
        raise ValueError(
            f"max_frames must be at least 2 (the first and last step), got {max_frames}"
        )
    count = last - first + 1
    if count <= max_frames:
        return list(range(first, last + 1))
    # Rounded in integers: the gap between samples is above 1, so they never repeat.
    gaps = max_frames - 1
    return [first + (i * (count - 1) + gaps // 2) // gaps for i in range(max_frames)]


def describe_step(trace: Trace, step: int) -> str:
    """A frame's caption: ``step k of N`` and the event that step applied."""
    head = f"step {step} of {len(trace)}"
    if step == 0:
        return f"{head} · before backward"
    event = trace.events[step - 1]
    what = event.kind if event.node_name is None else f"{event.kind} {event.node_name}"
    # Names are text (Note [Names are text]); the page sets captions as textContent.
    thread = printable(thread_name(event.thread))
    return f"{head} · {printable(what)} · thread {thread} · graph task {event.graph_task}"


# -- GIF ------------------------------------------------------------------------------


def write_gif(
    path: str | os.PathLike[str],
    pngs: Sequence[bytes],
    *,
    frame_ms: int = DEFAULT_FRAME_MS,
    last_frame_ms: int = LAST_FRAME_MS,
) -> None:
    """Write PNG frames as a looping GIF, each centred on a white canvas the size of the largest.

    Raises:
        ImportError: Pillow is not installed.
        OSError: ``path`` cannot be written.
    """
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(
            "writing a GIF needs Pillow, which is not installed: pip install pillow "
            "(or write an .html page, which needs nothing more)"
        ) from exc
    sizes = [_png_size(png) for png in pngs]
    width, height = max(w for w, _ in sizes), max(h for _, h in sizes)

    def on_canvas(png: bytes) -> Image.Image:
        graph = Image.open(io.BytesIO(png)).convert("RGBA")
        frame = Image.new("RGB", (width, height), "white")
        frame.paste(graph, ((width - graph.width) // 2, 0), graph)
        return frame

    # One palette for every frame, from a strip of small copies of some of them: quantizing
    # is then a lookup, and Pillow finds what changed between frames without converting
    # them back to RGB. Only the indexed frames are kept; an RGB one is four times bigger.
    sample = [on_canvas(png).reduce(4) for png in [*pngs[:: max(1, len(pngs) // 16)], pngs[-1]]]
    strip = Image.new("RGB", (sum(s.width for s in sample), sample[0].height), "white")
    for position, small in enumerate(sample):
        strip.paste(small, (sum(s.width for s in sample[:position]), 0))
    palette = strip.quantize(colors=256, method=Image.Quantize.FASTOCTREE)

    def indexed(png: bytes) -> Image.Image:
        return on_canvas(png).quantize(palette=palette, dither=Image.Dither.NONE)

    with ThreadPoolExecutor(os.cpu_count()) as pool:  # Pillow lets go of the GIL to decode
        frames = list(pool.map(indexed, pngs))
    durations = [frame_ms] * (len(frames) - 1) + [max(frame_ms, last_frame_ms)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=durations, loop=0)


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header chunk, which comes first."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
