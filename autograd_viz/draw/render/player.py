"""The animation page: one self-contained HTML file that plays a backward pass frame by frame.

The page holds the frames as changes (Note [Frames as changes] in
:mod:`autograd_viz.draw.render.frame_diff`): a drawing per group of frames, each
variant of an element once, and each frame as the elements it redraws. Its
script puts the drawing in place and swaps the elements a step changes.

Names in the drawings were escaped when they were drawn (they are SVG text
there), and the page parses drawings as SVG, dropping anything that could run;
captions are set with ``textContent``, so a name in one is text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autograd_viz.draw.render.escape import page_text
from autograd_viz.draw.render.frame_diff import Changes
from autograd_viz.trace.text import printable

DEFAULT_FRAME_MS = 500
"""How long each frame shows at normal speed."""


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside ``<script type="application/json">``.

    ``</`` (as in ``</script>``) and ``<!--`` would end or derail the script
    element; ``<\\/`` and ``<\\u0021--`` are the same JSON strings.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def page_data(changes: Changes, captions: Sequence[str], frame_ms: int) -> dict[str, Any]:
    """What the page's script reads: drawings, variants, frames, captions, the frame time."""
    return {
        "drawings": changes.drawings,
        "bases": changes.bases,
        "variants": changes.variants,
        "frames": [[g, [list(c) for c in delta]] for g, delta in changes.frames],
        "captions": list(captions),
        "frameMs": frame_ms,
    }


def write_html(
    path: str | os.PathLike[str],
    changes: Changes,
    captions: Sequence[str],
    *,
    title: str | None = None,
    frame_ms: int = DEFAULT_FRAME_MS,
) -> None:
    """Write the player page: the frames as changes, their captions and the controls.

    Raises:
        OSError: ``path`` cannot be written.
    """
    heading = f"autograd-viz · {printable(title)}" if title else "autograd-viz · backward pass"
    data = script_json(page_data(changes, captions, frame_ms))
    page = (
        PAGE.replace("{{title}}", page_text(heading))
        .replace("{{frames}}", str(len(changes.frames)))
        .replace("{{data}}", data)  # last: the frames must not be searched for placeholders
    )
    Path(path).write_text(page, encoding="utf-8")


def _icon(path: str) -> str:
    """A control's symbol as a small inline SVG: no font on any machine lacks it."""
    return (
        '<svg class="icon" viewBox="0 0 16 16" aria-hidden="true" focusable="false">'
        f'<path d="{path}"/></svg>'
    )


_FIRST = _icon("M3 3h2v10H3zM13 3v10L6 8z")
_BACK = _icon("M12 3v10L5 8z")
_PLAY = _icon("M4 3v10l9-5z")
_PAUSE = _icon("M4 3h3v10H4zM9 3h3v10H9z")
_FORWARD = _icon("M4 3v10l7-5z")
_LAST = _icon("M11 3h2v10h-2zM3 3v10l7-5z")

PAGE = (
    """<!DOCTYPE html>
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
  #stage > svg { display: block; margin: 0 auto; max-width: 100%; height: auto; }
  #stage.actual > svg { max-width: none; margin: 0; }
  #stage:not(.with-legend) g.legend { display: none; }
  .controls { display: flex; flex-wrap: wrap; align-items: center; justify-content: center;
              gap: 0.5rem; margin: 0 0 0.25rem; }
  button, select { font: inherit; padding: 0.3rem 0.7rem; border: 1px solid #d0d7de;
                   border-radius: 6px; background: #fff; cursor: pointer; }
  button { display: inline-flex; align-items: center; gap: 0.35rem; }
  button:hover, select:hover { background: #f3f4f6; }
  .icon { width: 1em; height: 1em; fill: currentColor; }
  #play { min-width: 5.5rem; justify-content: center; }
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
      <button id="first" title="First step (Home)" aria-label="first step">"""
    + _FIRST
    + """</button>
      <button id="back" title="Step back (Left arrow)" aria-label="step back">"""
    + _BACK
    + """</button>
      <button id="play" title="Play / pause (Space)"><span id="play-icon">"""
    + _PLAY
    + """</span><span id="play-word">Play</span></button>
      <button id="forward" title="Step forward (Right arrow)" aria-label="step forward">"""
    + _FORWARD
    + """</button>
      <button id="last" title="Last step (End)" aria-label="last step">"""
    + _LAST
    + """</button>
      <input id="slider" type="range" min="0" max="0" value="0" aria-label="frame">
      <span id="counter">1 / {{frames}}</span>
      <select id="speed" title="Playback speed" aria-label="speed">
        <option value="0.25">0.25&#xD7;</option>
        <option value="0.5">0.5&#xD7;</option>
        <option value="1" selected>1&#xD7;</option>
        <option value="2">2&#xD7;</option>
        <option value="4">4&#xD7;</option>
      </select>
      <button id="zoom" title="Fit the drawing to the page, or show it at its size (Z)"
              aria-pressed="false">Actual size</button>
      <button id="legend-toggle" title="Show or hide the legend (L)"
              aria-pressed="false">Legend</button>
    </div>
    <p id="caption" aria-live="polite"></p>
    <p class="hint">Space: play / pause &#xB7; &#x2190; &#x2192;: step &#xB7;
      Home / End: first / last &#xB7; Z: fit / actual size &#xB7; L: legend</p>
  </div>
  <div id="stage" aria-label="graph at the current step"></div>
  <noscript><p class="hint">The player needs JavaScript.</p></noscript>
</main>
<template id="icons"><span id="icon-play">"""
    + _PLAY
    + """</span><span id="icon-pause">"""
    + _PAUSE
    + """</span></template>
<script type="application/json" id="animation-data">{{data}}</script>
<script>
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg", XLINK = "http://www.w3.org/1999/xlink";
  var data = JSON.parse(document.getElementById("animation-data").textContent);
  var frames = data.frames, count = frames.length;
  var $ = function (id) { return document.getElementById(id); };
  var stage = $("stage"), slider = $("slider"), caption = $("caption"), counter = $("counter");
  var playIcon = $("play-icon"), playWord = $("play-word"), speed = $("speed");
  var zoom = $("zoom"), actual = false, legend = $("legend-toggle");
  var icons = $("icons").content;
  var index = -1, timer = null;
  // Where the run of frames that share a drawing begins, for each frame.
  var starts = [];
  frames.forEach(function (f, i) {
    starts.push(i > 0 && frames[i - 1][0] === f[0] ? starts[i - 1] : i);
  });
  var drawing = -1, swapped = {};  // what is on the stage: the drawing, the variants swapped in

  // Drawings and variants are Graphviz's SVG, parsed as SVG and never as HTML; whatever
  // could run or navigate (scripts, foreign HTML, event handlers, links) is dropped.
  var parser = new DOMParser();
  function parsed(text) {
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
  function swap(id, variant) {
    var old = document.getElementById(id);
    if (old === null) return;
    var sheet = parsed('<svg xmlns="' + SVG + '" xmlns:xlink="' + XLINK + '">' +
                       data.variants[variant] + "</svg>");
    old.replaceWith(sheet.firstElementChild);
  }
  function draw(i) {
    var g = frames[i][0], bases = data.bases[g], target = {};
    if (g !== drawing) {
      stage.replaceChildren(parsed(data.drawings[g]));
      drawing = g;
      swapped = {};
    }
    for (var k = starts[i]; k <= i; k++) {
      frames[k][1].forEach(function (c) { target[c[0]] = c[1]; });
    }
    Object.keys(swapped).forEach(function (id) {
      if (!(id in target)) target[id] = bases[id];
    });
    Object.keys(target).forEach(function (id) {
      var want = target[id], have = id in swapped ? swapped[id] : bases[id];
      if (want === have) return;
      swap(id, want);
      if (want === bases[id]) delete swapped[id]; else swapped[id] = want;
    });
    // The drawing's ids are its own (f1, f2, ...); the legend is the node named legend.
    stage.querySelectorAll("g.node > title").forEach(function (title) {
      if (title.textContent === "legend") title.parentNode.classList.add("legend");
    });
  }
  function show(i) {
    i = Math.max(0, Math.min(count - 1, i));
    if (i === index) return;
    index = i;
    draw(i);
    slider.value = String(i);
    caption.textContent = data.captions[i];
    counter.textContent = (i + 1) + " / " + count;
    follow();
  }
  // A drawing much wider than the page is unreadable when fitted to it (a ResNet's stages
  // run diagonally): it opens at its own size; Z (or the button) switches between the two.
  // Fitted or not, the page scrolls to keep the running or failed node in sight at every
  // step: a tall model fitted to the page's width still runs far below it.
  function follow() {
    var node = stage.querySelector("g.node.running:not(.module):not(.fold)") ||
               stage.querySelector("g.node.running, g.node.failed");
    if (node === null) return;
    var box = node.getBoundingClientRect(), seen = stage.getBoundingClientRect();
    var top = Math.max(seen.top, document.querySelector(".bar").getBoundingClientRect().bottom);
    var inSight = box.left >= seen.left && box.right <= seen.right && box.top >= top &&
                  box.bottom <= Math.min(seen.bottom, window.innerHeight);
    if (!inSight) node.scrollIntoView({block: "center", inline: "center"});
  }
  function setActual(on) {
    actual = on;
    stage.classList.toggle("actual", on);
    zoom.textContent = on ? "Fit to page" : "Actual size";
    zoom.setAttribute("aria-pressed", String(on));
    follow();
  }
  // The legend is folded away (it sits above a stacked picture and pushes the work down);
  // L (or the button) shows it.
  function setLegend(on) {
    stage.classList.toggle("with-legend", on);
    legend.setAttribute("aria-pressed", String(on));
    follow();
  }
  function tooWide() {
    var svg = stage.querySelector("svg");
    return svg !== null && svg.width.baseVal.value > 2 * stage.clientWidth;
  }
  function setPlaying(playing) {
    playIcon.replaceChildren(icons.getElementById(playing ? "icon-pause" : "icon-play")
      .firstElementChild.cloneNode(true));
    playWord.textContent = playing ? "Pause" : "Play";
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
    setPlaying(true);
    timer = setTimeout(tick, delay());
  }
  function pause() {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    setPlaying(false);
  }
  function toggle() { if (timer === null) play(); else pause(); }
  function go(i) { pause(); show(i); }

  slider.max = String(count - 1);
  $("play").addEventListener("click", toggle);
  $("first").addEventListener("click", function () { go(0); });
  $("back").addEventListener("click", function () { go(index - 1); });
  $("forward").addEventListener("click", function () { go(index + 1); });
  $("last").addEventListener("click", function () { go(count - 1); });
  slider.addEventListener("input", function () { go(Number(slider.value)); });
  zoom.addEventListener("click", function () { setActual(!actual); });
  legend.addEventListener("click", function () {
    setLegend(!stage.classList.contains("with-legend"));
  });
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
      "End": function () { go(count - 1); },
      "z": function () { setActual(!actual); },
      "Z": function () { setActual(!actual); },
      "l": function () { setLegend(!stage.classList.contains("with-legend")); },
      "L": function () { setLegend(!stage.classList.contains("with-legend")); }
    };
    if (Object.prototype.hasOwnProperty.call(actions, e.key)) {
      e.preventDefault();
      actions[e.key]();
    }
  });
  show(0);
  if (tooWide()) setActual(true);
})();
</script>
</body>
</html>
"""
)
