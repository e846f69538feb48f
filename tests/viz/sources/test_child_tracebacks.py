"""A watched child process's uncaught error prints plain Python's traceback
(Note [A child's uncaught error] in ``autograd_viz/launch/uncaught.py``).

A PyTorch program starts children whose forward or backward raises: a
``multiprocessing`` spawn or fork child (its error printed by ``Process._bootstrap``),
a ``python child.py`` subprocess (by ``sys.excepthook``), one whose thread
raises (by ``threading.excepthook``) and a ``torch.multiprocessing.spawn``
child (its error formatted for the parent, which raises it). Run plainly and
under ``record`` and ``nan``, each child prints the same frames (a backward
passes through the bridge's chokepoint under both; a forward through the NaN
checks' modes under ``nan``). A hook the program sets itself replaces ours.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.viz.sources.test_tracebacks_under_watching import frames

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """
import multiprocessing
import subprocess
import sys
import threading

import torch


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("no gradient for Doubled")


def in_backward():
    x = torch.ones(3, requires_grad=True)
    Doubled.apply(x).sum().backward()


def in_forward():
    x = torch.ones(2, 4, requires_grad=True)
    (torch.nn.Linear(4, 4)(x) @ torch.ones(3, 3)).sum().backward()


def in_thread():
    thread = threading.Thread(target=in_backward, name="worker")
    thread.start()
    thread.join()


def own_hook():
    sys.excepthook = lambda kind, exc, tb: print("own hook:", kind.__name__, file=sys.stderr)
    in_backward()


def ranked(rank):
    in_forward()


def said(what):
    print(f"=== {what}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "child":
        globals()[sys.argv[2]]()
        sys.exit(0)
    for start in ("spawn", "fork"):
        said(start)
        child = multiprocessing.get_context(start).Process(target=in_backward)
        child.start()
        child.join()
    for name in ("in_backward", "in_thread", "own_hook"):
        said(name)
        subprocess.run([sys.executable, __file__, "child", name], check=False)
    said("torch.multiprocessing.spawn")
    torch.multiprocessing.spawn(ranked, nprocs=1)
"""

CHILDREN = ["spawn", "fork", "in_backward", "in_thread", "own_hook", "torch.multiprocessing.spawn"]


def printed(tmp_path: Path, *command: str) -> dict[str, str]:
    """What each child printed (and, last, the parent's error), by the child's name, with
    ``tmp_path`` written ``<dir>``."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    run = subprocess.run(
        [sys.executable, *command, "program.py", "parent"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert run.returncode != 0, run.stderr  # the last child's error ends the parent
    parts = run.stderr.replace(str(tmp_path), "<dir>").split("=== ")[1:]
    assert [part.splitlines()[0] for part in parts] == CHILDREN, run.stderr
    return {part.splitlines()[0]: part.split("autograd-viz: error:")[0] for part in parts}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return printed(tmp_path_factory.mktemp("plain"))


@pytest.mark.parametrize("command", ["record", "nan"])
def test_a_watched_childs_uncaught_error_prints_plain_pythons_frames(
    tmp_path: Path, plain: dict[str, str], command: str
) -> None:
    watched = printed(tmp_path, "-m", "autograd_viz", command)
    script = "<dir>/program.py"
    for child in ["spawn", "fork", "in_backward", "in_thread", "torch.multiprocessing.spawn"]:
        expected = frames(plain[child])
        assert sum(script in line for line in expected) >= 2, plain[child]
        assert not any("autograd_viz" in line for line in expected)
        assert frames(watched[child]) == expected, (command, child, watched[child])
    assert "Exception in thread worker" in watched["in_thread"]
    # The program's own hook, set after ours, is the one Python calls.
    assert plain["own_hook"].strip().endswith("own hook: ValueError")
    assert watched["own_hook"].strip().endswith("own hook: ValueError")


def _through_ours() -> dict[str, object]:
    """A function whose frame counts as ours: compiled as a file of the package."""
    import autograd_viz

    namespace: dict[str, object] = {}
    path = os.path.join(os.path.dirname(autograd_viz.__file__), "sources", "_through.py")
    exec(compile("def through_us(f):\n    return f()\n", path, "exec"), namespace)
    return namespace


def _raised() -> ValueError:
    through_us = _through_ours()["through_us"]

    def program() -> None:
        raise ValueError("the program's") from KeyError("its cause")

    def calls() -> None:
        through_us(program)  # type: ignore[operator]

    try:
        calls()
    except ValueError as exc:
        return exc
    raise AssertionError("nothing raised")


def _functions(tb: object) -> list[str]:
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)  # type: ignore[attr-defined]
        tb = tb.tb_next  # type: ignore[attr-defined]
    return names


def test_the_hooks_hand_on_the_programs_own_exception_trimmed() -> None:
    import threading

    from autograd_viz.launch.uncaught import (
        _trimming_excepthook,
        _trimming_thread_excepthook,
    )

    exc = _raised()
    cause = exc.__cause__
    assert "through_us" in _functions(exc.__traceback__)
    handed: list[tuple[object, ...]] = []
    _trimming_excepthook(lambda *args: handed.append(args))(ValueError, exc, exc.__traceback__)
    kind, value, tb = handed.pop()
    assert kind is ValueError and value is exc and tb is exc.__traceback__
    assert exc.args == ("the program's",) and exc.__cause__ is cause
    assert _functions(tb) == ["_raised", "calls", "program"]

    exc = _raised()
    thread = threading.current_thread()
    args = threading.ExceptHookArgs([ValueError, exc, exc.__traceback__, thread])
    given_args: list[Any] = []
    _trimming_thread_excepthook(given_args.append)(args)
    given = given_args.pop()
    assert given.exc_value is exc and given.thread is thread and given.exc_type is ValueError
    assert _functions(given.exc_traceback) == ["_raised", "calls", "program"]
    # A traceback that is not the exception's own is handed on as it came.
    exc = _raised()
    other = _raised().__traceback__
    _trimming_excepthook(lambda *args: handed.append(args))(ValueError, exc, other)
    assert handed.pop()[2] is other and "through_us" in _functions(exc.__traceback__)
