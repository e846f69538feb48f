"""Pictures of hostile shapes: many siblings, deep nesting, escapes in names, a stopped dot.

* 400 sibling module calls that do not fold are 400 boxes side by side: the
  default picture, and ``--expand`` of a call holding them, keep to the box
  budget and say what they leave out (Note [Siblings count in the budget]).
* Module calls nested 1,100 deep draw at most ``MAX_NESTING`` frames one inside
  another, without a RecursionError, and say so.
* A module named ``\\N\\G\\L`` (a valid PyTorch name) is shown as written in
  every tooltip, never expanded by Graphviz.
* SIGTERM or SIGINT to ``dot`` or ``animate`` ends the Graphviz process they
  started (Note [No dot outlives us]).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.choosing import MAX_NESTING
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.tree import MAX_BOXES
from autograd_viz.draw.render import animate, dot
from autograd_viz.trace import Trace
from engine.ops.shape import stack
from tests.processes import sigint_as_at_a_terminal
from tests.viz.captions import check_notices
from tests.viz.dotting import needs_dot

SIBLINGS = 400


def siblings_trace(parent: bool) -> Trace:
    """``SIBLINGS`` calls side by side, each on the same input, stacked at the end: alike
    calls, but not one after the other, so no fold; inside ``net`` when ``parent``."""
    x = engine.tensor(np.ones((1, 2)), requires_grad=True, name="x")
    outs = []
    with engine.scope("net", kind="Net") if parent else contextlib.nullcontext():
        for i in range(SIBLINGS):
            prefix = "net." if parent else ""
            w = engine.tensor(
                np.full((2, 2), 1.0 + i % 5), requires_grad=True, name=f"{prefix}m{i}.w"
            )
            with engine.scope(f"m{i}", kind="Layer"):
                outs.append((x @ w).tanh())
    with autograd_viz.record() as trace:
        stack(outs).sum().backward()
    return trace


def _view(trace: Trace) -> GraphView:
    return from_state(trace.state_at(len(trace)))


def _boxes(picture: GraphView) -> int:
    return sum(1 for n in picture.nodes.values() if n.box is not None)


def test_siblings_at_the_top_keep_the_default_picture_to_the_budget() -> None:
    view = _view(siblings_trace(parent=False))
    picture = showing.show(view)
    assert len(picture.nodes) <= MAX_BOXES and _boxes(picture) > 100
    (cut,) = [n for n in picture.notices if n.startswith("showing")]
    assert f"of {SIBLINGS + 2:,} boxes and nodes" in cut and "--max-nodes N" in cut
    check_notices(view, picture)
    # Asked for, they are all drawn.
    everything = showing.show(view, ViewOptions(max_nodes=10_000))
    assert _boxes(everything) == SIBLINGS
    check_notices(view, everything)


def test_expanding_a_call_of_many_siblings_draws_them_closed_within_the_budget() -> None:
    view = _view(siblings_trace(parent=True))
    assert _boxes(showing.show(view)) == 1  # net, closed
    picture = showing.show(view, ViewOptions(expand=["net"]))
    assert len(picture.nodes) <= MAX_BOXES
    assert [c.name for c in picture.clusters.values()] == ["net"]  # no frame per call
    (cut,) = [n for n in picture.notices if n.startswith("showing")]
    assert "net holds more than 150 calls side by side, drawn closed" in cut
    check_notices(view, picture)
    wide = showing.show(view, ViewOptions(expand=["net"], max_nodes=10_000))
    assert _boxes(wide) == SIBLINGS and len(wide.clusters) == 1


def deep_trace(depth: int) -> Trace:
    """Module calls nested ``depth`` deep, with a node every 100 calls."""
    x = engine.tensor(np.ones((1, 2)), requires_grad=True, name="x")
    with contextlib.ExitStack() as stack:
        for i in range(depth):
            stack.enter_context(engine.scope(f"d{i}", kind="Deep"))
            if i % 100 == 0:
                x = x.tanh()
        y = (x * 2).sum()
    with autograd_viz.record() as trace:
        y.backward()
    return trace


def _nesting(picture: GraphView) -> int:
    deepest = 0
    for key in picture.clusters:
        depth, current = 0, picture.clusters.get(key)
        while current is not None:
            depth += 1
            current = picture.clusters.get(current.parent) if current.parent else None
        deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize("options", [{}, {"level": 5000}, {"expand": ["d0"]}])
def test_calls_nested_deeper_than_python_recurses_draw_at_most_max_nesting_frames(
    options: dict[str, object], tmp_path: Path
) -> None:
    trace = deep_trace(1_100)
    view = _view(trace)
    picture = showing.show(view, ViewOptions(**options))  # type: ignore[arg-type]
    if options:  # asked for: as deep as frames go, and said
        assert _nesting(picture) == MAX_NESTING
        assert any(f"nest at most {MAX_NESTING} deep" in n for n in picture.notices)
    else:  # by default, no deeper than a page is tall (Note [A picture a page tall])
        assert 1 < _nesting(picture) <= MAX_NESTING
    source = dot.render(picture).source
    assert source.count("subgraph cluster_") >= _nesting(picture)
    if shutil.which("dot"):
        dot.save(dot.render(picture), tmp_path / "deep.svg")
        ET.parse(tmp_path / "deep.svg")


@needs_dot
def test_an_animation_of_calls_nested_1100_deep_is_written(tmp_path: Path) -> None:
    result = animate.animate(deep_trace(1_100), tmp_path / "deep.html", max_frames=3)
    assert result.frames == 3


def escaped_trace() -> Trace:
    x = engine.tensor(np.ones((1, 2)), requires_grad=True, name="x")
    w = engine.tensor(np.ones((2, 2)), requires_grad=True, name="w\\N\\G")
    with engine.scope("net", kind="Net"):
        with engine.scope("\\N\\G\\L", kind="K\\N"):
            y = (x @ w).tanh()
        with engine.scope("b", kind="K"):
            y = y.exp()
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


@needs_dot
@pytest.mark.parametrize("level", [None, 1])
def test_graphviz_escapes_in_a_module_name_are_text_in_every_tooltip(
    level: int | None, tmp_path: Path
) -> None:
    out = tmp_path / "t.svg"
    dot.save(autograd_viz.to_dot(escaped_trace(), level=level), out)
    titles = [
        a.get("{http://www.w3.org/1999/xlink}title", "")
        for a in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}a")
    ]
    named = [t for t in titles if "net." in t and "net.b" not in t.split(" → ")[-1]]
    assert named and all("net.\\N\\G\\L" in t for t in named), named
    assert any("(K\\N)" in t for t in titles)
    for title in titles:  # nothing Graphviz would have put there by itself
        assert "cluster_" not in title and "<TABLE>" not in title and "backward" not in title


# -- a stopped dot ---------------------------------------------------------------------


@pytest.fixture
def hanging_dot(tmp_path: Path) -> Path:
    """A ``dot`` that writes its pid to a file, then sleeps: the file's path."""
    pid_file = tmp_path / "dot.pid"
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return pid_file


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie nobody reaps is not running: read its state.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True


@pytest.mark.parametrize("command", ["dot", "animate"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_command_ends_its_graphviz_process(
    command: str, signum: int, hanging_dot: Path, tmp_path: Path
) -> None:
    trace_file = tmp_path / "t.jsonl"
    escaped_trace().save(trace_file)
    out = tmp_path / ("t.svg" if command == "dot" else "t.html")
    env = {**os.environ, "PATH": f"{hanging_dot.parent / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "autograd_viz", command, str(trace_file), "-o", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=sigint_as_at_a_terminal,  # noqa: PLW1509
    )
    pid = None
    try:
        for _ in range(1200):
            if hanging_dot.exists() and hanging_dot.read_text().strip():
                pid = int(hanging_dot.read_text())
                break
            assert process.poll() is None, "the command ended before starting dot"
            time.sleep(0.05)
        assert pid is not None and _alive(pid)
        time.sleep(0.5)  # stopped while dot works, not while it is being started
        process.send_signal(signum)
        process.wait(timeout=60)
        assert process.returncode in (-signum, 128 + signum, 130)
        assert not _alive(pid)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
