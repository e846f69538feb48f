"""A part of a model called outermost by the model's own method (transformers' ``generate()``
runs ``self.encoder(...)``) is named as the model names it (Note [A module called by its
model's method] in ``autograd_viz/nan/forward/module_hooks.py``)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.nan.watch import watch_nan  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, bug: bool = False) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.bug = bug

    def forward(self, x: Any) -> Any:
        h = self.linear(x)
        return torch.sqrt(h - 100.0) if self.bug else torch.relu(h)


class Stack(torch.nn.Module):
    def __init__(self, bug: bool = False) -> None:
        super().__init__()
        self.block = torch.nn.ModuleList([Block(), Block(bug)])

    def forward(self, x: Any) -> Any:
        for block in self.block:
            x = block(x)
        return x


class EncoderDecoder(torch.nn.Module):
    def __init__(self, bug_in: str) -> None:
        super().__init__()
        self.encoder = Stack(bug_in == "encoder")
        self.decoder = Stack(bug_in == "decoder")

    def forward(self, x: Any, encoded: Any) -> Any:
        return self.decoder(x + encoded)

    def generate(self, x: Any, steps: int = 2) -> Any:
        encoded = self._encode(x)  # a part called outermost, from a method of the model
        for _ in range(steps):
            x = self(x, encoded)
        return x

    def _encode(self, x: Any) -> Any:
        return self.encoder(x)


def _module_of_first(bug_in: str, run: str) -> str | None:
    torch.manual_seed(0)
    model = EncoderDecoder(bug_in)
    x = torch.randn(2, 4)
    with torch.no_grad(), watch_nan() as watch:
        if run == "generate":
            model.generate(x)
        else:
            model.encoder(x)  # the program calls the part itself
    first = watch.report.first
    assert first is not None and first.aten_op == "aten.sqrt.default"
    return first.module


def test_generate_names_the_encoders_blocks_as_the_model_does() -> None:
    assert _module_of_first("encoder", "generate") == "encoder.block.1"
    assert _module_of_first("decoder", "generate") == "decoder.block.1"


def test_a_part_the_program_calls_itself_is_named_from_itself() -> None:
    assert _module_of_first("encoder", "encoder") == "block.1"


class Sqrt(torch.nn.Module):
    """A function wrapped as a module on the fly, as the ``kernels`` package does (``Func``)."""

    def forward(self, x: Any) -> Any:
        return torch.sqrt(x)


class MadeInForward(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return Sqrt()(self.linear(x) - 100.0)  # not a submodule: made in the forward


def test_a_module_made_in_a_forward_is_named_under_the_module_that_called_it() -> None:
    """As the bridge names it in pictures (``self_attn.Func``), not by its class alone."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(MadeInForward())
    with watch_nan() as watch:
        model(torch.randn(2, 4)).sum().backward()
    first = watch.report.first
    assert first is not None and first.aten_op == "aten.sqrt.default"
    assert first.module == "0.Sqrt"
