"""``autograd-viz run --print``: each backward call as lines, as it ends, children included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from autograd_viz.cli.printing import CallPrinter, printing
from autograd_viz.launch import processes

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """
    import sys

    import engine

    x = engine.tensor([1.0, 0.0, 2.0], requires_grad=True, name="x")
    w = engine.tensor([0.5, 1.5, -1.0], requires_grad=True, name="w\\x1b[31m")
    for i in range(3):
        y = (x * w).log() if i == 1 else (x * w).tanh()
        y.sum().backward()
    print("script done")
    if "fail" in sys.argv:
        raise ValueError("the script fails at its end")
"""

CHILDREN = """
    import multiprocessing as mp
    import sys

    import engine


    def work(scale):
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        for _ in range(2):
            (x * scale).sum().backward()


    if __name__ == "__main__":
        work(1.0)
        ctx = mp.get_context(sys.argv[1])
        procs = [ctx.Process(target=work, args=(s,)) for s in (2.0, 3.0)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in (processes.ENV, "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "autograd_viz", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def script(tmp_path: Path, source: str = SCRIPT) -> Path:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_each_call_is_printed_with_its_nodes_and_its_nans(tmp_path: Path) -> None:
    path = script(tmp_path)
    done = run(tmp_path, "run", "--print", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    headers = [line for line in lines if line.startswith("── ")]
    assert [h.split(" · ")[0] for h in headers] == [f"── backward call {i}" for i in range(3)]
    assert all("root SumBackward0 · 5 nodes · thread main" in h for h in headers)
    first = lines[1 : lines.index(next(line for line in lines if "done" in line))]
    # the engine's order, highest sequence number first; each node's topological number
    # and the gradients it waited for, as the graph task counted them when it started
    assert [re.sub(r" +", " ", line.strip()) for line in first] == [
        "1 topo 3 SumBackward0 waited for 0 main",
        "2 topo 2 TanhBackward0 waited for 1 main",
        "3 topo 1 MulBackward0 waited for 1 main",
        "4 topo 0 AccumulateGrad(x) waited for 1 main",
        "5 topo 0 AccumulateGrad(w\\x1b[31m) waited for 1 main",  # a name is shown, escaped
    ]
    assert "\x1b" not in done.stdout
    born = next(line for line in lines if "born here" in line)
    assert born.lstrip().startswith("NaN")
    assert "LogBackward0" in born and "(op log)" in born and f"{path}:9" in born
    backward = [line for line in lines if "returned Inf in gradient" in line]
    assert backward and all(line.lstrip().startswith("Inf") for line in backward)
    done_lines = [line.strip() for line in lines if line.strip().startswith("done")]
    assert [line.split(",")[0] for line in done_lines] == ["done  5 nodes ran"] * 3
    assert lines[-1] == "script done"  # the script's own output, in its place
    assert "3 backward calls printed, 5 NaN or Inf" in done.stderr


def test_without_a_terminal_run_prints_and_keeps_the_scripts_status(tmp_path: Path) -> None:
    path = script(tmp_path)
    done = run(tmp_path, "run", "--every", "2", str(path), "fail")
    assert done.returncode == 1
    assert "not a terminal: printing each backward call" in done.stderr
    assert "ValueError: the script fails at its end" in done.stderr
    headers = [line.split(" · ")[0] for line in done.stdout.splitlines() if line.startswith("──")]
    assert headers == ["── backward call 0", "── backward call 2"]


def test_print_last_needs_a_file_to_write_the_calls_to(tmp_path: Path) -> None:
    path = script(tmp_path)
    done = run(tmp_path, "run", "--print", "--last", "2", str(path))
    assert done.returncode == 2
    assert "--last N with --print keeps the last calls only to write them: add -o" in done.stderr
    assert "Traceback" not in done.stderr


def test_print_writes_the_calls_as_record_does(tmp_path: Path) -> None:
    from autograd_viz.trace import Trace

    path = script(tmp_path)
    done = run(tmp_path, "run", "--print", "-o", "all.jsonl", str(path))
    assert done.returncode == 0, done.stderr
    assert _calls(Trace.load(tmp_path / "all.jsonl")) == [0, 1, 2]
    assert "3 graph tasks saved to all.jsonl" in done.stderr
    # A flight recorder stops keeping at the call with the NaN (call 1: a log of a
    # negative), as record --last does; every call is printed all the same.
    done = run(tmp_path, "run", "--print", "--last", "2", "-o", "last.jsonl", str(path))
    assert done.returncode == 0, done.stderr
    headers = [line.split(" · ")[0] for line in done.stdout.splitlines() if line.startswith("──")]
    assert headers == [f"── backward call {n}" for n in range(3)]
    assert _calls(Trace.load(tmp_path / "last.jsonl")) == [0, 1]
    assert "the last 2 graph tasks saved to last.jsonl" in done.stderr


def _calls(trace: object) -> list[int | None]:
    return [info.call for info in trace.graph_tasks.values()]  # type: ignore[attr-defined]


def test_children_print_headed_by_their_process(tmp_path: Path) -> None:
    for method in ("spawn", "fork"):
        path = script(tmp_path, CHILDREN)
        done = run(tmp_path, "run", "--print", str(path), method)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        parents = [line for line in lines if line.startswith("── backward call")]
        assert len(parents) == 2  # the watching process's own calls have no heading
        heads = {line.split("] ")[0] + "]" for line in lines if line.startswith("[pid ")}
        assert len(heads) == 2, lines
        for head in heads:
            calls = [line for line in lines if line.startswith(f"{head} ── backward call")]
            assert len(calls) == 2, (method, lines)
        if method == "spawn":  # a started child reports its calls at exit; a fork prints only
            assert "2 child processes" in done.stderr, done.stderr


def test_the_printer_holds_nothing_once_a_call_is_printed() -> None:
    import engine

    printer = CallPrinter(stream=open(os.devnull, "w"))  # noqa: SIM115 - closed below
    try:
        with printing(printer, 16) as recorder:
            x = engine.tensor([1.0, 2.0], requires_grad=True)
            for _ in range(5):
                (x * 2.0).sum().backward()
                assert not recorder.trace.events and not recorder.trace.graph_tasks
    finally:
        printer._stream.close()  # type: ignore[union-attr]
    assert printer.calls == 5


def printed_call(names: dict[str, str]) -> list[str]:
    """The node lines ``run --print`` prints for ``(x * w).tanh().sum()``, each leaf named and
    made inside a scope: ``names`` maps a leaf's name to its scope's."""
    import io

    import engine

    out = io.StringIO()
    with printing(CallPrinter(stream=out), 16):
        total = None
        for leaf, module in names.items():
            with engine.scope(module):
                x = engine.tensor([1.0, 2.0], requires_grad=True, name=leaf)
                term = (x * 2.0).tanh().sum()
            total = term if total is None else total + term
        assert total is not None
        total.backward()
    lines = out.getvalue().splitlines()
    return [line for line in lines if "waited for" in line]


def test_columns_line_up_whatever_the_names_length() -> None:
    """Note [Columns of run --print]: measured per call, in terminal cells."""
    from rich.cells import cell_len

    long_path = "transformer.h.11.attn.c_attn_projection"  # 55 cells after MulBackward0
    lines = printed_call(
        {"w": "a", "bias": long_path, "重み": "日本語のモジュール", "b": "m" * 100_000}
    )
    assert len(lines) == 19  # 4 leaves × (Sum, Tanh, Mul, AccumulateGrad) and 3 adds
    columns = {cell_len(line[: line.index("waited for")]) for line in lines}
    assert len(columns) == 1, lines  # every "waited for" starts in the same column
    assert all(cell_len(line) < 120 for line in lines)
    assert any(f"MulBackward0 in {long_path}" in line for line in lines)  # it fits whole
    cut = [line.split("  ")[3] for line in lines if "…" in line]
    # cut in the middle: the op and the innermost modules kept
    assert "TanhBackward0 in " + "m" * 13 + "…" + "m" * 29 in cut  # 30 + 1 + 29 cells
    assert "AccumulateGrad(bias) in transf…r.h.11.attn.c_attn_projection" in cut
    assert len(cut) == 5  # the four nodes in the 100,000-m scope, and that leaf
    assert any("AccumulateGrad(重み)" in line for line in lines)  # the leaf says its module


def test_a_short_call_keeps_narrow_columns() -> None:
    lines = printed_call({"x": "f"})
    # the name column is as wide as the call's longest name, two spaces before the next
    assert [line.split("waited for")[0] for line in lines] == [
        "  1  topo 3  SumBackward0 in f       ",
        "  2  topo 2  TanhBackward0 in f      ",
        "  3  topo 1  MulBackward0 in f       ",
        "  4  topo 0  AccumulateGrad(x) in f  ",
    ]


def test_hostile_names_are_shown_as_text_and_measured_as_shown() -> None:
    from rich.cells import cell_len

    hostile = {
        "w\x1b[31m": "\u202eevil",
        "[bold]x[/bold]": "tab\there",
        "a\u200bb": "line\nbreak",
    }
    lines = printed_call(hostile)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\u202e" not in text and "\t" not in text
    assert "\\x1b[31m" in text and "\\u202eevil" in text and "tab\\there" in text
    assert "line\\nbreak" in text and "[bold]x[/bold]" in text  # markup is plain text here
    assert len({cell_len(line[: line.index("waited for")]) for line in lines}) == 1
