"""In a notebook, pictures and reports show themselves: a real notebook run on a real kernel."""

from __future__ import annotations

import html
import re
import shutil

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

NAME = "<b>evil</b>&amp;"
"""A tensor name with markup in it: a notebook must show it as text."""

CELLS = [
    # 0: record a small backward pass on our engine, with a name a program chose
    f"""
import engine as ag
import autograd_viz
x = autograd_viz.name(ag.tensor([1.0, -2.0, 3.0], requires_grad=True), {NAME!r})
with autograd_viz.record() as trace:
    (x * x).sum().backward()
""",
    # 1: the trace, as the last expression of a cell
    "trace",
    # 2: the graph, drawn
    "autograd_viz.to_dot(trace)",
    # 3: the animation, inline
    "anim = autograd_viz.animate(trace, max_frames=5)\nanim",
    # 4: a NaN report, as the object watch_nan() gives
    """
with autograd_viz.watch_nan() as watch:
    (x - x).sqrt().sum().backward()
watch""",
]


def _run_notebook(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = nbclient.NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    return notebook


def _outputs(cell) -> dict[str, str]:
    """The cell's display data by MIME type (its last result and anything displayed)."""
    shown: dict[str, str] = {}
    for output in cell.outputs:
        assert output.output_type != "error", "".join(output.get("traceback", []))
        for mime, data in output.get("data", {}).items():
            shown[mime] = data if isinstance(data, str) else "".join(data)
    return shown


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_a_notebook_shows_the_trace_the_graph_and_the_animation(tmp_path):
    notebook = _run_notebook(tmp_path)

    here: dict = {}
    exec(CELLS[0], here)  # the same program in this process: the summary it must show
    trace_shown = _outputs(notebook.cells[1])
    assert trace_shown["text/plain"] == repr(here["trace"])
    assert trace_shown["text/plain"].startswith("<Trace: 1 backward call, 3 nodes run, ")
    page = trace_shown["text/html"]
    assert "1 backward call" in page
    assert "SumBackward0" in page

    graph_shown = _outputs(notebook.cells[2])
    svg = graph_shown["image/svg+xml"]
    assert len(re.findall(r'<g id="n\d+" class="node\b', svg)) == 3  # Mul, Sum, AccumulateGrad
    assert "<b>evil</b>" not in svg  # the name is text in the picture, never markup
    assert html.escape(NAME) in svg

    animation_shown = _outputs(notebook.cells[3])
    frame = animation_shown["text/html"]
    assert frame.startswith("<iframe srcdoc=")
    inner = html.unescape(re.search(r'srcdoc="([^"]*)"', frame).group(1))
    assert "<script" in inner  # the whole page, its player included
    assert inner.count("step ") >= 5  # a caption a frame
    assert "<b>evil</b>" not in inner
    assert "<Animation: 5 frames" in animation_shown["text/plain"]

    report_shown = _outputs(notebook.cells[4])
    text = report_shown["text/plain"]
    assert text.startswith("Inf born in the backward pass at SqrtBackward0")
    assert "sqrt at 0" in text
    assert "<pre" in report_shown["text/html"]
    assert "SqrtBackward0" in report_shown["text/html"]
