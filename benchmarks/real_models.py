"""What recording costs on stock models, beside ``detect_anomaly`` and the profiler.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.real_models [--models gpt2,bert]
     [--repeat 3] [--steps 4]

Needs ``transformers`` (GPT-2, BERT) and ``timm`` or ``torchvision`` (ViT, ResNet-18),
as a user's environment has them; a model whose library is missing is said and left
out. Each is built from a config, small enough for a CPU, with no download:

* ``gpt2``: GPT-2, 4 layers, 256 wide, its vocabulary of 50,257 (input and output
  embeddings one tensor, as the stock model ties them), batch 2 × 64 tokens;
* ``bert``: BERT for masked language modelling, 4 layers, 256 wide, tied likewise;
* ``vit``: timm's ViT-Tiny/16 at 64×64, 10 classes, batch 2;
* ``resnet``: torchvision's ResNet-18 at 64×64, 10 classes, batch 4.

Each way is entered once for a block of ``--steps`` training steps (as a training run
enters it once), the blocks of the ways interleaved, the first step of a block not
counted; the figure is the backward's thread CPU time (a CPU backward with one
intra-op thread runs on the calling thread), the collector off during it:

* plain PyTorch;
* ``record()``, every gradient summarized, the trace kept for the block;
* ``record(values="none")``;
* ``torch.autograd.detect_anomaly()``;
* ``torch.profiler.profile()``, CPU activities, as a user starts it (stopped, and
  its table of averages made, after the block: not timed).

Prints the median of the counted steps per way, and each against plain.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import autograd_viz

MODELS = ("gpt2", "bert", "vit", "resnet")
Loss = Callable[[], torch.Tensor]


def build(name: str) -> tuple[str, torch.nn.Module, Loss]:
    """``(label, model, one forward to its loss)``; ImportError if its library is missing."""
    torch.manual_seed(0)
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4))
        ids = torch.randint(0, 50257, (2, 64))
        return "GPT-2, 4 layers × 256, tied embeddings", gpt2, lambda: gpt2(ids, labels=ids).loss
    if name == "bert":
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(
            hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512
        )
        bert = BertForMaskedLM(config)
        text = torch.randint(0, config.vocab_size, (2, 64))
        return "BERT MLM, 4 layers × 256, tied", bert, lambda: bert(text, labels=text).loss
    images = torch.randn(4, 3, 64, 64)
    labels = torch.tensor([1, 2, 3, 4])
    if name == "vit":
        import timm

        vit = timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=64
        )
        return (
            "ViT-Tiny/16 at 64×64",
            vit,
            lambda: torch.nn.functional.cross_entropy(vit(images[:2]), labels[:2]),
        )
    if name == "resnet":
        import torchvision

        resnet = torchvision.models.resnet18(weights=None, num_classes=10)
        return (
            "ResNet-18 at 64×64",
            resnet,
            lambda: torch.nn.functional.cross_entropy(resnet(images), labels),
        )
    raise SystemExit(f"unknown model {name!r}; one of {', '.join(MODELS)}")


@contextlib.contextmanager
def _anomaly() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its one warning that anomaly mode is slow
        with torch.autograd.detect_anomaly():
            yield


@contextlib.contextmanager
def _profiled() -> Iterator[None]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        yield
    prof.key_averages()  # what a user reads of it


WAYS: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "plain": contextlib.nullcontext,
    "record()": autograd_viz.record,
    'record(values="none")': lambda: autograd_viz.record(values="none"),
    "detect_anomaly()": _anomaly,
    "torch.profiler": _profiled,
}


def measure(model: torch.nn.Module, loss: Loss, repeat: int, steps: int) -> dict[str, float]:
    """Each way's median backward seconds over its counted steps."""
    samples: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(repeat):
        for way, context in WAYS.items():
            with context():
                for index in range(steps):
                    model.zero_grad(set_to_none=True)
                    value = loss()
                    gc.collect()
                    gc.disable()
                    try:
                        started = time.thread_time()
                        value.backward()
                        taken = time.thread_time() - started
                    finally:
                        gc.enable()
                    if index:  # the first step of a block pays for entering the way
                        samples[way].append(taken)
    return {way: statistics.median(times) for way, times in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="blocks per way")
    parser.add_argument("--steps", type=int, default=4, help="steps per block, the first uncounted")
    args = parser.parse_args()
    torch.set_num_threads(1)
    table = Table(title="Recording stock models' backward: interleaved blocks, gc off in steps")
    for column in ("model", "way", "backward", "× plain"):
        table.add_column(column, justify="left" if column in ("model", "way") else "right")
    for name in args.models.split(","):
        try:
            label, model, loss = build(name)
        except ImportError as exc:
            print(f"{name}: left out, {exc}")
            continue
        medians = measure(model, loss, args.repeat, args.steps)
        for way, seconds in medians.items():
            ratio = seconds / medians["plain"]
            table.add_row(label, way, f"{seconds * 1e3:.1f} ms", f"{ratio:.2f}×")
        table.add_section()
    Console(width=110).print(table)
    print(f"torch {torch.__version__}, one intra-op thread; {args.repeat} blocks of {args.steps} "
          "steps per way (the first of each not counted); thread CPU time")  # fmt: skip


if __name__ == "__main__":
    main()
