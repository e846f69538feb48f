"""A backward pass as an animation: one graph frame per engine step.

:func:`animate` draws the graph (:func:`autograd_viz.draw.dot.to_dot`) after each
selected step of a trace and writes either one self-contained HTML page (SVG
frames, play / pause / step / slider controls, no network access needed) or
an animated GIF, chosen by the output's suffix.

Frames are rendered by :func:`autograd_viz.draw.frames.render_frames`: a few
``dot`` processes, and a layout that stays still from frame to frame.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import graphviz

from autograd_viz.draw import dot
from autograd_viz.draw.escape import page_text
from autograd_viz.draw.frames import (
    GraphvizError,
    GraphvizNotFoundError,
    dot_executable,
    render_frames,
)
from autograd_viz.trace.text import printable

if TYPE_CHECKING:
    from autograd_viz.trace import Trace

HTML_SUFFIXES = (".html", ".htm")
"""Output suffixes that give an HTML page."""
GIF_SUFFIXES = (".gif",)
"""Output suffixes that give an animated GIF."""
DEFAULT_FRAME_MS = 500
"""How long each frame shows at normal speed."""
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
    "inline_svg",
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
        to_dot: draws the graph at a step; :func:`autograd_viz.draw.dot.to_dot` if ``None``.
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
    draw = dot.to_dot if to_dot is None else to_dot
    graphs = [draw(trace, step=step, **dot_options) for step in steps]
    labels = [f"step {step}" for step in steps]
    if kind == "gif":
        # No caption strip: dot.to_dot writes the step and its event under each graph.
        write_gif(path, render_frames(graphs, "png", labels=labels), frame_ms=frame_ms)
    else:
        svgs = [inline_svg(svg) for svg in render_frames(graphs, "svg", labels=labels)]
        captions = [describe_step(trace, step) for step in steps]
        write_html(path, svgs, captions, title=title or path.stem, frame_ms=frame_ms)
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
    thread = printable(event.thread)
    return f"{head} · {printable(what)} · thread {thread} · graph task {event.graph_task}"


# -- HTML -----------------------------------------------------------------------------


def inline_svg(svg: bytes) -> str:
    """An SVG file as markup to put inside HTML: no XML declaration, doctype or comments."""
    text = svg.decode("utf-8")
    text = text[text.index("<svg") :]
    return re.sub(r"<!--.*?-->\n?", "", text, flags=re.DOTALL)


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script type="application/json">``.

    ``</`` (as in ``</script>``) and ``<!--`` would end or derail the script
    element; ``<\\/`` and ``<\\u0021--`` are the same JSON strings.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def write_html(
    path: str | os.PathLike[str],
    svgs: Sequence[str],
    captions: Sequence[str],
    *,
    title: str | None = None,
    frame_ms: int = DEFAULT_FRAME_MS,
) -> None:
    """Write the player page: the frames, their captions and the controls, in one file.

    Raises:
        OSError: ``path`` cannot be written.
    """
    heading = f"autograd-viz · {printable(title)}" if title else "autograd-viz · backward pass"
    data = script_json({"frames": list(svgs), "captions": list(captions), "frameMs": frame_ms})
    page = (
        _PAGE.replace("{{title}}", page_text(heading))
        .replace("{{frames}}", str(len(svgs)))
        .replace("{{data}}", data)  # last: the frames must not be searched for placeholders
    )
    Path(path).write_text(page, encoding="utf-8")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="autograd-viz">
<title>{{title}}</title>
<style>
  :root { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328; }
  body { margin: 0; background: #f6f8fa; }
  header { padding: 0.75rem 1.5rem; background: #fff; border-bottom: 1px solid #d0d7de; }
  h1 { margin: 0; font-size: 1.1rem; font-weight: 600; }
  main { max-width: 100%; padding: 1rem 1.5rem; box-sizing: border-box; }
  .bar { position: sticky; top: 0; z-index: 1; background: #f6f8fa; padding-bottom: 0.5rem; }
  #stage { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 1rem;
           overflow: auto; }
  #stage svg { display: block; margin: 0 auto; max-width: 100%; height: auto; }
  .controls { display: flex; flex-wrap: wrap; align-items: center; justify-content: center;
              gap: 0.5rem; margin: 0 0 0.25rem; }
  button, select { font: inherit; padding: 0.3rem 0.7rem; border: 1px solid #d0d7de;
                   border-radius: 6px; background: #fff; cursor: pointer; }
  button:hover, select:hover { background: #f3f4f6; }
  #play { min-width: 5.5rem; }
  #slider { flex: 1 1 16rem; max-width: 40rem; }
  #counter { font-variant-numeric: tabular-nums; min-width: 6rem; text-align: center; }
  #caption { text-align: center; margin: 0.25rem 0; font-variant-numeric: tabular-nums; }
  .hint { text-align: center; color: #656d76; font-size: 0.85rem; margin: 0; }
</style>
</head>
<body>
<header><h1>{{title}}</h1></header>
<main>
  <div class="bar">
    <div class="controls" role="toolbar" aria-label="animation controls">
      <button id="first" title="First step (Home)">&#x23EE;&#xFE0E;</button>
      <button id="back" title="Step back (Left arrow)">&#x25C0;&#xFE0E;</button>
      <button id="play" title="Play / pause (Space)">&#x25B6;&#xFE0E; Play</button>
      <button id="forward" title="Step forward (Right arrow)">&#x25B6;&#xFE0E;</button>
      <button id="last" title="Last step (End)">&#x23ED;&#xFE0E;</button>
      <input id="slider" type="range" min="0" max="0" value="0" aria-label="frame">
      <span id="counter">1 / {{frames}}</span>
      <select id="speed" title="Playback speed" aria-label="speed">
        <option value="0.25">0.25&#xD7;</option>
        <option value="0.5">0.5&#xD7;</option>
        <option value="1" selected>1&#xD7;</option>
        <option value="2">2&#xD7;</option>
        <option value="4">4&#xD7;</option>
      </select>
    </div>
    <p id="caption" aria-live="polite"></p>
    <p class="hint">Space: play / pause &#xB7; &#x2190; &#x2192;: step &#xB7;
      Home / End: first / last</p>
  </div>
  <div id="stage" aria-label="graph at the current step"></div>
  <noscript><p class="hint">The player needs JavaScript.</p></noscript>
</main>
<script type="application/json" id="animation-data">{{data}}</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("animation-data").textContent);
  var count = data.frames.length;
  var $ = function (id) { return document.getElementById(id); };
  var stage = $("stage"), slider = $("slider"), caption = $("caption"), counter = $("counter");
  var playButton = $("play"), speed = $("speed");
  var index = -1, timer = null;

  // A frame is Graphviz's SVG, parsed as SVG and never as HTML; whatever could run or
  // navigate (scripts, foreign HTML, event handlers, links) is dropped before it is shown.
  var parser = new DOMParser();
  function frame(text) {
    var svg = parser.parseFromString(text, "image/svg+xml").documentElement;
    svg.querySelectorAll("script, foreignObject").forEach(function (el) { el.remove(); });
    [svg].concat(Array.prototype.slice.call(svg.querySelectorAll("*"))).forEach(function (el) {
      Array.prototype.slice.call(el.attributes).forEach(function (attr) {
        var name = attr.name.toLowerCase();
        if (name.indexOf("on") === 0 || /(^|:)href$/.test(name)) el.removeAttribute(attr.name);
      });
    });
    return document.importNode(svg, true);
  }
  function show(i) {
    i = Math.max(0, Math.min(count - 1, i));
    if (i === index) return;
    index = i;
    stage.replaceChildren(frame(data.frames[i]));
    slider.value = String(i);
    caption.textContent = data.captions[i];
    counter.textContent = (i + 1) + " / " + count;
  }
  function delay() { return data.frameMs / Number(speed.value); }
  function tick() {
    if (index >= count - 1) { pause(); return; }
    show(index + 1);
    timer = setTimeout(tick, delay());
  }
  function play() {
    if (timer !== null) return;
    if (index >= count - 1) show(0);
    playButton.textContent = "\u23f8\ufe0e Pause";
    timer = setTimeout(tick, delay());
  }
  function pause() {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    playButton.textContent = "\u25b6\ufe0e Play";
  }
  function toggle() { if (timer === null) play(); else pause(); }
  function go(i) { pause(); show(i); }

  slider.max = String(count - 1);
  playButton.addEventListener("click", toggle);
  $("first").addEventListener("click", function () { go(0); });
  $("back").addEventListener("click", function () { go(index - 1); });
  $("forward").addEventListener("click", function () { go(index + 1); });
  $("last").addEventListener("click", function () { go(count - 1); });
  slider.addEventListener("input", function () { go(Number(slider.value)); });
  // A clicked button keeps focus, and Space would then press it again instead of playing.
  document.querySelectorAll("button").forEach(function (b) {
    b.addEventListener("mousedown", function (e) { e.preventDefault(); });
  });
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    var focus = e.target.tagName;
    // Focused controls keep their own keys: buttons Space, the slider and select the arrows.
    if (focus === "BUTTON" && (e.key === " " || e.key === "Enter")) return;
    if ((focus === "INPUT" || focus === "SELECT") && e.key !== " ") return;
    var actions = {
      " ": toggle,
      "ArrowLeft": function () { go(index - 1); },
      "ArrowRight": function () { go(index + 1); },
      "Home": function () { go(0); },
      "End": function () { go(count - 1); }
    };
    if (Object.prototype.hasOwnProperty.call(actions, e.key)) {
      e.preventDefault();
      actions[e.key]();
    }
  });
  show(0);
})();
</script>
</body>
</html>
"""


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
