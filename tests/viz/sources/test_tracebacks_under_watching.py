"""A PyTorch program's traceback under the library's context managers is plain Python's
(Note [A traceback as without us] in ``autograd_viz/sources/tracebacks.py``).

A child process runs each small program plainly and inside each public context
manager that arms our modes or hooks, and prints each traceback; the frames
(file, line, function) and the error must be those of the plain run. The one
difference allowed is torch's ``Module._call_impl``: our global module hooks
send it down its path with hooks, whose frames (``_call_impl``, ``inner``) are
torch's lines for that path. The exceptions must be the very objects the
program raised, their chains intact.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]

CHILD = '''
import contextlib
import json
import sys
import traceback

import torch

import autograd_viz
from autograd_viz.nan.watch import nan_checks
from autograd_viz.sources.pytorch import watch_torch
from autograd_viz.nan.forward.checks import TorchNanChecker

RAISED = []


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) @ torch.ones(3, 3)


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("no gradient for Doubled")


def in_forward():
    Net()(torch.ones(2, 4)).sum().backward()


def caused():
    x = torch.ones(2, 4, requires_grad=True)
    try:
        x @ torch.ones(3, 3)
    except RuntimeError as exc:
        error = ValueError("the shapes are wrong")
        RAISED.append((error, exc))
        raise error from exc


def during_handling():
    try:
        torch.ones(2).view(3)
    except RuntimeError:
        torch.ones(2, 4) @ torch.ones(3, 3)


def in_backward():
    x = torch.ones(3, requires_grad=True)
    Doubled.apply(x).sum().backward()


def in_a_hook():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda grad: 1 / 0)
    y.sum().backward()


def nan_in_forward():
    x = torch.zeros(3, requires_grad=True)
    torch.log(x).sum().backward()


def nan_in_backward():
    x = torch.ones(3, requires_grad=True)
    (torch.sqrt(x - 1) * 0).sum().backward()


@contextlib.contextmanager
def watched_by_record():
    with watch_torch(), autograd_viz.record():
        yield


CONTEXTS = {
    "plain": contextlib.nullcontext,
    "watch_nan": autograd_viz.watch_nan,
    "record": autograd_viz.record,
    "nan_checks": nan_checks,
    "TorchNanChecker": TorchNanChecker,
    "watch_torch": watched_by_record,
    "first": lambda: autograd_viz.watch_nan(first=True),
    "anomaly": torch.autograd.detect_anomaly,
}


def shown(exc):
    """What Python prints for ``exc``, once it is checked to be what the program raised."""
    if RAISED:
        error, cause = RAISED.pop()
        assert exc is error and exc.__cause__ is cause, "not the program's exception"
        assert exc.args == ("the shapes are wrong",) and exc.__suppress_context__
    return "".join(traceback.format_exception(exc))


def run(program, context):
    try:
        with CONTEXTS[context]():
            program()
    except Exception as exc:
        return shown(exc)
    return "nothing raised"


def live(program):
    with autograd_viz.LiveSession(program) as session:
        session.run_to_end(timeout=120)
    return shown(session.error)


if sys.argv[1] == "uncaught":  # left to Python to print, as it reaches the top
    with CONTEXTS[sys.argv[2]]():
        caused()
printed = {}
for context in sys.argv[2:]:
    for name in sys.argv[1].split(","):
        printed[f"{context} {name}"] = run(globals()[name], context)
        if context == "plain":
            printed[f"live {name}"] = live(globals()[name])
print(json.dumps(printed))
'''

_FRAME = re.compile(r'^  File "([^"]*)", line (\d+), in (.*)$')
_ERROR = re.compile(r"^[\w.]+(Error|Exception)\b.*$|^The above exception|^During handling")
_HOOKS_PATH = ("_call_impl", "inner")
"""torch's frames of ``Module._call_impl`` that differ with global module hooks on."""


def frames(printed: str) -> list[str]:
    """Each frame as ``file:line:function``, and each error and chain line, in order."""
    lines = []
    for line in printed.splitlines():
        frame = _FRAME.match(line)
        if frame is not None:
            path, number, function = frame.groups()
            module_call = path.endswith(os.path.join("nn", "modules", "module.py"))
            if not (module_call and function in _HOOKS_PATH):
                lines.append(f"{path}:{number}:{function}")
        elif _ERROR.match(line):
            lines.append(line)
    return lines


def run_child(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The child program run with ``args``; with ``-m`` first, ``args`` are the command."""
    script = tmp_path / "program.py"
    script.write_text(CHILD)
    command = list(args) if args[0] == "-m" else [str(script), *args]
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        timeout=300,
        check=False,
    )


PROGRAMS = ["in_forward", "caused", "during_handling", "in_backward", "in_a_hook"]
CONTEXTS = ["watch_nan", "record", "nan_checks", "TorchNanChecker", "watch_torch", "first"]


def test_a_programs_traceback_is_the_same_under_each_context_manager(tmp_path: Path) -> None:
    child = run_child(tmp_path, ",".join(PROGRAMS), "plain", *CONTEXTS)
    assert child.returncode == 0, child.stderr
    printed = json.loads(child.stdout.splitlines()[-1])
    script = str(tmp_path / "program.py")
    for name in PROGRAMS:
        expected = frames(printed[f"plain {name}"])
        assert sum(script in line for line in expected) >= 2, printed[f"plain {name}"]
        assert not any("autograd_viz" in line for line in expected)
        for context in CONTEXTS:
            assert frames(printed[f"{context} {name}"]) == expected, (context, name)
        # A live session's target runs on its thread: its traceback starts at the program.
        from_program = [line for line in expected if not line.endswith(":run")]
        assert frames(printed[f"live {name}"]) == from_program, name
    # The chains are printed whole: the cause's and the context's own frames.
    assert "The above exception was the direct cause" in printed["watch_nan caused"]
    assert "During handling of the above exception" in printed["watch_nan during_handling"]


def test_a_check_stopping_the_program_points_at_its_line(tmp_path: Path) -> None:
    """``first=True`` raises at the program's line that made the NaN, in the forward; in the
    backward its traceback is that of PyTorch's anomaly mode raising there."""
    child = run_child(tmp_path, "nan_in_forward,nan_in_backward", "plain", "first", "anomaly")
    assert child.returncode == 0, child.stderr
    printed = json.loads(child.stdout.splitlines()[-1])
    assert printed["plain nan_in_forward"] == "nothing raised"
    forward = frames(printed["first nan_in_forward"])
    script = str(tmp_path / "program.py")
    assert forward[-2].startswith(f"{script}:") and forward[-2].endswith(":nan_in_forward")
    assert "    torch.log(x).sum().backward()\n" in printed["first nan_in_forward"]
    assert "NonFiniteError: Function 'LogBackward0' produced inf values" in forward[-1]
    backward = frames(printed["first nan_in_backward"])
    assert backward[:-1] == frames(printed["anomaly nan_in_backward"])[:-1]
    assert backward[-2].endswith(":_engine_run_backward")
    assert backward[-1].endswith("Function 'SqrtBackward0' returned nan values in its 0th output.")
    for text in (printed["first nan_in_forward"], printed["first nan_in_backward"]):
        assert "autograd_viz/" not in text.split("NonFiniteError")[0]


def test_an_uncaught_error_reaches_the_top_as_without_the_block(tmp_path: Path) -> None:
    """Printed by Python as it leaves the program, or by ``autograd-viz nan``: the same."""
    plain = run_child(tmp_path, "uncaught", "plain")
    watched = run_child(tmp_path, "uncaught", "watch_nan")
    cli = run_child(tmp_path, "-m", "autograd_viz", "nan", "program.py", "uncaught", "plain")
    assert plain.returncode == watched.returncode == 1
    assert cli.returncode == 4, cli.stderr  # the script failed before there was anything
    expected = frames(plain.stderr)
    assert expected[-1] == "ValueError: the shapes are wrong"
    assert expected[1] == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x4 and 3x3)"
    assert sum(str(tmp_path / "program.py") in line for line in expected) == 3, plain.stderr
    assert frames(watched.stderr) == expected
    assert frames(cli.stderr.split("autograd-viz: error:")[0]) == expected
