"""``autograd-viz grads SCRIPT``: the report, the exit status, the flow table and ``--plot``."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from grads_programs import marked_line, write

from autograd_viz.cli.main import main
from autograd_viz.grads import GradsReport, watch_grads
from autograd_viz.grads.report import FlowRow, flag_flow
from autograd_viz.launch.script import run_script

pytestmark = pytest.mark.oracle


def test_a_missing_gradient_exits_1_with_the_reason_and_line(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "all")
    assert main(["grads", str(path), "-"]) == 1
    out = capsys.readouterr().out
    assert "trainable parameters got no gradient" in out
    assert "cutter.weight (8, 8), cutter.bias (8,)" in out
    assert "cut by .detach() (the output of cutter) on the way to the loss" in out
    assert f"{path}:{marked_line(path, 'cut')}" in out
    assert "c = self.cutter(h).detach()" in out
    assert "frozen (requires_grad=False): 2" in out
    assert "gradient of exact zeros: 2" in out
    assert "in 3 of 3 calls, from call 0" in out


@pytest.mark.parametrize("name", ["healthy", "frozen", "pruned", "zeros_relu"])
def test_no_missing_gradient_exits_0(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["grads", str(write(tmp_path, name)), "-"]) == 0
    out = capsys.readouterr().out
    assert "every trainable parameter got a gradient" in out
    assert "gradient flow, backward call 1" in out


def test_a_deep_sigmoid_mlp_flags_its_first_layers_vanishing(torch: Any, tmp_path: Path) -> None:
    with watch_grads() as watch:
        run_script(str(write(tmp_path, "deep_sigmoid")), ["-"])
    report: GradsReport = watch.report
    assert report.calls == 3
    for _, rows in report.flows:
        flags = {row.module: row.flag for row in rows}
        assert len(flags) == 11  # ten hidden Linear layers and the output layer
        assert flags["0"] == "vanishing"  # the first layer learns nothing
        assert flags["20"] is None and flags["18"] is None  # the last ones learn
        norms = [row.grad_norm for row in sorted(rows, key=lambda r: int(r.module))]
        assert norms[0] < 1e-6 * norms[-1]


def test_a_small_parameter_that_moves_as_much_as_any_is_not_vanishing() -> None:
    """A ConvNeXt's layer scale (initialized at 1e-6): its gradient is 1e-4 of the head's,
    its ratio larger than the head's. What it scales (initialized normally, its gradient
    scaled by 1e-6) is vanishing; so is a module whose gradient is tiny beside the head's
    and whose weights are large (Note [Vanishing and exploding])."""
    rows = flag_flow(
        [
            FlowRow("head.fc", 0.565, 1.13, 2),
            FlowRow("stages.0.blocks.1", 5.26e-05, 3.49e-05, 1),  # gamma: ratio 1.51
            FlowRow("stages.3.blocks.0.conv_dw", 8.58e-06, 2.51, 2),  # ratio 3.4e-6
            FlowRow("stem.0", 0.184, 0.866, 2),
        ]
    )
    flags = {row.module: row.flag for row in rows}
    assert flags == {
        "head.fc": None,
        "stages.0.blocks.1": None,
        "stages.3.blocks.0.conv_dw": "vanishing",
        "stem.0": None,
    }


def test_the_flow_table_shows_largest_smallest_and_every_flag(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["grads", "--rows", "2", str(write(tmp_path, "deep_sigmoid")), "-"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("gradient flow") :]
    rows = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
    # The two largest and the two smallest, and every flagged module between: 10 to 4 are
    # vanishing too, and a flag is never among the rows left out.
    assert rows == ["20", "18", "... 3 more", "10", "8", "6", "4", "2", "0"]
    assert table[: table.index("└")].count("vanishing") == 6
    assert "vanishing gradients: 0 (3 calls)" in out


def test_plot_draws_one_line_per_module_in_svg_and_png(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "deep_sigmoid")
    svg, png = tmp_path / "flow.svg", tmp_path / "flow.png"
    assert main(["grads", "--plot", str(svg), str(path), "-"]) == 0
    root = ET.parse(svg).getroot()
    lines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 11
    assert all(len(line.get("points", "").split()) == 3 for line in lines)  # three calls
    rings = root.findall(".//{http://www.w3.org/2000/svg}circle[@class='flagged']")
    assert len(rings) >= 3  # the first layer is flagged in every call
    assert main(["grads", str(path), "-", "--plot", str(png)]) == 0
    from PIL import Image

    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (960, 540)
    assert "drawn to" in capsys.readouterr().err


def test_bad_input_is_one_clear_line(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["grads", str(tmp_path / "missing.py")]) == 3
    assert "no such file" in capsys.readouterr().err
    path = write(tmp_path, "healthy")
    assert main(["grads", "--plot", str(tmp_path / "flow.txt"), str(path)]) == 3
    assert "expected a .svg or .png file name" in capsys.readouterr().err
    assert main(["grads", "--rows", "0", str(path)]) == 2


def test_a_failing_script_without_a_finding_exits_4(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "boom", "raise ValueError('boom')\n")
    assert main(["grads", str(path)]) == 4
    assert "ValueError: boom" in capsys.readouterr().err


def test_a_script_without_backward_says_so(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "forward", "import torch\nprint(torch.nn.Linear(2, 2)(torch.ones(2)))\n")
    assert main(["grads", str(path)]) == 0
    assert "no backward call" in capsys.readouterr().out


def test_long_module_names_fold_whole_in_a_narrow_terminal() -> None:
    from io import StringIO

    from rich.console import Console

    from autograd_viz.cli.grads import print_flow

    names = [f"model.decoder.layers.0.encoder_attn.{p}_proj" for p in "qkv"]
    flow = [FlowRow(n, 0.5 / (i + 1), 1.0, 1) for i, n in enumerate(names)]
    out = StringIO()
    print_flow(2, flow, Console(file=out, width=60, highlight=False))
    cells = [line.split("│")[1:3] for line in out.getvalue().splitlines() if line.startswith("│")]
    joined: list[str] = []
    for name, norm in cells:
        if norm.strip():  # a row's first line; the lines after it carry the rest of its name
            joined.append(name.strip())
        else:
            assert joined[-1].endswith("."), out.getvalue()  # broken after a dot
            joined[-1] += name.strip()
    assert joined == names, out.getvalue()
    assert len(cells) == 2 * len(names)  # each name on two lines


def test_a_name_without_a_dot_near_the_edge_is_folded_by_the_table() -> None:
    from autograd_viz.cli.grads import _fold_at_dots

    assert _fold_at_dots("a.b", 10) == ["a.b"]
    assert _fold_at_dots("layers.0.self_attention_projection", 12) == [
        "layers.0.",
        "self_attention_projection",  # longer than the width: the table folds it
    ]
    assert _fold_at_dots("x.averyveryverylongname", 12) == ["x.", "averyveryverylongname"]
    assert _fold_at_dots("model.decoder.layernorm_embedding", 32) == [
        "model.decoder.",
        "layernorm_embedding",
    ]
    assert _fold_at_dots("encoder.layers.10.attn.q", 12) == ["encoder.", "layers.10.", "attn.q"]
