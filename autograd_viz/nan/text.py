"""The NaN report in words: the first finding in full, then the others in a line each.

Printed by ``autograd-viz nan`` and shown by a notebook (:class:`~autograd_viz.nan.watch.
NanWatch` displays itself). Every name and message from the program is shown as
text (Note [Names are text] in :mod:`autograd_viz.trace.text`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autograd_viz.nan.cause import canonical_op
from autograd_viz.nan.scan import LISTED_SOURCES
from autograd_viz.trace.text import count_words, shown

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.nan.report import Finding, NanReport
    from autograd_viz.trace.summary import TensorSummary

__all__ = ["describe_tensor", "print_report", "report_text"]

_LISTED = LISTED_SOURCES
"""How many other findings the report lists before it only counts them."""


def report_text(report: NanReport, *, width: int = 100, html: bool = False) -> str:
    """The report as :func:`print_report` prints it: plain text, or an HTML ``<pre>`` block."""
    import io

    from rich.console import Console

    console = Console(
        file=io.StringIO(), record=True, width=width, color_system="truecolor", highlight=False
    )
    print_report(report, console)
    if html:
        return console.export_html(inline_styles=True, code_format="<pre>{code}</pre>")
    return console.export_text()


def print_report(
    report: NanReport, console: Console, stopped: bool = False, checked: str | None = None
) -> None:
    """Print ``report``: the first finding in full, then a short list of the others.

    ``stopped``: the program was stopped at the first finding (``--first``).
    ``checked``: which calls were checked, when not every call the report read.
    """
    first = report.first
    if report.values != "all":
        leaves = " and the leaves' gradients" if report.values == "leaves" else ""
        console.print(
            f"[yellow]note:[/yellow] gradients were recorded without values (--values "
            f"{report.values}): the report reads only the checks' own findings"
            f"{leaves}; record with "
            "--values all for the values along the way"
        )
    if first is None:
        where = (
            checked if checked is not None else count_words(report.backward_calls, "backward call")
        )
        if report.contained:
            console.print(_contained_line(report, where), soft_wrap=True)
            return
        console.print(f"[bold green]no NaN or Inf found[/bold green] in {where}")
        return
    value = "NaN" if first.value == "nan" else "Inf"
    born = "born" if first.born else "first seen"
    op = canonical_op(first.aten_op or first.op)  # one naming: `log`, whichever engine ran it
    if first.node.name == op:  # PyTorch: an op that made no autograd node (no grad through it)
        where_born = f"[bold]{shown(op)}[/bold] (no autograd node)"
    else:
        where_born = f"[bold]{shown(str(first.node))}[/bold] (op {shown(op)})"
    # A parameter held the value: it entered the computation at this op (Note [A parameter
    # that holds a NaN] in nan/forward/births.py).
    how = f"{born} in the {first.phase} pass" if not first.held else "entered the forward pass"
    console.print(f"[bold red]{value} {how}[/bold red] at {where_born}")
    rows = [("why", f"[bold]{shown(first.cause)}[/bold]")]
    if first.source is not None:
        where = f"{shown(str(first.source))} in {shown(first.source.function)}"
        if first.source.code:
            where += f"\n{'':16}[cyan]{shown(first.source.code)}[/cyan]"
        rows.append(("where", where))
    if first.module is not None:
        rows.append(("module", shown(first.module)))
    if report.path:
        rows.append(("path", " → ".join(shown(str(n)) for n in report.path)))
    rows.append(("PyTorch", _anomaly_mode_says(report, stopped)))
    inputs = "gradients in" if first.phase == "backward" else "inputs"
    outputs = "gradients out" if first.phase == "backward" else "output"
    rows += _tensor_rows(inputs, first.inputs)
    rows += _tensor_rows("saved", first.saved)
    rows += _tensor_rows(outputs, first.outputs)
    for label, text in rows:
        console.print(f"  {label:<13} {text}", soft_wrap=True)
    _print_others(report, console)


def _anomaly_mode_says(report: NanReport, stopped: bool) -> str:
    """What PyTorch's anomaly mode would name, and whether that is later than the birth."""
    first, named = report.first, report.torch_node
    if named is None and stopped:
        return "anomaly mode: not reached (the program stopped at the first finding)"
    if named is None and report.values != "all":
        return "anomaly mode: not known (the nodes' gradients were recorded without values)"
    if named is None:
        return "anomaly mode names no node: no backward node returned NaN"
    text = f"anomaly mode names {shown(str(named))}"
    if first is None or (first.phase == "backward" and first.node.id == named.id):
        return text
    if first.node.id == named.id:
        return f"{text} [yellow](the same op, once its backward returns NaN)[/yellow]"
    if first.phase == "forward":
        why = "it checks only backward outputs"
    elif first.value == "inf":
        why = "it checks only for NaN, not Inf"
    else:
        why = "the NaN was passed on to it"
    return f"{text} [yellow](later than the birth: {why})[/yellow]"


def _print_others(report: NanReport, console: Console) -> None:
    # A long run's report lists only some (Note [A run read a part at a time]).
    others = report.other_count
    if not others:
        return
    sources = report.source_count
    passed = others - sources
    contained = f" ({report.contained:,} contained)" if report.contained else ""
    console.print(
        f"[bold]Other findings[/bold]: {sources:,} more born{contained}, "
        f"{count_words(passed, 'passed on from an earlier one', 'passed on from earlier ones')}"
    )
    # Those whose values reached something first, then the contained ones (Note [Lineage]).
    listed = sorted(report.sources, key=lambda f: f.contained)
    for finding in listed[:_LISTED]:
        console.print(f"  {shown(_one_line(finding))}", soft_wrap=True)
    if sources > _LISTED:
        console.print(f"  ... and {sources - _LISTED} more")


def _contained_line(report: NanReport, where: str) -> str:
    """No value reached anything that matters; say how many were contained, and the first
    (Note [Lineage] in ``nan/forward/lineage.py``): nothing is hidden."""
    first = report.first_contained
    text = (
        f"[bold green]no NaN or Inf reached the loss, a gradient, a parameter or the model's "
        f"output[/bold green] "
        f"in {where}; {count_words(report.contained, 'contained non-finite value')} seen"
    )
    if first is None:
        return text
    value = "NaN" if first.value == "nan" else "Inf"
    text += f", the first an {value} from {shown(first.cause)}"
    if first.source is not None:
        text += f" at {shown(str(first.source))}"
    if first.module is not None:
        text += f" in module {shown(first.module)}"
    return text


def _one_line(finding: Finding) -> str:
    where = f" at {finding.source}" if finding.source is not None else ""
    module = f" in module {finding.module}" if finding.module is not None else ""
    op = f" (op {canonical_op(finding.aten_op or finding.op)})"
    contained = " [contained]" if finding.contained else ""
    return (
        f"{finding.phase:<8} {finding.value:<3} {finding.node}{op}: {finding.cause}{where}"
        f"{module}{contained}"
    )


def _tensor_rows(label: str, summaries: tuple[TensorSummary | None, ...]) -> list[tuple[str, str]]:
    rows = []
    for i, summary in enumerate(summaries):
        text = "none" if summary is None else describe_tensor(summary)
        rows.append((label if i == 0 else "", f"[{i}] {shown(text)}"))
    return rows


def describe_tensor(s: TensorSummary) -> str:
    """``(2, 1) float32  min 0  max 0.413  [0, 0.413]``, with its NaN and Inf counts."""
    shape = "(" + ", ".join(str(d) for d in s.shape) + ("," if len(s.shape) == 1 else "") + ")"
    parts = [f"{shape} {s.dtype}"]
    if s.min is not None and s.max is not None:
        parts.append(f"min {s.min:.4g}  max {s.max:.4g}")
    if s.nan_count:
        parts.append(f"{s.nan_count} NaN")
    if s.inf_count:
        parts.append(f"{s.inf_count} Inf")
    if s.values is not None and len(s.values) <= 8:
        parts.append("[" + ", ".join(f"{v:.4g}" for v in s.values) + "]")
    return "  ".join(parts)
