"""``grads --plot FILE``: each module's gradient norm across backward calls, SVG or PNG.

One line per module on a log scale, calls along the bottom, the modules named
in a legend on the right; a vanishing or exploding point (Note [Vanishing and
exploding] in :mod:`autograd_viz.grads.report`) is a ring. The drawing is
laid out once (:func:`layout`) and written as SVG text or, through Pillow,
as PNG. Module names are data: escaped in SVG, drawn as text in PNG.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from autograd_viz.grads.report import GradsReport
from autograd_viz.trace.text import printable

PLOT_SUFFIXES = (".svg", ".png")
"""The file names ``--plot`` draws to."""

MAX_LINES = 40
"""Modules drawn at most: the largest and smallest by their last norm, beyond."""

_WIDTH, _HEIGHT = 960, 540
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 260, 40, 50
_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip


@dataclass
class Drawing:
    """What to draw, in pixels from the top left."""

    lines: list[tuple[list[tuple[float, float]], str]] = field(default_factory=list)
    rings: list[tuple[float, float, str]] = field(default_factory=list)
    texts: list[tuple[float, float, str, str, str]] = field(default_factory=list)
    """``(x, y, text, anchor, color)``; anchor ``start``, ``middle`` or ``end``."""
    rules: list[tuple[float, float, float, float, str]] = field(default_factory=list)


def layout(report: GradsReport) -> tuple[Drawing, int]:
    """The drawing of ``report``'s flow, and how many modules it draws."""
    series: dict[str, list[tuple[int, float, bool]]] = {}
    for call, rows in report.flows:
        for row in rows:
            if row.grad_norm > 0 and math.isfinite(row.grad_norm):
                series.setdefault(row.module, []).append((call, row.grad_norm, bool(row.flag)))
    if len(series) > MAX_LINES:
        by_last = sorted(series, key=lambda m: series[m][-1][1])
        keep = set(by_last[: MAX_LINES // 2] + by_last[-MAX_LINES // 2 :])
        series = {m: s for m, s in series.items() if m in keep}
    drawing = Drawing()
    x0, x1 = _LEFT, _WIDTH - _RIGHT
    y0, y1 = _TOP, _HEIGHT - _BOTTOM
    drawing.rules += [(x0, y1, x1, y1, "#000000"), (x0, y0, x0, y1, "#000000")]
    drawing.texts.append((x0, 24, "gradient norm per module (log scale)", "start", "#000000"))
    drawing.texts.append(((x0 + x1) / 2, _HEIGHT - 12, "backward call", "middle", "#000000"))
    if not series:
        drawing.texts.append(((x0 + x1) / 2, (y0 + y1) / 2, "no gradient", "middle", "#000000"))
        return drawing, 0
    points = [p for s in series.values() for p in s]
    calls = [p[0] for p in points]
    logs = [math.log10(p[1]) for p in points]
    c_lo, c_hi = min(calls), max(calls)
    l_lo, l_hi = math.floor(min(logs)), math.ceil(max(logs))
    if l_hi == l_lo:
        l_hi += 1

    def x(call: int) -> float:
        return (x0 + x1) / 2 if c_hi == c_lo else x0 + (call - c_lo) / (c_hi - c_lo) * (x1 - x0)

    def y(norm: float) -> float:
        return y1 - (math.log10(norm) - l_lo) / (l_hi - l_lo) * (y1 - y0)

    step = max(1, math.ceil((l_hi - l_lo) / 8))
    for exponent in range(l_lo, l_hi + 1, step):
        at = y(10.0**exponent)
        drawing.rules.append((x0, at, x1, at, "#dddddd"))
        drawing.texts.append((x0 - 6, at + 4, f"1e{exponent}", "end", "#000000"))
    for call in sorted({c_lo, c_hi, (c_lo + c_hi) // 2}):
        drawing.texts.append((x(call), y1 + 18, str(call), "middle", "#000000"))
    for i, (module, s) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        drawing.lines.append(([(x(c), y(n)) for c, n, _ in s], color))
        drawing.rings += [(x(c), y(n), color) for c, n, flagged in s if flagged]
        drawing.texts.append((x1 + 16, y0 + 14 * i + 4, printable(module)[:36], "start", color))
        drawing.rules.append((x1 + 4, y0 + 14 * i, x1 + 12, y0 + 14 * i, color))
    return drawing, len(series)


def to_svg(drawing: Drawing) -> str:
    """The drawing as an SVG document."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{_WIDTH}" height="{_HEIGHT}" fill="#ffffff"/>',
    ]
    for ax, ay, bx, by, color in drawing.rules:
        parts.append(
            f'<line x1="{ax:.1f}" y1="{ay:.1f}" x2="{bx:.1f}" y2="{by:.1f}" stroke="{color}"/>'
        )
    for points, color in drawing.lines:
        coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline class="module" points="{coords}" fill="none" stroke="{color}"/>')
        if len(points) == 1:
            px, py = points[0]
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{color}"/>')
    for px, py, color in drawing.rings:
        parts.append(
            f'<circle class="flagged" cx="{px:.1f}" cy="{py:.1f}" r="5" fill="none" '
            f'stroke="{color}"/>'
        )
    for px, py, text, anchor, color in drawing.texts:
        parts.append(
            f'<text x="{px:.1f}" y="{py:.1f}" text-anchor="{anchor}" fill="{color}">'
            f"{escape(text)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


_PIL_ANCHORS = {"start": "ls", "middle": "ms", "end": "rs"}


def to_png(drawing: Drawing, path: str) -> None:
    """Write the drawing as a PNG file (Pillow)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (_WIDTH, _HEIGHT), "#ffffff")
    pen = ImageDraw.Draw(image)
    for ax, ay, bx, by, color in drawing.rules:
        pen.line([(ax, ay), (bx, by)], fill=color)
    for points, color in drawing.lines:
        if len(points) == 1:
            px, py = points[0]
            pen.ellipse([px - 2.5, py - 2.5, px + 2.5, py + 2.5], fill=color)
        else:
            pen.line(points, fill=color, width=2)
    for px, py, color in drawing.rings:
        pen.ellipse([px - 5, py - 5, px + 5, py + 5], outline=color)
    for px, py, text, anchor, color in drawing.texts:
        pen.text(
            (px, py), text, fill=color, anchor={"start": "ls", "middle": "ms", "end": "rs"}[anchor]
        )
    with open(path, "wb") as file:  # through a link or device, never replacing it
        image.save(file, format="PNG")


def save_plot(report: GradsReport, path: str | os.PathLike[str]) -> int:
    """Draw ``report``'s flow to ``path`` (``.svg`` or ``.png``); how many modules it drew."""
    drawing, modules = layout(report)
    if str(path).lower().endswith(".png"):
        to_png(drawing, str(path))
    else:
        with open(path, "w", encoding="utf-8") as file:
            file.write(to_svg(drawing))
    return modules
