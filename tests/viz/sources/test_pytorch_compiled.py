"""``torch.compile``d models under ``record``, ``watch_nan`` and ``autograd-viz nan``.

Regions stay compiled (one graph, as unwatched), results are bit-identical,
nothing is logged that the plain run does not log, the backward shows
``CompiledFunctionBackward`` with its values, and the NaN checks look at a
region's edges (or inside it, run eagerly, when asked).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")
pytest.importorskip("torch._dynamo")

from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.nan.forward import compiled as forward_compiled
from autograd_viz.nan.watch import watch_nan
from autograd_viz.sources import once
from autograd_viz.trace.recording import record

BACKENDS = [
    "eager",
    "aot_eager",
    pytest.param("inductor", marks=pytest.mark.slow),  # a C compile: tens of seconds here
]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = torch.nn.Linear(8, 16)
        self.lin2 = torch.nn.Linear(16, 4)

    def forward(self, x: Any) -> Any:
        return self.lin2(torch.nn.functional.gelu(self.lin1(x)))


class LogOfZero(torch.nn.Module):
    """``log`` of a ReLU: -inf born inside the compiled region."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return torch.log(self.lin(x).relu())


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.grad``, which the backward just run has set."""
    assert tensor.grad is not None, "the backward left no gradient"
    return tensor.grad


def _train(backend: str) -> tuple[list[bytes], int]:
    """One compiled step: the gradients' bytes and how many graphs Dynamo compiled."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(5, 8)
    compiled(x).pow(2).mean().backward()
    graphs = int(counters["stats"]["unique_graphs"])
    return [_grad(p).numpy().tobytes() for p in model.parameters()], graphs


@contextmanager
def _said() -> Iterator[tuple[list[str], list[str]]]:
    """The warnings and PyTorch's log records while the block runs."""
    logs: list[str] = []

    class Keep(logging.Handler):
        def emit(self, log: logging.LogRecord) -> None:
            logs.append(log.getMessage())

    handler = Keep(logging.WARNING)
    logger = logging.getLogger("torch")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lines: list[str] = []
            yield lines, logs
            lines.extend(str(w.message) for w in caught)
    finally:
        logger.removeHandler(handler)


Watching = Callable[[Callable[[], Any]], Any]


def _recorded(step: Callable[[], Any]) -> Any:
    with record():
        return step()


def _nan_watched(step: Callable[[], Any]) -> Any:
    with watch_nan():
        return step()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("watching", [_recorded, _nan_watched], ids=["record", "watch_nan"])
def test_compiled_model_stays_compiled_and_bit_identical(
    backend: str, watching: Watching, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _said() as (plain_lines, plain_logs):
        plain, plain_graphs = _train(backend)
    monkeypatch.setattr(once, "said", set())
    with _said() as (lines, logs):
        watched, graphs = watching(lambda: _train(backend))
    assert watched == plain
    assert graphs == plain_graphs == 1
    assert logs == plain_logs
    ours = [line for line in lines if line not in plain_lines]
    if watching is _recorded:  # the backward AOTAutograd traces on fake tensors never ran
        with record() as trace:
            _train(backend)
        assert len(trace.graph_tasks) == 1
    if watching is _nan_watched:
        assert ours == [forward_compiled.INSIDE_NOT_CHECKED]
    else:
        assert ours == []


def test_the_backward_shows_the_compiled_region_with_its_values() -> None:
    torch._dynamo.reset()
    model = Net()
    compiled = torch.compile(model, backend="aot_eager")
    with record() as trace:
        compiled(torch.randn(5, 8)).sum().backward()
    starts = [e for e in trace.events if e.kind == "node_start"]
    ends = [e for e in trace.events if e.kind == "node_end"]
    (start,) = [e for e in starts if e.node_name == "CompiledFunctionBackward"]
    (end,) = [e for e in ends if e.node_name == "CompiledFunctionBackward"]
    assert start.data["inputs"][0].shape == (5, 4) and start.data["inputs"][0].min is not None
    shapes = sorted(s.shape for s in end.data["outputs"] if s is not None)
    assert shapes == sorted(tuple(p.shape) for p in model.parameters())


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_birth_inside_a_region_is_found_at_its_boundary(backend: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(LogOfZero(), backend=backend)
    with watch_nan() as watch:
        compiled(torch.randn(3, 4)).clamp(min=-10).sum().backward()
    first = watch.report.first
    assert first is not None
    assert (first.phase, first.value, first.op) == ("forward", "inf", "compiled LogOfZero")
    expected = "CompiledFunctionBackward" if backend == "aot_eager" else "LogBackward0"
    assert first.node.name == expected
    assert first.module == "LogOfZero"  # the program's module, not OptimizedModule


class Outer(torch.nn.Module):
    """A model with a compiled part: ``encoder`` is an ``OptimizedModule``."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.compile(LogOfZero(), backend="aot_eager")

    def forward(self, x: Any) -> Any:
        return self.encoder(x)


@pytest.mark.parametrize("eager_compiled", [False, True])
def test_a_compiled_part_of_a_model_is_named_by_its_path(eager_compiled: bool) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Outer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what each way says is tested above
        with watch_nan(eager_compiled=eager_compiled) as watch:
            model(torch.randn(3, 4)).clamp(min=-10).sum().backward()
    first = watch.report.first
    assert first is not None
    # model.encoder, not encoder._orig_mod (the ops run inside it when run eagerly)
    assert first.module == "encoder"


def _leaves(trace: Any) -> list[str]:
    (task,) = trace.graph_tasks.values()
    return sorted(n.leaf.name for n in task.nodes.values() if n.leaf is not None)


def _compiled_net_step() -> tuple[Any, Any]:
    """One recorded step of an eager-compiled :class:`Net`: the model and its trace."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, backend="eager")
    with record() as trace:
        compiled(torch.randn(5, 8)).sum().backward()
    return model, trace


def test_a_compiled_models_trace_names_it_as_the_program_does() -> None:
    model, trace = _compiled_net_step()
    (task,) = trace.graph_tasks.values()
    # model: Net, not compiled: OptimizedModule; fc.bias, not _orig_mod.fc.bias
    # No call of lin1 made a node; its class comes from the model, for its parameters' box.
    assert dict(task.modules) == {"model": "Net", "lin1": "Linear", "lin2": "Linear"}
    assert _leaves(trace) == sorted(name for name, _ in model.named_parameters())
    tree = ModuleTree.of_view(from_state(trace.state_at(len(trace))))
    assert [(tree.scopes[i].name, tree.scopes[i].kind) for i in tree.roots] == [("model", "Net")]
    assert {(s.path, s.kind) for s in tree.scopes} >= {("lin1", "Linear"), ("lin2", "Linear")}
    # Every view takes the names it shows.
    graph = autograd_viz.to_dot(trace, around="lin1.bias", depth=2).source
    assert "within 2 edges of lin1.bias" in graph
    assert "<B>model</B> <I>Net</I>" in autograd_viz.to_dot(trace, around="model", depth=1).source
    assert "_orig_mod" not in autograd_viz.to_dot(trace).source
    assert "OptimizedModule" not in autograd_viz.to_dot(trace, expand="all").source


def test_the_tuis_module_tree_names_a_compiled_model_as_the_program_does() -> None:
    from textual.pilot import Pilot

    from tests.viz.tui.tuiting import node_list, replay_app, run_app

    _model, trace = _compiled_net_step()
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        assert nodes.view == "tree"
        headings = [row.heading for row in nodes.rows if row.node_id is None]
        assert any(h.startswith("model · Net · ") for h in headings), headings
        text = " ".join(nodes.row_text(i).plain for i in range(len(nodes.rows)))
        assert "lin1.bias" in text
        assert "OptimizedModule" not in text and "_orig_mod" not in text

    # Wide enough that no name is cut: after thousands of earlier tests in one process
    # node ids have seven digits, and at 120 columns the list cut "Acc(lin1.bias)".
    run_app(app, actions, size=(220, 40))


def test_a_compiled_model_bound_to_no_other_name_is_named_by_its_class() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(Net(), backend="eager")
    with record() as trace:
        compiled(torch.randn(5, 8)).sum().backward()
    (task,) = trace.graph_tasks.values()
    assert dict(task.modules) == {"compiled": "Net", "lin1": "Linear", "lin2": "Linear"}
    assert _leaves(trace) == ["lin1.bias", "lin1.weight", "lin2.bias", "lin2.weight"]


def test_a_compiled_part_of_a_models_trace_is_named_by_its_path() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Outer()
    with record() as trace:
        model(torch.randn(3, 4)).clamp(min=-10).sum().backward()
    (task,) = trace.graph_tasks.values()
    assert dict(task.modules) == {
        "model": "Outer",
        "encoder": "LogOfZero",
        "encoder.lin": "Linear",
    }
    assert _leaves(trace) == ["encoder.lin.bias", "encoder.lin.weight"]
    graph = autograd_viz.to_dot(trace, around="encoder.lin.bias", depth=2).source
    assert "within 2 edges of encoder.lin.bias" in graph


def test_eager_compiled_checks_each_op_inside_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(LogOfZero(), backend="aot_eager")
    monkeypatch.setattr(once, "said", set())
    with _said() as (lines, _), watch_nan(eager_compiled=True) as watch:
        compiled(torch.randn(3, 4)).clamp(min=-10).sum().backward()
    assert forward_compiled.RUNS_EAGERLY in lines
    assert forward_compiled.INSIDE_NOT_CHECKED not in lines
    first = watch.report.first
    assert first is not None and first.aten_op == "aten.log.default"
    assert first.cause == "log of 0"
    assert first.module == "LogOfZero"
    assert torch.compiler.is_compiling() is False  # the stance is back to default
    from torch._dynamo.eval_frame import _stance

    assert _stance.stance == "default"


def test_compiled_autograd_is_said_and_watching_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(once, "said", set())
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)

    def step() -> Any:
        model.zero_grad()
        model(x).pow(2).sum().backward()
        return _grad(model.weight).clone()

    plain = step()
    with _said() as (lines, _), record() as trace:
        with torch._dynamo.compiled_autograd._enable(torch.compile(backend="eager")):
            under_compiled_autograd = step()
        after = step()
    assert torch.equal(under_compiled_autograd, plain) and torch.equal(after, plain)
    assert lines == [
        "autograd-viz: cannot watch a backward call: compiled autograd runs this backward"
    ]
    assert len(trace.graph_tasks) == 1  # the later, ordinary backward


class Sums(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.lin(x).relu().sum(dim=-1)


def _export_and_train() -> list[bytes]:
    torch.manual_seed(0)
    model = Sums()
    exported = torch.export.export(model, (torch.randn(2, 4),))
    exported.module()(torch.randn(2, 4))
    model(torch.randn(2, 4)).sum().backward()
    return [_grad(p).numpy().tobytes() for p in model.parameters()]


@pytest.mark.parametrize("watching", [_recorded, _nan_watched], ids=["record", "watch_nan"])
def test_torch_export_logs_nothing_more_and_changes_nothing(watching: Watching) -> None:
    with _said() as (plain_lines, plain_logs):
        plain = _export_and_train()
    with _said() as (lines, logs):
        watched = watching(_export_and_train)
    assert watched == plain
    assert logs == plain_logs
    assert [line for line in lines if line not in plain_lines] == []


def test_a_birth_in_a_regions_backward_is_found_on_compiled_function_backward() -> None:
    torch._dynamo.reset()

    def root(x: Any) -> Any:
        return torch.sqrt(x) * 3  # finite forward at 0; the backward divides by 0

    compiled = torch.compile(root, backend="aot_eager")
    x = torch.zeros(3, requires_grad=True)
    with watch_nan() as watch:
        compiled(x).sum().backward()
    first = watch.report.first
    assert first is not None
    assert (first.phase, first.value, first.node.name) == (
        "backward",
        "inf",
        "CompiledFunctionBackward",
    )
    assert torch.isinf(_grad(x)).all()


def _program_calls(trace: Any) -> list[int | None]:
    return [info.call for info in trace.graph_tasks.values() if info.parent is None]


def test_the_backward_aot_traces_while_compiling_is_not_a_call_of_the_program() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(Net(), backend="aot_eager")
    x = torch.randn(5, 8)
    with record(steps="0") as first:  # the first call compiles: its fake backward comes first
        compiled(x).sum().backward()
    (task,) = first.graph_tasks.values()
    assert _program_calls(first) == [0]
    names = {e.node_name for e in first.events if e.graph_task == task.id}
    assert "CompiledFunctionBackward" in names
    torch._dynamo.reset()
    compiled = torch.compile(Net(), backend="aot_eager")
    with record() as every:
        for _ in range(2):
            compiled(x).sum().backward()
    assert _program_calls(every) == [0, 1]
