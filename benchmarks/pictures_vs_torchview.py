"""Our default picture of a real model beside torchview's at depth 3, in one process.

For each model (built from a config, no weights downloaded): one training
step is recorded with :func:`autograd_viz.record`, then timed in this process:

* ours: ``to_dot`` of the trace's last step (the default picture) and
  Graphviz's SVG of it, what ``autograd-viz dot TRACE -o M.svg`` does after
  loading;
* torchview: ``draw_graph(model, input_data, depth=3)`` and the SVG of its
  ``visual_graph`` (its forward graph; it runs the forward itself).

Reported: boxes (graph nodes, ours without the legend; frames apart), the
SVG's width × height in points, and seconds (wall, median of ``--repeats``).
Neither side includes building the model or the training step.

Needs, beside the project: ``torchview``, and the model families it draws
(``transformers``, ``timm``, ``torchvision``); a model whose package is missing
is skipped with a line. Not run by the tests.

Usage::

    python -m benchmarks.pictures_vs_torchview [--models t5,bart,vit,convnext,mobilenet,
        efficientnet,lstm] [--repeats 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODELS = ("t5", "bart", "vit", "convnext", "mobilenet", "efficientnet", "lstm")


def build(name: str) -> tuple[Any, tuple[Any, ...], Callable[[Any, Any], Any], Any]:
    """``(model, inputs, loss(model, inputs), torchview input_data)`` for ``name``."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    image = (torch.randn(2, 3, 64, 64), torch.tensor([1, 2]))

    def classify(m: Any, x: Any) -> Any:
        return F.cross_entropy(m(x[0]), x[1])

    if name in ("t5", "bart"):
        if name == "t5":
            from transformers import T5Config, T5ForConditionalGeneration

            config = T5Config(
                vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=3,
                num_decoder_layers=3, num_heads=4, decoder_start_token_id=0, pad_token_id=0,
            )  # fmt: skip
            model: Any = T5ForConditionalGeneration(config)
        else:
            from transformers import BartConfig, BartForConditionalGeneration

            config = BartConfig(
                vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2,
                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                decoder_ffn_dim=128, max_position_embeddings=64,
            )  # fmt: skip
            model = BartForConditionalGeneration(config)
        tokens = (torch.randint(3, 256, (2, 12)), torch.randint(3, 256, (2, 8)))
        return (
            model,
            tokens,
            lambda m, x: m(input_ids=x[0], labels=x[1]).loss,
            {"input_ids": tokens[0], "labels": tokens[1]},
        )
    if name in ("vit", "convnext"):
        import timm

        kind = "vit_tiny_patch16_224" if name == "vit" else "convnext_atto"
        extra = {"img_size": 64} if name == "vit" else {}
        model = timm.create_model(kind, pretrained=False, num_classes=10, **extra)
        return model, image, classify, image[0]
    if name in ("mobilenet", "efficientnet"):
        import torchvision

        make = (
            torchvision.models.mobilenet_v3_small
            if name == "mobilenet"
            else torchvision.models.efficientnet_b0
        )
        return make(weights=None, num_classes=10), image, classify, image[0]
    if name == "lstm":

        class LanguageModel(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(256, 64)
                self.rnn = nn.LSTM(64, 64, num_layers=2, batch_first=True)
                self.head = nn.Linear(64, 256)

            def forward(self, x: Any) -> Any:
                return self.head(self.rnn(self.emb(x))[0])

        text = (torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 16)))
        return (
            LanguageModel(),
            text,
            lambda m, x: F.cross_entropy(m(x[0]).reshape(-1, 256), x[1].reshape(-1)),
            text[0],
        )
    raise SystemExit(f"unknown model {name!r}; one of {', '.join(MODELS)}")


def measure(svg: str) -> tuple[int, int, str]:
    """Boxes (graph nodes, the legend left out), frames (clusters) and ``W × H`` in points."""
    size = re.search(r'<svg width="([\d.]+)pt"\s+height="([\d.]+)pt"', svg)
    assert size is not None, "not an SVG that Graphviz wrote"
    boxes = len(re.findall(r'class="node[ "]', svg)) - svg.count('id="legend"')
    frames = svg.count('class="cluster"')
    return boxes, frames, f"{float(size.group(1)):,.0f} × {float(size.group(2)):,.0f}"


def timed(make: Callable[[], str], repeats: int) -> tuple[str, float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        svg = make()
        seconds.append(time.perf_counter() - start)
    return svg, statistics.median(seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="keep both SVGs of each model here")
    args = parser.parse_args(argv)

    import autograd_viz
    from autograd_viz.draw.render.dot import pipe

    rows = []
    for name in args.models.split(","):
        try:
            model, inputs, loss, view_input = build(name)
            import torchview
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        with autograd_viz.record() as trace:
            loss(model, inputs).backward()
        ours, ours_s = timed(
            lambda trace=trace: pipe(autograd_viz.to_dot(trace), "svg").decode(), args.repeats
        )
        try:
            theirs, theirs_s = timed(
                lambda model=model, data=view_input: (
                    torchview.draw_graph(model, input_data=data, depth=3)
                    .visual_graph.pipe("svg")
                    .decode()
                ),
                args.repeats,
            )
            theirs_row = (*measure(theirs), f"{theirs_s:.2f}")
        except Exception as exc:  # noqa: BLE001 - a peer's failure is a result to report
            theirs, theirs_row = "", (f"fails ({type(exc).__name__})", "", "", "")
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.ours.svg").write_text(ours)
            if theirs:
                (args.out / f"{name}.torchview.svg").write_text(theirs)
        rows.append((name, *measure(ours), f"{ours_s:.2f}", *theirs_row))

    print(
        "| model | ours: boxes | frames | W × H (pt) | s "
        "| torchview: boxes | frames | W × H (pt) | s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


if __name__ == "__main__":
    main()
