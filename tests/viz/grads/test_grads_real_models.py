"""``grads`` on real models with a frozen backbone or an unused head.

A stock ``nn.TransformerEncoder`` classifier runs everywhere PyTorch does; a
torchvision ResNet-18 linear probe, a transformers GPT-2 with a value head it
never uses and a timm ViT whose backbone runs under ``no_grad`` run where
those packages are installed (the project does not depend on them).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from autograd_viz.grads import GradsReport, watch_grads
from autograd_viz.grads.report import FROZEN, NEVER_USED, NO_GRAD, UNREACHED
from autograd_viz.launch.script import run_script

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

TRAIN = """
import sys
import torch

torch.manual_seed(0)


def train(model, batch, loss_of, steps=2):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss_of(model, batch).backward()
        opt.step()
    if sys.argv[1:2] and sys.argv[1] != "-":
        torch.save({n: p.grad for n, p in model.named_parameters()}, sys.argv[1])
"""

PROGRAMS = {
    "encoder": """
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
        self.backbone = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 3)
        self.aux_head = nn.Linear(32, 3)  # built, never called

    def forward(self, x):
        return self.head(self.backbone(x).mean(1))


model = Classifier()
model.backbone.requires_grad_(False)
x, y = torch.randn(4, 6, 32), torch.tensor([0, 1, 2, 0])
train(model, (x, y), lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]))
""",
    "resnet": """
import torchvision

model = torchvision.models.resnet18(weights=None, num_classes=5)
for name, p in model.named_parameters():
    p.requires_grad_(name.startswith("fc."))  # a linear probe
x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 4])
train(model, (x, y), lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]))
""",
    "gpt2": """
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel


class WithValueHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64))
        self.value_head = nn.Linear(32, 1)

    def forward(self, ids):
        out = self.lm(ids, labels=ids, output_hidden_states=True)
        self.value_head(out.hidden_states[-1])  # computed, then dropped: the bug
        return out.loss


model = WithValueHead()
ids = torch.randint(0, 64, (2, 8))
train(model, ids, lambda m, b: m(b))
""",
    "vit": """
import timm

model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=4, img_size=32)
x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])


def loss_of(m, b):
    with torch.no_grad():
        features = m.forward_features(b[0])
    return torch.nn.functional.cross_entropy(m.forward_head(features), b[1])


train(model, (x, y), loss_of)
""",
}

NEEDS = {"resnet": "torchvision", "gpt2": "transformers", "vit": "timm"}


def watched(tmp_path: Path, name: str) -> tuple[GradsReport, dict[str, Any], dict[str, Any]]:
    """The report of ``name`` run under the watch, and its gradients with and without it."""
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    import torch

    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(TRAIN) + textwrap.dedent(PROGRAMS[name]))
    plain, seen = tmp_path / "plain.pt", tmp_path / "seen.pt"
    assert run_script(str(script), [str(plain)]) == 0
    with watch_grads() as watch:
        assert run_script(str(script), [str(seen)]) == 0
    return watch.report, torch.load(plain), torch.load(seen)


def by_reason(report: GradsReport) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for repeated in report.findings():
        found.setdefault(repeated.finding.reason, set()).add(repeated.finding.parameter)
    return found


def same_gradients(plain: dict[str, Any], seen: dict[str, Any]) -> bool:
    import torch

    return plain.keys() == seen.keys() and all(
        (plain[n] is None and seen[n] is None) or torch.equal(plain[n], seen[n]) for n in plain
    )


def test_a_frozen_encoder_and_a_head_never_called(torch: Any, tmp_path: Path) -> None:
    report, plain, seen = watched(tmp_path, "encoder")
    found = by_reason(report)
    assert found[NEVER_USED] == {"aux_head.weight", "aux_head.bias"}
    assert found[FROZEN] == {n for n in plain if n.startswith("backbone.")}
    assert report.found  # a trainable parameter got no gradient: exit status 1
    assert same_gradients(plain, seen)


def test_a_resnet_linear_probe_lists_its_backbone_frozen(torch: Any, tmp_path: Path) -> None:
    report, plain, seen = watched(tmp_path, "resnet")
    found = by_reason(report)
    assert set(found) == {FROZEN}
    assert found[FROZEN] == {n for n in plain if not n.startswith("fc.")}
    assert not report.found
    assert same_gradients(plain, seen)


def test_a_gpt2_value_head_whose_output_is_dropped(torch: Any, tmp_path: Path) -> None:
    report, plain, seen = watched(tmp_path, "gpt2")
    found = by_reason(report)
    assert found == {UNREACHED: {"value_head.weight", "value_head.bias"}}
    assert report.found
    assert same_gradients(plain, seen)


def test_a_vit_backbone_run_without_grad(torch: Any, tmp_path: Path) -> None:
    report, plain, seen = watched(tmp_path, "vit")
    found = by_reason(report)
    assert set(found) == {NO_GRAD}
    assert found[NO_GRAD] == {n for n in plain if not n.startswith("head.")}
    assert report.found
    assert same_gradients(plain, seen)
