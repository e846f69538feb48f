"""PyTorch's own warnings under the NaN checks read as without them (Note [A warning keeps
its line] in ``autograd_viz/sources/pytorch/caller_line.py``).

The checks run every torch function and aten op from a frame of theirs; a
warning raised inside used to name that frame, be filtered by its module and
be shown once for every place together. Each program here runs twice in a
child, plainly and under ``autograd-viz nan``, and its standard error's warning
lines (place, category, text, and the source line shown under them) must be
the same.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]

PROGRAMS = {
    # A C++ warning (stacklevel 1) from a Tensor method, through the function mode.
    "cpp_warning": """
        import torch
        x = torch.ones(3, requires_grad=True)
        y = (x * 2).sum()
        value = float(y)
        y.backward()
        print(value, x.grad.tolist())
    """,
    # torch's Python warnings.warn(stacklevel=2), at two lines: once per line.
    "python_warning_two_lines": """
        import torch
        import torch.nn.functional as F
        x = torch.ones(3, 1, requires_grad=True)
        a = F.mse_loss(x, torch.ones(3))
        b = F.mse_loss(x * 2, torch.ones(3))
        (a + b).backward()
        print(x.grad.flatten().tolist())
    """,
    # A module's forward calling an op that warns; the user's own warning in __main__.
    "in_a_module": """
        import warnings
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 1)
            def forward(self, x):
                return torch.nn.functional.mse_loss(self.lin(x), torch.zeros(2))
        torch.manual_seed(0)
        net = Net()
        for _ in range(2):
            net(torch.randn(2, 4)).backward()
        warnings.warn("from the program", DeprecationWarning)
        print([p.grad.flatten().tolist() for p in net.parameters()])
    """,
}

_WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ")


def _warnings(stderr: str) -> list[str]:
    """Each warning's first line and the source line shown under it."""
    lines = stderr.splitlines()
    out = []
    for i, line in enumerate(lines):
        if _WARNING.match(line):
            shown = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("  ") else ""
            out.append(f"{line}\n{shown}")
    return out


def _run(tmp_path: Path, name: str, *command: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"{name}.py"
    body = PROGRAMS[name].strip("\n")
    indent = len(body) - len(body.lstrip())
    script.write_text("\n".join(line[indent:] for line in body.splitlines()) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": ""}
    return subprocess.run(
        [sys.executable, *command, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
        check=False,
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_torch_warnings_name_the_same_lines_under_the_checks(tmp_path: Path, name: str) -> None:
    plain = _run(tmp_path, name)
    checked = _run(tmp_path, name, "-m", "autograd_viz", "nan")
    assert plain.returncode == 0, plain.stderr
    assert checked.returncode == 0, checked.stderr
    expected = _warnings(plain.stderr)
    assert expected, plain.stderr  # the program does warn
    assert _warnings(checked.stderr) == expected
    assert checked.stdout.splitlines()[0] == plain.stdout.splitlines()[0]  # same results


ERROR_IN_AN_OP = """
    import torch
    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.mse_loss(x @ torch.ones(4, 4), x)
    def step(x):
        return Net()(x).sum()
    step(torch.ones(3, requires_grad=True)).backward()
"""


def test_a_programs_traceback_has_its_frames_as_without_the_checks(tmp_path: Path) -> None:
    """What the modes add between the program's frames is left out of its traceback."""
    PROGRAMS["error_in_an_op"] = ERROR_IN_AN_OP
    try:
        plain = _run(tmp_path, "error_in_an_op")
        checked = _run(tmp_path, "error_in_an_op", "-m", "autograd_viz", "nan")
    finally:
        del PROGRAMS["error_in_an_op"]

    def frames(stderr: str) -> list[str]:
        """The program's frames and the error. torch's differ: the module tracking's global
        hooks send ``Module._call_impl`` down its path with hooks."""
        return [
            line
            for line in stderr.splitlines()
            if line.startswith(("  File", "RuntimeError")) and os.sep + "torch" + os.sep not in line
        ]

    assert plain.returncode != 0
    assert checked.returncode != 0
    expected = frames(plain.stderr)
    assert len([line for line in expected if "error_in_an_op.py" in line]) == 3
    assert frames(checked.stderr) == expected
    assert "autograd_viz" not in checked.stderr.split("autograd-viz: error:")[0]


def test_placing_a_call_keeps_nothing_of_the_program_alive() -> None:
    """The trampolines kept are code placed at a line; the caller's globals are not kept."""
    import gc
    import weakref

    import torch

    import autograd_viz

    namespace: dict[str, object] = {"torch": torch}
    source = "class Box:\n    pass\nbox = Box()\ndef f(x):\n    return (x * 2).sum()\n"
    exec(compile(source, "program.py", "exec"), namespace)
    box = weakref.ref(namespace["box"])
    with autograd_viz.watch_nan():
        namespace["f"](torch.ones(2, requires_grad=True)).backward()  # type: ignore[operator]
    del namespace
    gc.collect()
    assert box() is None
