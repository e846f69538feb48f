"""Everything the README shows runs: its Python snippets and its commands.

The tour's long-run page (docs/training.md) is held to the same rule.

Each ```python block runs as a script of its own, in a scratch directory that
sees the repository's examples/ (the README's paths are relative to the
repository). Each concrete ``autograd-viz`` command line runs for real, in
README order; the TUI commands, which need a terminal, are checked up to the
point where the app would open.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = "\n".join(
    (ROOT / page).read_text(encoding="utf-8") for page in ("README.md", "docs/training.md")
)

TUI_COMMANDS = {"demo", "run", "replay"}
"""Commands that open the TUI: run as far as a headless process allows."""


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def command_lines() -> list[list[str]]:
    """Every ``autograd-viz ...`` line of the README's bash and console blocks, without comments."""
    found = []
    for block in blocks("bash") + blocks("console"):
        for text in block.splitlines():
            line = text.split("#", 1)[0].strip().removeprefix("$ ")
            if line.startswith("autograd-viz "):
                found.append(shlex.split(line))
    return found


def needs(snippet: str) -> str | None:
    """Why a snippet cannot run here, or None."""
    if "import torch" in snippet and not _has("torch"):
        return "needs PyTorch"
    return None


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd`` as a user would, with the repository importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_every_python_snippet_runs(index: int, scratch: Path) -> None:
    snippet = blocks("python")[index]
    reason = needs(snippet)
    if reason:
        pytest.skip(reason)
    (scratch / "snippet.py").write_text(snippet, encoding="utf-8")
    done = _run([sys.executable, "snippet.py"], scratch)
    assert done.returncode == 0, f"snippet {index} failed:\n{snippet}\n{done.stderr}"


def test_the_readme_has_snippets_and_commands() -> None:
    assert len(blocks("python")) >= 4
    assert len(command_lines()) >= 10


def test_every_command_line_names_a_command_that_exists() -> None:
    from autograd_viz.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for argv in command_lines():
        assert argv[1] in commands, argv


def _concrete(argv: list[str]) -> bool:
    """A line with real paths, not the Commands table's SCRIPT / TRACE placeholders."""
    return not any(word.split(".")[0].isupper() or word.startswith("[") for word in argv[1:])


def test_every_concrete_command_runs(scratch: Path) -> None:
    exe = Path(sys.executable).with_name("autograd-viz")
    launcher = [str(exe)] if exe.exists() else [sys.executable, "-m", "autograd_viz"]
    ran = 0
    for argv in command_lines():
        if not _concrete(argv):
            continue
        if any("torch" in word for word in argv) and not _has("torch"):
            continue
        command, args = argv[1], argv[2:]
        if command in TUI_COMMANDS:
            # Without a terminal these refuse to open the app; the arguments must still be good.
            for word in args:
                if not word.startswith("-") and "." in word:
                    assert (scratch / word).exists(), f"{argv}: {word} does not exist"
            continue
        done = _run([*launcher, command, *args], scratch)
        expected = 1 if command in ("nan", "grads") else 0  # 1: they found something
        assert done.returncode == expected, f"{argv}:\n{done.stdout}\n{done.stderr}"
        ran += 1
    assert ran >= 3
