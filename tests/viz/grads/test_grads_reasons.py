"""Why a parameter got no gradient: one PyTorch program per reason, and one with all.

Each program runs as a script inside ``watch_grads()``; the tests check the
reason, the line that explains it, and that every other parameter got a
gradient (Note [The reasons, in order] in ``autograd_viz/grads/torch_calls.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from grads_programs import CUT_FORMS, TIED_LIBRARY, cut_program, marked_line, write

from autograd_viz.grads import GradsReport, watch_grads
from autograd_viz.grads.report import (
    CUT,
    FROZEN,
    NEVER_USED,
    NO_GRAD,
    PRUNED,
    UNREACHED,
    ZEROS,
)
from autograd_viz.launch.script import run_script

pytestmark = pytest.mark.oracle


def watched(path: Path, *args: str) -> GradsReport:
    with watch_grads() as watch:
        assert run_script(str(path), list(args) or ["-"]) == 0
    return watch.report


def reasons(report: GradsReport) -> dict[str, tuple[str, str, int | None]]:
    """``parameter → (reason, why, line)`` of every finding (the last one made for it)."""
    found = {}
    for repeated in report.findings():
        f = repeated.finding
        found[f.parameter] = (f.reason, f.why, f.where.line if f.where else None)
    return found


def test_a_healthy_model_has_no_finding(torch: Any, tmp_path: Path) -> None:
    report = watched(write(tmp_path, "healthy"))
    assert report.calls == 2
    assert report.findings() == []
    assert not report.found
    assert {row.module for row in report.last.flow} == {"0", "2"}


def test_frozen_parameters_are_listed_apart_and_are_no_finding(torch: Any, tmp_path: Path) -> None:
    report = watched(write(tmp_path, "frozen"))
    assert reasons(report) == {
        "0.weight": (FROZEN, "requires_grad is False", None),
        "0.bias": (FROZEN, "requires_grad is False", None),
    }
    assert not report.found


def test_a_module_never_called(torch: Any, tmp_path: Path) -> None:
    report = watched(write(tmp_path, "never_called"))
    assert reasons(report) == {
        "spare.weight": (NEVER_USED, "module spare was never called in this forward", None),
        "spare.bias": (NEVER_USED, "module spare was never called in this forward", None),
    }
    assert report.found
    assert report.missing[0].calls == 2


def test_a_parameter_its_module_never_reads(torch: Any, tmp_path: Path) -> None:
    report = watched(write(tmp_path, "never_read"))
    assert reasons(report) == {
        "temperature": (NEVER_USED, "module Net ran but never read it", None)
    }


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_module_run_without_grad_is_named_with_the_line(
    torch: Any, tmp_path: Path, mode: str
) -> None:
    path = write(tmp_path, mode)
    report = watched(path)
    line = marked_line(path, "use")
    why = f"used only under torch.{mode}()"
    assert reasons(report) == {"enc.weight": (NO_GRAD, why, line), "enc.bias": (NO_GRAD, why, line)}


def test_a_bare_parameter_used_without_grad(torch: Any, tmp_path: Path) -> None:
    path = write(tmp_path, "no_grad_bare")
    report = watched(path)
    line = marked_line(path, "use")
    assert reasons(report) == {"scale": (NO_GRAD, "used only under torch.no_grad()", line)}


def test_parameters_a_model_let_go_when_it_tied_them_are_no_finding(
    torch: Any, tmp_path: Path
) -> None:
    """Initialized under no_grad, then replaced by a tied one and freed: nothing can give
    them a gradient (Note [Parameters nobody holds]). A parameter the program still holds
    is named, at the program's line, not at the standard library's decorator."""
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "tiedlib.py").write_text(TIED_LIBRARY, encoding="utf-8")
    path = write(tmp_path, "tied_after_init")
    report = watched(path, str(library))
    line = marked_line(path, "use")
    assert reasons(report) == {"spare": (NO_GRAD, "used only under torch.no_grad()", line)}


def test_a_router_cut_by_argmax_and_a_comparison_is_named_with_the_op(
    torch: Any, tmp_path: Path
) -> None:
    """An integer or bool result carries no gradient (Note [Integer results cut])."""
    path = write(tmp_path, "router")
    report = watched(path)
    found = reasons(report)
    line = marked_line(path, "compared")  # the latest cut whose graph holds the router
    why = (
        "cut by gt() (the output of router) on the way to the loss: it gives bools, "
        "which carry no gradient"
    )
    assert found == {"router.weight": (CUT, why, line), "router.bias": (CUT, why, line)}


TWO_BARE = """
import torch
from torch import nn

model = nn.Linear(4, 1)
scales = [nn.Parameter(torch.ones(4)) for _ in range(2)]  # held by a list: no variable each
for _ in range(2):
    x = torch.randn(6, 4)
    with torch.no_grad():
        x = x * scales[0] * scales[1]  # <- use
    model.zero_grad()
    model(x).pow(2).mean().backward()
"""


def test_bare_parameters_of_one_shape_without_a_variable_are_numbered(
    torch: Any, tmp_path: Path
) -> None:
    path = write(tmp_path, "two_bare", TWO_BARE)
    report = watched(path)
    line = marked_line(path, "use")
    why = (NO_GRAD, "used only under torch.no_grad()", line)
    assert reasons(report) == {"Parameter(4,)": why, "Parameter(4,)#2": why}


@pytest.mark.parametrize("kind", list(CUT_FORMS))
def test_each_cut_is_named_with_its_line_and_the_module_it_cut(
    torch: Any, tmp_path: Path, kind: str
) -> None:
    path = write(tmp_path, "cut", cut_program(CUT_FORMS[kind]))
    report = watched(path)
    found = reasons(report)
    assert set(found) == {"enc.weight", "enc.bias"}
    reason, why, line = found["enc.weight"]
    assert (reason, line) == (CUT, marked_line(path, "cut"))
    assert why.startswith(f"cut by {kind} (")
    # What was cut: the encoder's own output, or a tensor made from it in Net's forward.
    assert "the output of enc" in why or "made in Net" in why


def test_a_module_output_dropped_before_the_loss(torch: Any, tmp_path: Path) -> None:
    path = write(tmp_path, "unreached")
    report = watched(path)
    line = marked_line(path, "dropped")
    why = "the output of aux never reaches the loss"
    assert reasons(report) == {
        "aux.weight": (UNREACHED, why, line),
        "aux.bias": (UNREACHED, why, line),
    }


def test_inputs_prunes_on_purpose(torch: Any, tmp_path: Path) -> None:
    path = write(tmp_path, "pruned")
    report = watched(path)
    line = marked_line(path, "call")
    why = "backward(inputs=...) left it out"
    assert reasons(report) == {"0.weight": (PRUNED, why, line), "0.bias": (PRUNED, why, line)}
    assert not report.found


def test_autograd_grad_prunes_what_it_was_not_asked_for(torch: Any, tmp_path: Path) -> None:
    path = write(tmp_path, "grad_call")
    report = watched(path)
    line = marked_line(path, "call")
    why = "torch.autograd.grad(...) left it out"
    assert reasons(report) == {
        name: (PRUNED, why, line) for name in ("0.weight", "0.bias", "2.bias")
    }
    assert report.last.kind == "grad"


@pytest.mark.parametrize(
    ("name", "node"),
    [("zeros_relu", "ReluBackward0"), ("zeros_mask", "MulBackward0"), ("zeros_weight", "Addmm")],
)
def test_exact_zeros_name_the_node_and_line_where_they_began(
    torch: Any, tmp_path: Path, name: str, node: str
) -> None:
    path = write(tmp_path, name)
    report = watched(path)
    found = reasons(report)
    # With the encoder's output all zeros, the head's weight (whose gradient is that
    # output times the incoming gradient) gets zeros too, at the head's own node.
    assert set(found) - {"head.weight"} == {"enc.weight", "enc.bias"}
    if "head.weight" in found:
        assert found["head.weight"][0] == ZEROS
        assert "at AddmmBackward0 in head" in found["head.weight"][1]
    reason, why, line = found["enc.weight"]
    assert reason == ZEROS
    assert f"the gradient became all zeros at {node}" in why
    assert line == marked_line(path, "zeros")
    assert not report.found  # a gradient of zeros is a gradient


def test_parameters_are_named_by_the_modules_the_program_holds(torch: Any, tmp_path: Path) -> None:
    """Note [Which parameters]: parts of a model run directly (as ``forward_features``) are
    named from the model; another module held gets its variable's name; one that never
    ran (an EMA copy) is not looked at."""
    path = write(tmp_path, "parts")
    report = watched(path)
    use, dropped = marked_line(path, "use"), marked_line(path, "dropped")
    found = reasons(report)
    assert found == {
        "token": (NO_GRAD, "used only under torch.no_grad()", use),
        "enc.weight": (NO_GRAD, "used only under torch.no_grad()", use),
        "enc.bias": (NO_GRAD, "used only under torch.no_grad()", use),
        "value_head.weight": (UNREACHED, "the output of Linear never reaches the loss", dropped),
        "value_head.bias": (UNREACHED, "the output of Linear never reaches the loss", dropped),
    }


def test_one_model_with_every_reason(torch: Any, tmp_path: Path) -> None:
    path = write(tmp_path, "all")
    report = watched(path)
    found = reasons(report)
    by_param = {name.split(".")[0]: value for name, value in found.items()}
    assert by_param["frozen"][0] == FROZEN
    assert by_param["spare"][:2] == (NEVER_USED, "module spare was never called in this forward")
    assert by_param["teacher"] == (
        NO_GRAD,
        "used only under torch.no_grad()",
        marked_line(path, "use"),
    )
    assert by_param["cutter"] == (
        CUT,
        "cut by .detach() (the output of cutter) on the way to the loss",
        marked_line(path, "cut"),
    )
    assert by_param["aux"] == (
        UNREACHED,
        "the output of aux never reaches the loss",
        marked_line(path, "dropped"),
    )
    assert by_param["dead"][0] == ZEROS
    assert by_param["dead"][2] == marked_line(path, "zeros")
    assert by_param["temperature"] == (NEVER_USED, "module Net ran but never read it", None)
    assert "backbone" not in by_param and "head" not in by_param
    assert all(r.calls == 3 for r in report.findings())
    assert report.found


def test_watching_never_changes_the_gradients(torch: Any, tmp_path: Path) -> None:
    path = write(tmp_path, "all")
    plain, seen = tmp_path / "plain.pt", tmp_path / "watched.pt"
    assert run_script(str(path), [str(plain)]) == 0
    watched(path, str(seen))
    a, b = torch.load(plain), torch.load(seen)
    assert a.keys() == b.keys()
    for name in a:
        if a[name] is None:
            assert b[name] is None, name
        else:
            assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), name


def test_a_dropped_branch_is_freed_as_without_the_watch(torch: Any) -> None:
    """Note [What a forward log holds]: module outputs are held weakly, so a branch the
    program drops is freed at once, and its parameters are explained by their last use."""
    import gc
    import weakref

    torch.manual_seed(0)
    body, aux = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
    with watch_grads() as watch:
        h = body(torch.randn(6, 4))
        u = h * 2
        saved = weakref.ref(u)  # aux's node saves u, its input, for the weight's gradient
        out = aux(u)
        del u, out
        gc.collect()
        assert saved() is None
        h.sum().backward()
    found = {r.finding.parameter: r.finding for r in watch.report.findings()}
    assert set(found) == {"aux.weight", "aux.bias"}  # named by the variable that holds it
    assert found["aux.weight"].reason == UNREACHED
    assert found["aux.weight"].why == "what its last use made (in Linear) never reaches the loss"


def test_idioms_keep_their_results_and_nested_backward_counts(torch: Any, tmp_path: Path) -> None:
    """retain_graph, create_graph, a reentrant checkpoint (Note [Nested backward calls]) and
    an encoder's inference fast path under no_grad: same results, no false finding."""
    path = write(tmp_path, "idioms")
    plain, seen = tmp_path / "plain.pt", tmp_path / "watched.pt"
    assert run_script(str(path), [str(plain)]) == 0
    report = watched(path, str(seen))
    assert report.calls == 5
    assert report.missing == []
    a, b = torch.load(plain), torch.load(seen)
    for name in a:
        assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), name


COMPILED = """
import sys, torch
from torch import nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
cm = torch.compile(m, backend="aot_eager")
for _ in range(2):
    cm(torch.randn(5, 4)).sum().backward()
if sys.argv[1] != "-":
    torch.save({n: p.grad for n, p in m.named_parameters()}, sys.argv[1])
"""


def test_a_compiled_model_keeps_its_results_and_warns_nothing_more(
    torch: Any, tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    path = write(tmp_path, "compiled", COMPILED)
    plain, seen = tmp_path / "plain.pt", tmp_path / "watched.pt"
    assert run_script(str(path), [str(plain)]) == 0
    report = watched(path, str(seen))
    assert report.calls == 2 and report.findings() == []
    assert not [w for w in recwarn if "global hooks on modules" in str(w.message)]
    a, b = torch.load(plain), torch.load(seen)
    for name in a:
        assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), name


def test_a_module_run_on_another_thread_is_said_once(torch: Any) -> None:
    """A function mode belongs to a thread: what runs on another is not explained, in one
    warning (watching never stops silently)."""
    import threading

    lin = torch.nn.Linear(2, 1)
    with watch_grads() as watch, pytest.warns(RuntimeWarning, match="not explained"):
        worker = threading.Thread(target=lambda: lin(torch.ones(1, 2)).sum().backward())
        worker.start()
        worker.join()
    assert watch.report.calls == 0
    assert lin.weight.grad is not None
