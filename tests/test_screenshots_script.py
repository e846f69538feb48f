"""``scripts/screenshots.py``: the PNGs rsvg-convert makes of Textual's SVGs keep every space."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "screenshots.py"

# One run as Textual writes it: no-break spaces at its start, its length fixed.
LINE = (
    '<svg class="rich-terminal" viewBox="0 0 300 40" xmlns="http://www.w3.org/2000/svg">'
    '<text x="0" y="20" textLength="61" style="font-family: monospace; font-size: 20px">'
    "&#160;&#160;#25</text></svg>"
)


def screenshots() -> ModuleType:
    spec = importlib.util.spec_from_file_location("screenshots", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leftmost_ink(svg: Path) -> float:
    """Where the drawn text starts: rsvg-convert's own SVG draws each glyph as a path."""
    drawn = subprocess.run(
        ["rsvg-convert", "-f", "svg", str(svg)], capture_output=True, text=True, check=True
    ).stdout
    paths = re.findall(r'<path[^>]* d="([^"]+)"', drawn)
    assert paths, drawn
    # the lines of the glyphs' outlines (cairo ends a path with a bare move to the origin)
    return min(float(x) for d in paths for x in re.findall(r"L (-?[\d.]+) ", d))


def test_rsvg_keeps_a_runs_leading_spaces_once_marked(tmp_path: Path) -> None:
    if not shutil.which("rsvg-convert"):
        pytest.skip("rsvg-convert (librsvg2-bin) is not installed")
    plain = tmp_path / "plain.svg"
    plain.write_text(LINE, encoding="utf-8")
    marked = tmp_path / "marked.svg"
    marked.write_text(LINE, encoding="utf-8")
    screenshots().keep_spaces(marked)
    # two monospace cells of 20 px text are about 24 px; unmarked, '#' is drawn at 0
    assert leftmost_ink(plain) < 5
    assert leftmost_ink(marked) > 20


def test_marking_is_done_once_and_refuses_what_is_not_an_svg(tmp_path: Path) -> None:
    module = screenshots()
    svg = tmp_path / "s.svg"
    svg.write_text(LINE, encoding="utf-8")
    module.keep_spaces(svg)
    module.keep_spaces(svg)
    assert svg.read_text().count('xml:space="preserve"') == 1
    other = tmp_path / "o.svg"
    other.write_text("<html></html>", encoding="utf-8")
    with pytest.raises(ValueError, match="no <svg> element"):
        module.keep_spaces(other)


def test_the_tuis_screenshots_are_marked() -> None:
    for svg in sorted((ROOT / "screenshots").glob("*.svg")):
        head = svg.read_text(encoding="utf-8")[:500]
        if 'class="rich-terminal"' in head:  # Textual's, not Graphviz's
            assert 'xml:space="preserve"' in head, svg.name
