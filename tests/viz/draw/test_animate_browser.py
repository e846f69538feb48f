"""The animation page in a real browser: Chromium, headless, driven by Playwright.

Skipped where Chromium (Debian's ``chromium``) or Playwright (the dev extra) is
missing. The page is loaded from a file, as a user opens it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import autograd_viz
import engine
from autograd_viz.draw.render.animate import animate, describe_step
from autograd_viz.trace import Trace
from tests.viz.dotting import needs_dot

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    needs_dot,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed"),
]

HOSTILE = '<img src=x onerror="window.hacked=1"></text><script>window.hacked=2</script>'


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def opened(browser: Any, path: Path) -> tuple[Any, list[str]]:
    """The page at ``path``, and the errors it reports (uncaught, console, dialogs)."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(path.as_uri())
    return page, errors


def square(name: str = "a") -> Trace:
    a = engine.tensor([2.0, 3.0], requires_grad=True, name=name)
    with autograd_viz.record() as trace:
        (a * a).sum().backward()
    return trace


def fills(page: Any) -> list[str]:
    """Each drawn node's fill, in order."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('#stage g.node')).map(
            (g) => (g.querySelector('path, polygon') || {getAttribute: () => ''})
                .getAttribute('fill'))"""
    )


def shown(page: Any) -> tuple[int, str]:
    return int(page.input_value("#slider")), page.text_content("#caption") or ""


def test_the_player_steps_plays_and_pauses(browser: Any, tmp_path: Path) -> None:
    trace = square()
    result = animate(trace, tmp_path / "run.html", frame_ms=300)
    captions = [describe_step(trace, step) for step in range(len(trace) + 1)]
    page, errors = opened(browser, result.path)
    seen = [shown(page)]
    start = fills(page)
    page.click("#forward")
    seen.append(shown(page))
    for key in ("ArrowRight", "ArrowLeft", "End"):
        page.keyboard.press(key)
        seen.append(shown(page))
    end = fills(page)
    page.keyboard.press("Home")
    seen.append(shown(page))
    assert fills(page) == start and end != start  # back at the start, every change undone
    page.fill("#slider", "3")  # a focused slider keeps its own arrows
    seen.append(shown(page))
    page.focus("#slider")
    page.keyboard.press("ArrowRight")
    seen.append(shown(page))
    expected = [0, 1, 2, 1, len(trace), 0, 3, 4]
    assert seen == [(i, captions[i]) for i in expected]
    page.evaluate("() => document.activeElement.blur()")
    page.select_option("#speed", "4")
    page.keyboard.press(" ")
    assert page.text_content("#play") == "Pause"
    page.wait_for_function("() => document.querySelector('#play').textContent === 'Play'")
    assert shown(page) == (len(trace), captions[-1])  # it stopped by itself at the last step
    assert errors == []


def test_every_control_shows_its_symbol(browser: Any, tmp_path: Path) -> None:
    """Symbols are drawn, not taken from a font: a font without them showed empty boxes."""
    result = animate(square(), tmp_path / "run.html")
    page, errors = opened(browser, result.path)
    for control in ("first", "back", "play", "forward", "last"):
        box = page.locator(f"#{control} svg.icon path").bounding_box()
        assert box is not None and box["width"] > 4 and box["height"] > 4, control
    page.keyboard.press(" ")
    box = page.locator("#play svg.icon path").bounding_box()
    assert box is not None and box["width"] > 4
    assert errors == []


def test_a_hostile_name_is_text_on_the_page(browser: Any, tmp_path: Path) -> None:
    result = animate(square(HOSTILE), tmp_path / "run.html", title=HOSTILE)
    page, errors = opened(browser, result.path)
    page.keyboard.press("End")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("Home")
    assert page.evaluate("() => window.hacked") is None
    assert page.locator("#stage img, #stage script, #stage foreignObject").count() == 0
    drawn = page.evaluate("() => document.querySelector('#stage').textContent")
    assert HOSTILE[:40] in drawn  # the name, as text in the drawing
    assert HOSTILE in page.title()
    assert errors == []


def wide(leaves: int = 40) -> Trace:
    """``leaves`` parameters side by side: a drawing many times wider than the page."""
    ws = [engine.tensor([1.0, 2.0], requires_grad=True, name=f"w{i}") for i in range(leaves)]
    with autograd_viz.record() as trace:
        engine.stack(ws).sum().backward()
    return trace


def in_sight(page: Any, selector: str) -> bool:
    """Whether the element is wholly inside the stage's part of the window, below the bar."""
    return bool(
        page.evaluate(
            """(selector) => {
                const node = document.querySelector(selector);
                const box = node.getBoundingClientRect();
                const stage = document.querySelector('#stage').getBoundingClientRect();
                const bar = document.querySelector('.bar').getBoundingClientRect();
                return box.left >= stage.left && box.right <= stage.right
                    && box.top >= Math.max(stage.top, bar.bottom)
                    && box.bottom <= Math.min(stage.bottom, window.innerHeight);
            }""",
            selector,
        )
    )


def test_a_drawing_too_wide_to_read_opens_at_its_size_and_follows_the_running_node(
    browser: Any, tmp_path: Path
) -> None:
    """Fitted to the page, a drawing many times wider than it has unreadable labels: it opens
    at its own size, the running node kept in sight at each step; Z fits it to the page."""
    result = animate(wide(), tmp_path / "run.html")
    page, errors = opened(browser, result.path)
    svg_width = "() => document.querySelector('#stage svg').getBoundingClientRect().width"
    stage_width = "() => document.querySelector('#stage').clientWidth"
    natural = page.evaluate("() => document.querySelector('#stage svg').width.baseVal.value")
    assert natural > 2 * page.evaluate(stage_width)
    assert page.evaluate(svg_width) == pytest.approx(natural, abs=1)
    assert page.get_attribute("#zoom", "aria-pressed") == "true"
    running = 0
    for _ in range(result.frames - 1):
        page.keyboard.press("ArrowRight")
        selector = "#stage g.node.running"
        if page.locator(selector).count():
            running += 1
            assert in_sight(page, selector), shown(page)
    assert running > 10
    page.keyboard.press("z")
    assert page.evaluate(svg_width) <= page.evaluate(stage_width)
    assert page.get_attribute("#zoom", "aria-pressed") == "false"
    page.click("#zoom")
    assert page.evaluate(svg_width) == pytest.approx(natural, abs=1)
    assert errors == []


def test_a_drawing_that_fits_opens_fitted(browser: Any, tmp_path: Path) -> None:
    result = animate(square(), tmp_path / "run.html")
    page, errors = opened(browser, result.path)
    assert page.get_attribute("#zoom", "aria-pressed") == "false"
    page.keyboard.press("z")
    assert page.get_attribute("#zoom", "aria-pressed") == "true"
    assert errors == []


def tall(steps: int = 40) -> Trace:
    """A chain of ``steps`` multiplications: a drawing narrower than the page, many times taller."""
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(steps):
        y = y * 1.0001
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


def test_a_tall_drawing_fitted_to_the_page_follows_the_running_node(
    browser: Any, tmp_path: Path
) -> None:
    """Fitted to the page's width, a tall model still runs far below the window: the page
    scrolls to the running node at every step. The legend is folded away until L."""
    result = animate(tall(), tmp_path / "run.html")
    page, errors = opened(browser, result.path)
    assert page.get_attribute("#zoom", "aria-pressed") == "false"  # fitted
    stage = "() => document.querySelector('#stage').getBoundingClientRect().height"
    assert page.evaluate(stage) > 2 * page.viewport_size["height"]
    assert page.locator("#stage g.node.legend").count() == 1
    assert not page.locator("#stage g.node.legend").is_visible()
    running = 0
    for _ in range(result.frames - 1):
        page.keyboard.press("ArrowRight")
        selector = "#stage g.node.running"
        if page.locator(selector).count():
            running += 1
            assert in_sight(page, selector), shown(page)
    assert running > 30
    page.keyboard.press("l")
    assert page.locator("#stage g.node.legend").is_visible()
    assert page.get_attribute("#legend-toggle", "aria-pressed") == "true"
    page.click("#legend-toggle")
    assert not page.locator("#stage g.node.legend").is_visible()
    assert errors == []


def test_a_model_whose_calls_open_in_turn_keeps_the_running_node_in_sight(
    browser: Any, tmp_path: Path
) -> None:
    """As on a real model (a GPT-2, a ViT): the call being worked on opens, so the stage
    changes drawing again and again, each as tall as the model; in the default view (fitted,
    the legend folded away) the running node is in sight at every step, in a small window
    too, where the controls wrap onto more lines."""
    from tests.viz.draw.test_modules import transformer_trace

    result = animate(transformer_trace(layers=6), tmp_path / "run.html")
    errors: list[str] = []
    for size in ({"width": 1280, "height": 720}, {"width": 640, "height": 480}):
        page = browser.new_page(viewport=size)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(result.path.as_uri())
        assert page.get_attribute("#zoom", "aria-pressed") == "false"
        assert not page.locator("#stage g.node.legend").is_visible()
        drawings: set[str] = set()
        running = tall = 0
        for _ in range(result.frames - 1):
            page.keyboard.press("ArrowRight")
            drawings.add(
                page.evaluate(
                    "() => document.querySelector('#stage svg').getAttribute('viewBox')"
                    " + document.querySelectorAll('#stage g.node').length"
                )
            )
            tall += (
                page.evaluate(
                    "() => document.querySelector('#stage').getBoundingClientRect().height"
                )
                > 2 * size["height"]
            )
            selector = "#stage g.node.running"
            if page.locator(selector).count():
                running += 1
                assert in_sight(page, selector), (size, shown(page))
        assert len(drawings) > 5 and running > 50 and tall > result.frames // 2
        assert errors == []
        page.close()
