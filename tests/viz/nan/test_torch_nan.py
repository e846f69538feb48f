"""Where a NaN was born in unmodified PyTorch programs: ``watch_nan`` and ``autograd-viz nan``.

The oracle is PyTorch itself: the node the report says anomaly mode would
name is the one ``torch.autograd.detect_anomaly`` names on the same program,
and the birth line is the example's line marked ``# born here``.
"""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autograd_viz import cli  # noqa: E402
from autograd_viz.nan.forward.checks import NonFiniteError  # noqa: E402
from autograd_viz.nan.report import NanReport  # noqa: E402
from autograd_viz.nan.scan import find_nans  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402
from autograd_viz.trace import Trace  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
MARK = "# born here"

CASES = {
    # name: (phase, node that holds the birth, words of the cause)
    "torch_nan_log_zero": ("forward", "LogBackward0", "log of 0"),
    "torch_nan_softmax_overflow": ("forward", "ExpBackward0", "exp overflow"),
    "torch_nan_sqrt_zero": ("backward", "SqrtBackward0", "sqrt at 0 in backward"),
    "torch_nan_zero_norm": ("forward", "DivBackward0", "division by a zero norm"),
    "torch_nan_attention_mask": ("forward", "SoftmaxBackward0", "all -inf"),
}


def _main(name: str) -> Callable[[], None]:
    main: Callable[[], None] = runpy.run_path(str(EXAMPLES / f"{name}.py"))["main"]
    return main


def _report(name: str, **options: Any) -> NanReport:
    main = _main(name)
    with watch_nan(**options) as watch:
        main()
    return watch.report


def _marked_line(name: str) -> int:
    lines = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8").splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(MARK)]
    return number


def _anomaly_mode_names(main: Callable[[], None]) -> str | None:
    """The node ``torch.autograd.detect_anomaly`` raises at, or ``None`` when it is silent."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly():
                main()
        except RuntimeError as exc:
            match = re.search(r"Function '(\w+)' returned nan values", str(exc))
            assert match is not None, str(exc)
            return match.group(1)
    return None


@pytest.mark.parametrize("name", list(CASES))
def test_report_names_the_node_pytorch_anomaly_mode_names(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(name)
    expected = _anomaly_mode_names(_main(name))
    capsys.readouterr()
    assert (report.torch_node.name if report.torch_node else None) == expected


@pytest.mark.parametrize("name", list(CASES))
def test_birth_is_the_marked_line_with_its_node_and_cause(name: str) -> None:
    phase, node, cause = CASES[name]
    first = _report(name).first
    assert first is not None and first.born
    assert (first.phase, first.node.name) == (phase, node)
    assert cause in first.cause
    assert first.source is not None
    assert Path(first.source.file).name == f"{name}.py"
    assert first.source.line == _marked_line(name)
    if phase == "forward":
        assert first.aten_op is not None and first.aten_op.startswith("aten.")


def test_the_module_and_the_path_from_the_loss_are_named() -> None:
    report = _report("torch_nan_attention_mask")
    assert report.first is not None and report.first.module == "encoder.attention"
    assert report.path[-1] == report.first.node
    assert report.path[0].name == "MeanBackward0"


@pytest.mark.parametrize("name", list(CASES))
def test_cli_reports_and_exits_1_then_0_on_the_fixed_version(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    phase, node, cause = CASES[name]
    script = EXAMPLES / f"{name}.py"
    assert cli.main(["nan", str(script)]) == 1
    out = capsys.readouterr().out
    assert f"born in the {phase} pass at {node}" in out
    assert cause in out and f"{script}:{_marked_line(name)}" in out
    assert "anomaly mode names" in out
    assert cli.main(["nan", str(EXAMPLES / f"{name}_fixed.py")]) == 0
    assert "no NaN or Inf found in 1 backward call" in capsys.readouterr().out


def test_cli_saves_the_trace_and_stops_at_the_first_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "nan.jsonl"
    script = EXAMPLES / "torch_nan_log_zero.py"
    assert cli.main(["nan", "-o", str(output), str(script)]) == 1
    first = find_nans(Trace.load(output)).first
    assert first is not None and first.aten_op == "aten.log.default"
    assert first.source is not None and first.source.line == _marked_line("torch_nan_log_zero")
    capsys.readouterr()
    assert cli.main(["nan", "--first", str(script)]) == 1
    captured = capsys.readouterr()
    assert "born in the forward pass at LogBackward0" in captured.out
    assert "error" not in captured.err
    assert "loss =" not in captured.out  # the script stopped at the log


def test_first_raises_at_the_birth_like_anomaly_mode() -> None:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with (
        pytest.raises(NonFiniteError, match=r"Function 'LogBackward0' produced inf"),
        watch_nan(first=True),
    ):
        torch.log(x).sum().backward()
    a = torch.tensor([0.0, 2.0], requires_grad=True)
    with (
        pytest.raises(NonFiniteError, match=r"Function 'SqrtBackward0' returned inf"),
        watch_nan(first=True),
    ):
        a.sqrt().sum().backward()


def test_no_inf_reports_the_first_nan() -> None:
    report = _report("torch_nan_sqrt_zero", inf=False)
    assert report.first is not None
    assert (report.first.phase, report.first.value) == ("backward", "nan")
    assert report.first.node.name == "PowBackward0"


def test_no_forward_checks_only_backward_nodes() -> None:
    report = _report("torch_nan_log_zero", forward=False)
    assert report.first is not None and report.first.phase == "backward"
    assert report.first.node.name == "LogBackward0"


def test_collect_mode_finds_several_sources() -> None:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = torch.tensor([-1.0, 4.0], requires_grad=True)
    with watch_nan() as watch:
        a = torch.log(x)  # Inf
        b = torch.sqrt(y)  # NaN
        (a.sum() + b.sum()).backward()
    born = [f for f in watch.report.findings if f.born and f.phase == "forward"]
    assert [(f.node.name, f.cause) for f in born] == [
        ("LogBackward0", "log of 0"),
        ("SqrtBackward0", "sqrt of a negative number"),
    ]
    assert len(watch.report.sources) >= 1


def test_ignore_leaves_out_an_op_that_makes_inf_on_purpose() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    mask = torch.tensor([True, False, False, True])

    def step(cap: bool) -> None:
        filled = x.masked_fill(mask, float("inf"))
        (filled.clamp(max=10.0) if cap else filled).sum().backward()

    with watch_nan() as watch:
        step(cap=False)
    assert watch.report.first is not None and watch.report.first.aten_op is not None
    assert "masked_fill" in watch.report.first.aten_op  # +inf is not a mask fill
    with watch_nan() as watch:
        step(cap=True)  # clamped before the loss: contained, counted, not found
    assert watch.report.first is None and watch.report.contained == 1
    with watch_nan(ignore=["masked_fill"]) as watch:
        step(cap=False)
    assert watch.report.first is None and watch.report.contained == 0


def test_a_birth_in_an_in_place_optimizer_step_is_found() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([w], lr=0.1, eps=0.0, foreach=False)
    with watch_nan() as watch:
        (w * torch.tensor([0.0, 1.0, 2.0])).sum().backward()
        optimizer.step()  # a zero gradient: 0 / (sqrt(0) + 0)
    first = watch.report.first
    assert first is not None and first.aten_op == "aten.addcdiv_.default"
    assert first.cause == "0/0" and first.born
    assert (
        first.source is not None
        and first.source.code == "optimizer.step()  # a zero gradient: 0 / (sqrt(0) + 0)"
    )


def _masked_attention() -> dict[str, Any]:
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 8, requires_grad=True)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    out, _ = attention(x, x, x, key_padding_mask=padding)
    additive = torch.zeros(padding.shape).masked_fill(padding, float("-inf"))
    out = layer(out, src_mask=causal, src_key_padding_mask=additive)
    out.pow(2).mean().backward()
    grads = {"x": x.grad}
    for prefix, module in (("attention", attention), ("layer", layer)):
        grads |= {f"{prefix}.{n}": p.grad for n, p in module.named_parameters()}
    return {"out": out.detach(), **grads}


def test_masked_attention_is_not_reported() -> None:
    with watch_nan() as watch:
        _masked_attention()
    assert watch.report.first is None, watch.report.first


def _bits(t: Any) -> Any:
    return t.detach().contiguous().view(torch.int32)


def test_watching_changes_no_result_bit_for_bit() -> None:
    plain = _masked_attention()
    with watch_nan():
        watched = _masked_attention()
    assert plain.keys() == watched.keys()
    for key in plain:
        assert torch.equal(_bits(plain[key]), _bits(watched[key])), key


def test_inference_keeps_pytorchs_fast_path_and_is_still_checked() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        plain = layer(x)
        with watch_nan() as watch:
            watched = layer(x)
            torch.log(torch.zeros(1))  # reaches nothing: contained, and still counted
            layer(x).log()
    assert torch.equal(_bits(plain), _bits(watched))
    contained = watch.report.first_contained
    assert watch.report.first is None and watch.report.contained == 2
    assert contained is not None and contained.aten_op == "aten.log.default"
    assert contained.cause == "log of 0"


def test_forward_events_carry_our_engine_fields_and_the_aten_op() -> None:
    import engine

    with watch_nan() as watch:
        torch.log(torch.tensor([0.0], requires_grad=True)).sum().backward()
    (torch_event,) = [
        e
        for e in watch.trace.events
        if e.kind == "anomaly" and e.data["phase"] == "forward" and "reached" not in e.data
    ]
    x = engine.tensor([0.0], requires_grad=True)
    with watch_nan() as ours, np.errstate(all="ignore"):
        x.log().sum().backward()
    (engine_event,) = [
        e
        for e in ours.trace.events
        if e.kind == "anomaly" and e.data["phase"] == "forward" and e.data["born"]
    ]
    assert set(engine_event.data) <= set(torch_event.data)
    assert torch_event.data["aten_op"] == "aten.log.default"


def test_watch_nan_on_our_engine_never_imports_torch() -> None:
    code = (
        "import sys, runpy\n"
        "from autograd_viz.nan.watch import watch_nan\n"
        "main = runpy.run_path('examples/nan_log_zero.py')['main']\n"
        "with watch_nan() as watch:\n"
        "    main()\n"
        "assert watch.found and watch.report.first.cause == 'log of 0', watch.report.first\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_run_stops_at_a_forward_birth_with_f() -> None:
    """f stops where the forward birth's values reach the loss, before the backward runs,
    naming the birth (Note [Breaking where a value reaches something])."""
    from autograd_viz.cli.tui import _run_checked
    from autograd_viz.live import LiveSession, born_where
    from autograd_viz.tui.driver import ContinueStops

    name = "torch_nan_softmax_overflow"
    marks = ContinueStops(non_finite=True)  # what f turns on
    target = lambda: _run_checked(str(EXAMPLES / f"{name}.py"), [])  # noqa: E731
    with LiveSession(target) as session:
        session.add_breakpoint(predicate=marks.matches)
        hit = session.continue_(timeout=60)
        assert hit is not None
        assert (hit.kind, hit.data["phase"], hit.data["reached"]) == ("anomaly", "forward", "loss")
        born = born_where(session.trace.events, hit)
        assert born is not None and born.startswith("Inf born in aten.exp.default at ")
        assert f"{name}.py:{_marked_line(name)}" in born
        assert session.trace.graph_tasks == {}  # stopped in the forward, before any backward
        session.run_to_end(timeout=60)


def test_a_in_the_tui_jumps_to_a_pytorch_birth_and_says_why(tmp_path: Path) -> None:
    from textual.pilot import Pilot

    from tests.viz.tui.tuiting import inspector, node_list, replay_app, run_app, status

    path = tmp_path / "t.jsonl"
    script = EXAMPLES / "torch_nan_attention_mask.py"
    assert cli.main(["nan", "-o", str(path), str(script)]) == 1
    trace = Trace.load(path)
    first = find_nans(trace).first
    assert first is not None
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("a")
        assert "SoftmaxBackward0" in status(app)
        assert node_list(app).selected == first.node.id
        text = inspector(app)
        assert "softmax over a row that is all -inf" in text
        assert f"torch_nan_attention_mask.py:{_marked_line('torch_nan_attention_mask')}" in text

    run_app(app, actions, size=(120, 40))


def test_wording_one_op_naming_plurals_and_float16s_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "half.py"
    script.write_text(
        "import torch\n"
        "x = torch.tensor([1.0, 12.0], dtype=torch.float16, requires_grad=True)\n"
        "(x.exp() * 2).sum().backward()  # exp(12) is past what float16 holds\n",
        encoding="utf-8",
    )
    assert cli.main(["nan", str(script)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"at ExpBackward0 #\d+ \(op exp\)", out)  # as the engine names its op
    assert "why           exp overflow: past float16's largest value, 65504" in out
    assert "Other findings: 0 more born, 1 passed on from an earlier one" in out
    assert "aten." not in out and "passed one on" not in out


def test_cli_says_which_calls_were_checked_under_every_steps_and_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean report under ``--every`` must not read as "the run is clean": the
    unchosen calls' backward was not checked, and ``--last`` checked every call."""
    script = tmp_path / "ten.py"
    script.write_text(
        "import torch\n"
        "w = torch.randn(3, requires_grad=True)\n"
        "for i in range(10):\n"
        "    (w * 2).sum().backward()\n"
    )
    assert cli.main(["nan", str(script), "--every", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no NaN or Inf found in the backward of 3 of 10 backward calls (every 4th call)" in out
    assert (
        "the other calls' backward was checked only where its gradients reached the "
        "parameters, their forward ops in full"
    ) in out
    assert cli.main(["nan", str(script), "--last", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no NaN or Inf found in 10 backward calls (the last 3 kept)" in out
    assert cli.main(["nan", str(script)]) == 0
    assert "no NaN or Inf found in 10 backward calls\n" in capsys.readouterr().out


LATE_NAN = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))\n"
    "for i in range(10):\n"
    "    out = model(torch.randn(4, 3))\n"
    "    if i == 5:\n"
    "        out = torch.sqrt(out * 0)  # finite forward; 0 * inf = NaN born in backward\n"
    "    out.sum().backward()\n"
    "    model.zero_grad()\n"
)


@pytest.mark.parametrize(
    ("options", "chosen"),
    [(["--every", "4"], "--every 4"), (["--steps", "0-3,7"], "--steps 0-3,7")],
)
def test_cli_finds_a_nan_born_in_the_backward_of_a_call_not_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], chosen: str
) -> None:
    """Call 5 is not recorded: its NaN is found where it reaches the parameters."""
    script = tmp_path / "late.py"
    script.write_text(LATE_NAN)
    assert cli.main(["nan", str(script), *options]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "NaN reached 2.bias (and 3 more) in backward call 5 "
        f"(not recorded: {chosen}); record that call to see where it was born: --steps 5"
    ) in out
    assert "no NaN or Inf found" not in out
    # The call it names, recorded, shows where the NaN was born.
    assert cli.main(["nan", str(script), "--steps", "5"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "born in the backward pass at SqrtBackward0" in out


def _gru_steps(steps: int, nan_at: int | None = None) -> Any:
    """A GRUCell unrolled 5 steps, trained ``steps`` steps with SGD; at step ``nan_at`` a NaN
    is born in the backward (sqrt at 0, times 0), and that step is not applied."""
    torch.manual_seed(0)
    model = torch.nn.GRUCell(6, 6)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 3, 6)
    for step in range(steps):
        h = torch.zeros(3, 6)
        for t in range(5):
            h = model(x[t], h)
        loss = h.pow(2).sum()
        if step == nan_at:
            loss = loss + torch.sqrt(h.sum() * 0)
        optimizer.zero_grad()
        loss.backward()
        if step != nan_at:
            optimizer.step()
    return model


def test_calls_not_recorded_are_checked_at_the_parameters_and_left_unchanged() -> None:
    plain = [p.detach().numpy().tobytes() for p in _gru_steps(5).parameters()]
    with watch_nan(every=4) as watch:
        model = _gru_steps(6, nan_at=5)
    assert watch.report.first is None  # calls 0 and 4 recorded, clean
    assert watch.missed is not None and watch.found
    assert (watch.missed.value, watch.missed.call) == ("nan", 5)
    assert watch.missed.parameter in {name for name, _ in model.named_parameters()}
    assert watch.missed.others == 3  # every parameter's gradient
    # Bit-identical: the five steps taken are those taken unwatched.
    assert [p.detach().numpy().tobytes() for p in model.parameters()] == plain
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())  # hooks removed
    # Put on for the calls left out only: the recorded calls show no hook of ours.
    assert watch.trace.graph_tasks and not [e for e in watch.trace.events if e.kind == "hook"]


def test_a_checkpointed_block_is_counted_in_its_callers_backward_call() -> None:
    # A reentrant checkpoint runs a backward call of its own inside the caller's: the report
    # counts backward calls as `record` does (2 here, not the 6 graph tasks).
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4) for _ in range(2)]
    with watch_nan() as watch:
        for _ in range(2):
            h = torch.randn(3, 4, requires_grad=True)
            for layer in layers:
                h = checkpoint(lambda x, layer=layer: layer(x).tanh(), h, use_reentrant=True)
            h.sum().backward()
    assert len(watch.trace.graph_tasks) == 6
    assert watch.report.backward_calls == 2 and watch.report.first is None
