"""The package layout: dependencies between rooms run one way.

``cli → tui → draw, nan, timeline → live → launch → sources → trace → engine``: a room
may import from rooms below it, never from a room above or beside it, and
``engine`` imports nothing of ``autograd_viz``. Imports inside functions count
too: a lazy import is still a dependency. ``trace`` is plain data: it loads,
replays and validates with no engine, so it imports nothing of ``engine``
but the scheduler's order, which replay shares with the engine; the views
(``draw``, ``timeline``) read trace types only, never a source, ``live`` or the
engine; and what ``autograd_viz`` takes from ``engine`` is public (no name or
module that starts with an underscore).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RANKS = {
    "engine": 0,
    "version": 0,
    "trace": 1,
    "sources": 2,
    "recording": 2.5,  # Note [The Recorder's floor]
    "launch": 3,  # runs a script as python does: under a live session, and under each command
    "live": 4,
    "draw": 5,
    "nan": 5,
    "grads": 5,
    "timeline": 5,
    "tui": 6,
    "cli": 7,
    "autograd_viz": 8,  # the package's own __init__ and __main__: the public facade
}
"""A room may import rooms of a strictly lower rank (or itself)."""

VIEWS = ("draw", "timeline")
"""Rooms that read trace types only: never a source, ``live``, ``launch`` or the engine."""

VIEW_MODULES = ("autograd_viz.nan.report", "autograd_viz.nan.text", "autograd_viz.grads.report")
"""Views inside other rooms, held to the same rule: the NaN and gradient reports."""

APART = {("trace", "engine")} | {
    (view, room) for view in VIEWS for room in ("sources", "live", "launch", "engine")
}
"""``(room, lower room)``: a room that may not import that one although it is lower."""

ALLOWED_APART = {("trace", "engine.scheduler"), ("trace", "engine.naming")}
"""Modules a room of :data:`APART` may import all the same. Replay rebuilds the ready
queues with the engine's own scheduler (its order written once), and the reports name
ops as anomaly mode does (engine.naming); those modules need nothing but the standard
library."""


RECORDING = ("autograd_viz.trace.recorder", "autograd_viz.trace.recording")
"""The modules of the room ``recording``: the Recorder and its recording, in trace/."""

# Note [The Recorder's floor]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The Recorder lives in trace/ (it builds the Trace) but listens to the sources:
# it subscribes to engine.events, snapshots our engine's graph through
# sources.engine and arms every source, while the sources build trace records
# (NodeInfo, Scope, TensorSummary). So trace/ holds two floors: its records,
# file and replay below the sources, which import nothing of engine but the
# scheduler, and the Recorder with its recording above them, which may.


def room_of(module: str) -> str | None:
    """``autograd_viz.draw.render.dot`` → ``draw``; ``engine.ops`` → ``engine``; others → None."""
    if module in RECORDING:
        return "recording"
    parts = module.split(".")
    if parts[0] == "engine":
        return "engine"
    if parts[0] != "autograd_viz":
        return None
    if len(parts) == 1 or parts[1] in ("__init__", "__main__", "drawing"):
        return "autograd_viz"
    return parts[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth, with the line it is on."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from autograd_viz import draw` imports the room draw
            if target == "autograd_viz":
                found += [(node.lineno, f"autograd_viz.{alias.name}") for alias in node.names]
    return found


def sources() -> list[Path]:
    return sorted(
        p for package in ("engine", "autograd_viz") for p in (ROOT / package).rglob("*.py")
    )


def violations() -> list[str]:
    bad = []
    for path in sources():
        here = room_of(module_name(path))
        assert here is not None and here in RANKS, f"{path}: a module outside every room"
        for line, target in imports(path):
            there = room_of(target)
            if there is None or there == here:
                continue
            if there not in RANKS:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}: not a room")
            elif RANKS[there] >= RANKS[here] or (
                (here, there) in APART and (here, target) not in ALLOWED_APART
            ):
                bad.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {target} ({there})")
    return bad


def private_engine_names(source: str) -> list[tuple[int, str]]:
    """What ``source`` takes from ``engine`` that is private (``engine._x``, ``from engine
    import _y``), with the line it is on."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom) and not node.level:
            modules = [node.module or ""]
            names = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            if module.split(".")[0] == "engine":
                parts = (*module.split("."), *names)
                found += [
                    (node.lineno, p) for p in parts if p.startswith("_") and p != "__version__"
                ]
    return found


def test_every_module_belongs_to_a_room_and_imports_only_rooms_below_it() -> None:
    assert violations() == []


def test_the_engine_never_imports_autograd_viz() -> None:
    for path in (ROOT / "engine").rglob("*.py"):
        for line, target in imports(path):
            assert not target.startswith("autograd_viz"), f"{path}:{line} imports {target}"


def test_autograd_viz_takes_only_public_names_from_the_engine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} takes {name}"
        for path in sorted((ROOT / "autograd_viz").rglob("*.py"))
        for line, name in private_engine_names(path.read_text(encoding="utf-8"))
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("from engine.graph_task import _graph_task_ids", "_graph_task_ids"),
        ("from engine.events import HUB, _thread_name", "_thread_name"),
        ("from engine.ops import _core", "_core"),
        ("def f():\n    import engine._context", "_context"),
    ],
)
def test_the_private_name_check_catches_one(source: str, name: str) -> None:
    assert [found for _, found in private_engine_names(source)] == [name]
    assert private_engine_names("import engine\nfrom engine.events import HUB, Event") == []


@pytest.mark.parametrize(
    ("room", "source", "target"),
    [
        ("engine", "engine/engine.py", "autograd_viz.trace"),
        ("trace", "autograd_viz/trace/replay.py", "engine.events"),
        ("trace", "autograd_viz/trace/records.py", "autograd_viz.trace.recorder"),
        ("sources", "autograd_viz/trace/recorder.py", "autograd_viz.live"),
        ("draw", "autograd_viz/draw/render/dot.py", "autograd_viz.nan.report"),
        ("tui", "autograd_viz/tui/app.py", "autograd_viz.cli.base"),
        ("draw", "autograd_viz/draw/model/graph_view.py", "autograd_viz.sources.engine"),
        ("draw", "autograd_viz/draw/render/dot_render.py", "autograd_viz.live"),
        ("draw", "autograd_viz/draw/model/tree.py", "engine.graph"),
        ("timeline", "autograd_viz/timeline.py", "autograd_viz.launch.processes"),
    ],
)
def test_the_check_catches_an_import_upward_or_sideways(
    room: str, source: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = imports

    def with_one_more(path: Path) -> list[tuple[int, str]]:
        found = real(path)
        return [*found, (0, target)] if path == ROOT / source else found

    monkeypatch.setitem(globals(), "imports", with_one_more)
    assert any(f"imports {target}" in v and source in v for v in violations()), room


def test_the_reports_read_trace_types_only() -> None:
    # The NaN and gradient reports are views, kept in the rooms of what they report on.
    bad = []
    for module in VIEW_MODULES:
        path = ROOT / (module.replace(".", "/") + ".py")
        for line, target in imports(path):
            there = room_of(target)
            allowed = there in (None, "trace", "version", room_of(module)) or target in {
                allowed for _, allowed in ALLOWED_APART
            }
            if not allowed or target.startswith("autograd_viz.nan.forward"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_the_view_model_never_imports_its_renderers() -> None:
    # draw/model chooses what a picture shows; draw/render draws it. A choice that needs
    # a renderer belongs in the renderer.
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in sorted((ROOT / "autograd_viz" / "draw" / "model").rglob("*.py"))
        for line, target in imports(path)
        if target.startswith("autograd_viz.draw.render")
    ]
    assert not bad, "\n".join(bad)


def test_no_two_test_modules_share_a_file_name() -> None:
    # The tests have no packages (no __init__.py), so pytest imports each file by its
    # base name: two files of one name stop the whole suite at collection.
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test files that share a name: " + "; ".join(clashes)
