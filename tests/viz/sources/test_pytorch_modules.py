"""PyTorch's modules in a trace: every node's module path and call, found with module hooks.

Real architectures from ``torch.nn`` alone: a 12-layer ``nn.TransformerEncoder``,
a ResNet-style stack of residual blocks, an unrolled ``GRUCell``, a module used
at two places, a loss module beside the model and two separate models.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

from autograd_viz.sources import once
from autograd_viz.sources.pytorch import module_calls as tracking
from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace
from autograd_viz.trace.recording import record


def _recorded(step: Callable[[], Any]) -> GraphTaskInfo:
    """The one graph task of ``step()``, forward and backward recorded."""
    with record() as trace:
        step()
    (info,) = trace.graph_tasks.values()
    return info


def _made(info: GraphTaskInfo) -> list[NodeInfo]:
    """The nodes the forward made (not the leaves)."""
    return [n for n in info.nodes.values() if n.leaf is None]


def _leaves(info: GraphTaskInfo) -> dict[str, NodeInfo]:
    return {n.leaf.name: n for n in info.nodes.values() if n.leaf is not None and n.leaf.name}


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.grad``, which the backward just run has set."""
    assert tensor.grad is not None, "the backward left no gradient"
    return tensor.grad


def _check_consistent(info: GraphTaskInfo) -> None:
    """What every graph must satisfy: paths listed, a parameter named after its module."""
    for node in info.nodes.values():
        for path, call in node.scope:
            assert path in info.modules and call >= 0
    for name, leaf in _leaves(info).items():
        if leaf.scope and len(leaf.scope) > 1:
            assert name.startswith(leaf.scope[-1][0] + "."), (name, leaf.scope)


class _Block(nn.Module):
    """A residual block: conv, norm, relu, conv, norm, plus the input."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x: Any) -> Any:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + x)


class _ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer1 = nn.Sequential(_Block(4), _Block(4))
        self.layer2 = nn.Sequential(_Block(4), _Block(4))
        self.fc = nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


def test_a_12_layer_transformer_encoder() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
    x = torch.randn(2, 5, 16)

    info = _recorded(lambda: model(x).pow(2).mean().backward())
    _check_consistent(info)
    assert info.modules["model"] == "TransformerEncoder"
    for i in range(12):
        assert info.modules[f"layers.{i}"] == "TransformerEncoderLayer"
        assert info.modules[f"layers.{i}.self_attn"] == "MultiheadAttention"
        assert info.modules[f"layers.{i}.linear1"] == "Linear"
    made = _made(info)
    outside = [n.name for n in made if not n.scope]
    assert sorted(outside) == ["MeanBackward0", "PowBackward0"]  # the loss, written inline
    inside = [n for n in made if n.scope]
    assert all(n.scope[0] == ("model", 0) for n in inside)
    by_layer: dict[str, int] = {}
    for node in inside:
        if len(node.scope) > 1:
            by_layer[node.scope[1][0]] = by_layer.get(node.scope[1][0], 0) + 1
    # Every layer made the same nodes (the first fewer: its input needs no gradient).
    assert sorted(by_layer) == sorted(f"layers.{i}" for i in range(12))
    assert len({by_layer[f"layers.{i}"] for i in range(1, 12)}) == 1
    leaves = _leaves(info)
    assert leaves["layers.3.linear1.weight"].scope == (
        ("model", 0),
        ("layers.3", 0),
        ("layers.3.linear1", 0),
    )
    # out_proj is never called (MultiheadAttention reads its weight): its parameter goes to
    # the innermost module called above it.
    assert leaves["layers.3.self_attn.out_proj.weight"].scope[-1] == ("layers.3.self_attn", 0)
    assert len(leaves) == 12 * 12


def test_a_resnet_style_stack_of_residual_blocks() -> None:
    torch.manual_seed(0)
    model = _ResNet()
    x = torch.randn(2, 3, 8, 8)
    info = _recorded(lambda: model(x).sum().backward())
    _check_consistent(info)
    assert info.modules["model"] == "_ResNet"
    assert info.modules["layer1.0"] == "_Block" and info.modules["layer2.1.bn2"] == "BatchNorm2d"
    innermost: dict[str, list[str]] = {}
    for node in _made(info):
        if node.scope:
            innermost.setdefault(node.scope[-1][0], []).append(node.name)
    # The residual add and the relus are the block's own; the convolutions its convs'.
    assert sorted(innermost["layer1.0"]) == ["AddBackward0", "ReluBackward0", "ReluBackward0"]
    assert innermost["layer2.1.conv2"] == ["ConvolutionBackward0"]
    assert "NativeBatchNormBackward0" in innermost["layer1.1.bn1"]
    assert "MeanBackward1" in innermost["model"]
    leaf = _leaves(info)["layer2.0.bn1.weight"]
    assert leaf.scope == (("model", 0), ("layer2", 0), ("layer2.0", 0), ("layer2.0.bn1", 0))


class _Unrolled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(3, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, xs: Any) -> Any:
        h = torch.zeros(xs.shape[1], 4)
        for x in xs:
            h = self.cell(x, h)
        return self.head(h)


def test_an_unrolled_gru_cell_gets_one_call_per_step() -> None:
    torch.manual_seed(0)
    model = _Unrolled()
    xs = torch.randn(7, 2, 3)
    info = _recorded(lambda: model(xs).sum().backward())
    _check_consistent(info)
    assert info.modules["cell"] == "GRUCell"
    calls = sorted({n.scope[-1][1] for n in _made(info) if n.scope and n.scope[-1][0] == "cell"})
    assert calls == list(range(7))
    # Each step made the same nodes.
    per_step: dict[int, list[str]] = {}
    for node in _made(info):
        if node.scope and node.scope[-1][0] == "cell":
            per_step.setdefault(node.scope[-1][1], []).append(node.name)
    assert len({tuple(sorted(names)) for names in per_step.values()}) == 1
    for name in ("cell.weight_ih", "cell.weight_hh", "cell.bias_ih", "cell.bias_hh"):
        assert _leaves(info)[name].scope == (("model", 0), ("cell", 0))


class _Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.mid = nn.Tanh()

    def forward(self, x: Any) -> Any:
        return self.proj(self.mid(self.proj(x)))


def test_a_module_used_at_two_places_gets_calls_0_and_1() -> None:
    torch.manual_seed(0)
    model = _Shared()
    x = torch.randn(2, 3)
    info = _recorded(lambda: model(x).sum().backward())
    _check_consistent(info)
    addmm = sorted(
        (n for n in _made(info) if n.name == "AddmmBackward0"), key=lambda n: n.sequence_nr
    )
    assert [n.scope for n in addmm] == [(("model", 0), ("proj", c)) for c in (0, 1)]
    assert _leaves(info)["proj.weight"].scope == (("model", 0), ("proj", 0))


def test_a_loss_module_beside_the_model_gets_a_path_of_its_own() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    criterion = nn.CrossEntropyLoss()
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 1])
    info = _recorded(lambda: criterion(model(x), y).backward())
    _check_consistent(info)
    assert info.modules == {
        "model": "Sequential",
        "0": "Linear",
        "1": "ReLU",
        "2": "Linear",
        "criterion": "CrossEntropyLoss",
    }
    assert {n.scope[0][0] for n in _made(info)} == {"model", "criterion"}
    assert sorted(_leaves(info)) == ["0.bias", "0.weight", "2.bias", "2.weight"]


def test_a_model_bound_to_the_name_of_its_own_submodule_is_named_by_its_class() -> None:
    class ForCausalLM(nn.Module):  # as transformers' LlamaForCausalLM holds its LlamaModel
        def __init__(self) -> None:
            super().__init__()
            self.model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
            self.head = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.model(x))

    torch.manual_seed(0)
    model = ForCausalLM()
    info = _recorded(lambda: model(torch.randn(5, 3)).sum().backward())
    _check_consistent(info)
    assert info.modules == {"ForCausalLM": "ForCausalLM", "model": "Sequential",
                            "model.0": "Linear", "model.1": "Tanh", "head": "Linear"}  # fmt: skip
    tanh = next(n for n in _made(info) if n.name == "TanhBackward0")
    assert tanh.scope == (("ForCausalLM", 0), ("model", 0), ("model.1", 0))
    assert sorted(_leaves(info)) == ["head.bias", "head.weight", "model.0.bias", "model.0.weight"]


def test_two_separate_models_prefix_their_paths_as_their_parameters() -> None:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    head = nn.Linear(3, 1)
    info = _recorded(lambda: head(block(torch.randn(2, 3))).sum().backward())
    _check_consistent(info)
    assert info.modules == {"block": "Sequential", "block.0": "Linear", "block.1": "Tanh",
                            "head": "Linear"}  # fmt: skip
    assert sorted(_leaves(info)) == ["block.0.bias", "block.0.weight", "head.bias", "head.weight"]
    assert _leaves(info)["head.weight"].scope == (("head", 0),)


def test_two_unnamed_models_of_one_class_are_told_apart() -> None:
    torch.manual_seed(0)
    pair = [nn.Linear(3, 3), nn.Linear(3, 1)]

    def step() -> None:
        pair[1](pair[0](torch.randn(2, 3))).sum().backward()

    info = _recorded(step)
    assert info.modules == {"Linear": "Linear", "Linear#2": "Linear"}
    assert sorted(_leaves(info)) == ["Linear#2.bias", "Linear#2.weight", "Linear.bias",
                                     "Linear.weight"]  # fmt: skip


def test_watching_modules_changes_no_gradient_and_leaves_no_hook() -> None:
    def grads(watched: bool) -> list[Any]:
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        model = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
        x = torch.randn(2, 5, 16)
        if watched:
            with record():
                model(x).pow(2).mean().backward()
        else:
            model(x).pow(2).mean().backward()
        return [_grad(p).clone() for p in model.parameters()]

    plain, watched = grads(False), grads(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    hooks = torch.nn.modules.module
    assert not hooks._global_forward_pre_hooks and not hooks._global_forward_hooks


def test_a_forward_before_recording_has_no_modules_and_says_so() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    loss = model(torch.randn(2, 3)).sum()
    once.said.clear()
    with pytest.warns(RuntimeWarning, match="record the forward pass too"), record() as trace:
        loss.backward()
    (info,) = trace.graph_tasks.values()
    assert info.modules == {} and all(not n.scope for n in info.nodes.values())
    assert sorted(_leaves(info)) == ["0.bias", "0.weight", "1.bias", "1.weight"]


class _Fails(nn.Module):
    def forward(self, x: Any) -> Any:
        raise ValueError("this forward fails")


def test_a_forward_that_raises_leaves_the_stack_as_it_was() -> None:
    torch.manual_seed(0)
    outer = nn.Sequential(nn.Linear(3, 3), _Fails())
    model = nn.Sequential(nn.Linear(3, 1))
    x = torch.randn(2, 3)
    with record() as trace:
        with pytest.raises(ValueError, match="this forward fails"):
            outer(x)
        model(x).sum().backward()
    (info,) = trace.graph_tasks.values()
    assert info.modules == {"model": "Sequential", "0": "Linear"}


def test_hostile_class_names_are_kept_as_text(tmp_path: Path) -> None:
    from tests.hostile.names import HOSTILE

    torch.manual_seed(0)
    names = [HOSTILE[key] for key in ("rich_close", "dot_break", "osc_title", "newlines")]
    layers = [type(name, (nn.Linear,), {})(2, 2) for name in names]
    model = nn.Sequential(*layers)
    info = _recorded(lambda: model(torch.randn(1, 2)).sum().backward())
    assert [info.modules[str(i)] for i in range(len(names))] == names
    with record() as trace:
        model(torch.randn(1, 2)).sum().backward()
    trace.save(tmp_path / "t.jsonl")
    assert Trace.load(tmp_path / "t.jsonl") == trace


def test_old_changes_are_dropped_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracking, "MAX_CHANGES", 64)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    x = torch.randn(1, 2)
    with record(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(200):
            model(x)
        info = _recorded(lambda: model(x).sum().backward())
    assert len(tracking._local().starts) <= 64
    assert info.modules == {"model": "Sequential", "0": "Linear", "1": "Tanh"}


def test_a_graph_drawn_before_backward_has_its_modules() -> None:
    from autograd_viz.draw.model.graph_view import from_graph
    from autograd_viz.sources.pytorch.graph import unrun_graph

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    with record():
        out = model(torch.randn(2, 3)).sum()
        view = from_graph(unrun_graph([out]))
    assert view.modules == {"model": "Sequential", "0": "Linear", "1": "Tanh"}
    names = {n.info.name: n.info.scope for n in view.nodes.values()}
    assert names["TanhBackward0"] == (("model", 0), ("1", 0))


class _MakesItsOwn(nn.Module):
    """A layer that makes a module in its forward, and a model whose forward makes a loss."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: Any) -> Any:
        return nn.GELU()(self.lin(x))


class _WithLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = _MakesItsOwn()

    def forward(self, x: Any) -> Any:
        return nn.MSELoss()(self.encoder(x), torch.zeros(2, 3))


def test_a_module_made_in_a_forward_is_named_under_its_caller() -> None:
    torch.manual_seed(0)
    model = _WithLoss()
    info = _recorded(lambda: model(torch.randn(2, 3)).backward())
    _check_consistent(info)
    assert info.modules == {
        "model": "_WithLoss",
        "encoder": "_MakesItsOwn",
        "encoder.lin": "Linear",
        "encoder.GELU": "GELU",
        "MSELoss": "MSELoss",
    }
    (gelu,) = [n for n in _made(info) if n.name == "GeluBackward0"]
    assert gelu.scope == (("model", 0), ("encoder", 0), ("encoder.GELU", 0))


def test_a_live_session_follows_the_modules_of_its_programs_thread() -> None:
    from autograd_viz.live import LiveSession

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
    scale = torch.tensor(2.0, requires_grad=True)

    def program() -> None:
        x = torch.randn(2, 3) * scale  # made on this thread before its first module call
        model(x).sum().backward()

    once.said.clear()
    with LiveSession(program) as session:
        session.run_to_end(timeout=60)
    assert session.error is None and not once.said
    (info,) = session.trace.graph_tasks.values()
    assert info.modules == {"model": "Sequential", "0": "Linear", "1": "Tanh"}
    (tanh,) = [n for n in _made(info) if n.name == "TanhBackward0"]
    assert tanh.scope == (("model", 0), ("1", 0))
    (mul,) = [n for n in _made(info) if n.name == "MulBackward0"]
    assert mul.scope == ()


def test_a_model_freed_before_backward_still_names_and_places_its_parameters() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    freed = []
    parameters: list[weakref.ref[Any]] = []

    def step() -> None:
        model = _ResNet()
        gone = weakref.ref(model)
        parameters.extend(weakref.ref(p) for p in model.parameters())
        loss = model(x).sum()
        del model  # nothing else holds the model: only the graph keeps its parameters
        freed.append(gone() is None)
        loss.backward()

    info = _recorded(step)
    assert freed == [True]
    _check_consistent(info)
    leaves = _leaves(info)
    assert sorted(leaves) == sorted(name for name, _ in _ResNet().named_parameters())
    leaf = leaves["layer2.0.bn1.weight"]
    assert leaf.scope == (("_ResNet", 0), ("layer2", 0), ("layer2.0", 0), ("layer2.0.bn1", 0))
    assert leaves["fc.bias"].scope == (("_ResNet", 0), ("fc", 0))
    gc.collect()
    assert all(ref() is None for ref in parameters), "the names keep no parameter alive"


class _Checkpointed(nn.Module):
    """Two residual blocks, each run through ``torch.utils.checkpoint``."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(4) for _ in range(2))
        self.fc = nn.Linear(4, 2)
        self.reentrant = reentrant

    def forward(self, x: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=self.reentrant)
        return self.fc(x.mean(dim=(2, 3)))


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_a_checkpointed_block_run_again_in_backward_keeps_its_path(reentrant: bool) -> None:
    # The block's forward runs again inside the backward with no call of the model around
    # it (Note [A submodule called outermost]): it is named by the model's path for it.
    torch.manual_seed(0)
    model = _Checkpointed(reentrant)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    with record() as trace:
        model(x).sum().backward()
    expected = {(i, part) for i in range(2) for part in ("conv1", "bn1", "conv2", "bn2")}
    found = set()
    for info in trace.graph_tasks.values():
        _check_consistent(info)
        for node in _made(info):
            for path, _call in node.scope:
                assert not path.startswith("_Block"), path  # never a model of its own
                parts = path.split(".")
                if len(parts) == 3 and parts[0] == "layers":
                    found.add((int(parts[1]), parts[2]))
        for name in _leaves(info):
            assert name == "x" or name.startswith(("layers.", "fc.", "tensor[")), name
    assert found == expected
    assert len(trace.graph_tasks) == (3 if reentrant else 1)
    reference = _Checkpointed(reentrant)
    reference.load_state_dict(model.state_dict())
    x2 = x.detach().clone().requires_grad_()
    reference(x2).sum().backward()
    assert torch.equal(_grad(x), _grad(x2))  # watched, the same gradient, bit for bit
