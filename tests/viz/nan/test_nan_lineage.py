"""Contained non-finite values are not births (Note [Lineage]).

A NaN or Inf whose values never reach the loss, a gradient, a parameter or
the model's output (masked by ``where``, cast to an integer, selected away,
replaced by ``nan_to_num``) does not fail ``nan``: it is counted in one line.
One that does reach them heads the report, with its line and module, and the
contained ones are listed after it. The stand-in for T5 is its relative
position bucket, which takes ``log(0)`` on every step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz import cli  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402

T5_LIKE = """
import math
import sys

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d=8, buckets=8, max_distance=16):
        super().__init__()
        self.buckets, self.max_distance = buckets, max_distance
        self.bias = nn.Embedding(buckets, 2)
        self.q = nn.Linear(d, d)

    def bucket(self, relative_position):
        exact = self.buckets // 4
        relative_position = relative_position.abs()
        is_small = relative_position < exact
        large = exact + (
            torch.log(relative_position.float() / exact)  # log(0) = -inf at distance 0
            / math.log(self.max_distance / exact)
            * (self.buckets // 2 - exact)
        ).to(torch.long)
        large = torch.min(large, torch.full_like(large, self.buckets - 1))
        return torch.where(is_small, relative_position, large)

    def forward(self, x):
        n = x.shape[1]
        position = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        bias = self.bias(self.bucket(position)).mean(-1)
        q = self.q(x)
        return (q @ q.transpose(-1, -2) / 8 + bias).softmax(-1) @ q


class FeedForward(nn.Module):
    def __init__(self, d=8, bug=False):
        super().__init__()
        self.wi, self.wo, self.bug = nn.Linear(d, 16), nn.Linear(16, d), bug

    def forward(self, x):
        h = self.wi(x)
        h = torch.sqrt(h) if self.bug else torch.relu(h)  # the activation
        return self.wo(h)


class Block(nn.Module):
    def __init__(self, bug=False):
        super().__init__()
        self.attention, self.ff = Attention(), FeedForward(bug=bug)

    def forward(self, x):
        x = x + self.attention(x)
        return x + self.ff(x)


class Encoder(nn.Module):
    def __init__(self, bug=False):
        super().__init__()
        self.block = nn.ModuleList([Block(), Block(), Block(bug=bug)])

    def forward(self, x):
        for block in self.block:
            x = block(x)
        return x


torch.manual_seed(0)
model = Encoder(bug="--bug" in sys.argv)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(2, 5, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _line(text: str, marker: str) -> int:
    (number,) = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    return number


@pytest.fixture
def t5_like(tmp_path: Path) -> Path:
    script = tmp_path / "t5_like.py"
    script.write_text(T5_LIKE, encoding="utf-8")
    return script


def test_a_t5_like_bucket_is_contained_and_said_in_one_line(
    t5_like: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["nan", str(t5_like)]) == 0
    out = capsys.readouterr().out
    (line,) = out.strip().splitlines()
    log = _line(T5_LIKE, "log(0) = -inf")
    assert line.startswith(
        "no NaN or Inf reached the loss, a gradient, a parameter or the model's output in 2"
    )
    assert "6 contained non-finite values seen" in line  # 3 blocks x 2 steps
    assert f"the first an Inf from log of 0 at {t5_like}:{log}" in line
    assert line.endswith("in module block.0.attention")


def test_a_real_birth_heads_the_report_and_the_bucket_is_listed_as_contained(
    t5_like: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["nan", str(t5_like), "--bug"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("NaN born in the forward pass at SqrtBackward0")
    assert f"{t5_like}:{_line(T5_LIKE, '# the activation')} in forward" in out
    assert "  module        block.2.ff\n" in out
    others = lines.index(next(x for x in lines if x.startswith("Other findings")))
    assert "(6 contained)" in lines[others]
    listed = lines[others + 1 :]
    log = f"{t5_like}:{_line(T5_LIKE, 'log(0) = -inf')}"
    assert listed and all(log in x and x.endswith("[contained]") for x in listed[:6])
    assert "in module block.0.attention [contained]" in listed[0]


def _findings(step: Any) -> Any:
    with watch_nan() as watch:
        step()
    return watch.report


def test_where_masked_index_selected_cast_and_replaced_values_are_contained() -> None:
    w = torch.ones(3, requires_grad=True)
    v = torch.tensor([0.0, 1.0, 2.0])  # log(0) at position 0
    mask = v > 0

    def masked() -> None:
        (torch.where(mask, v.log(), torch.zeros(3)) * w).sum().backward()

    def selected() -> None:
        (v.log()[1:] * w[1:]).sum().backward()
        (v.log().index_select(0, torch.tensor([1, 2])) * w[1:]).sum().backward()

    def cast() -> None:
        (v.log().to(torch.long).clamp(min=0) * w).sum().backward()

    def replaced() -> None:
        (torch.nan_to_num(v.log()) * w).sum().backward()

    for step, births in ((masked, 1), (selected, 2), (cast, 1), (replaced, 1)):
        report = _findings(step)
        assert report.first is None, (step.__name__, report.first)
        assert report.contained == births, step.__name__
        first = report.first_contained
        assert first is not None and first.cause == "log of 0", step.__name__


def test_multiplying_by_a_mask_makes_nan_which_reaches_the_loss() -> None:
    w = torch.ones(3, requires_grad=True)
    v = torch.tensor([0.0, 1.0, 2.0])
    mask = (v > 0).float()
    report = _findings(lambda: (v.log() * mask * w).sum().backward())  # -inf * 0 = NaN
    first = report.first
    assert first is not None and first.aten_op == "aten.log.default" and first.born
    assert report.contained == 0


def test_a_where_masked_log_whose_gradient_is_nan_heads_with_the_log() -> None:
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    # The forward is finite; the backward of log at 0 takes 0/0 at the masked position.
    report = _findings(lambda: torch.where(x > 0, x.log(), 0.0).sum().backward())
    first = report.first
    assert first is not None and first.phase == "forward" and first.aten_op == "aten.log.default"
    assert report.contained == 0
    assert any(f.phase == "backward" and f.node.name == "LogBackward0" for f in report.findings)


def test_a_value_written_into_a_parameter_is_reached() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    v = torch.tensor([0.0, 1.0, 2.0])

    def step() -> None:
        with torch.no_grad():
            w.add_(v.log())  # no backward, no loss: the parameter itself holds -inf

    report = _findings(step)
    assert report.first is not None and report.first.aten_op == "aten.log.default"
    assert report.contained == 0


def test_inference_that_returns_a_nan_from_the_model_is_reached() -> None:
    class Model(torch.nn.Module):
        def __init__(self, leak: bool) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.leak = leak

        def forward(self, x: Any) -> Any:
            h = self.linear(x)
            root = h.sqrt()  # NaN where h < 0
            return root if self.leak else torch.where(h >= 0, root, 0.0)

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    for leak in (True, False):
        with torch.no_grad(), watch_nan() as watch:
            Model(leak)(x)
        report = watch.report
        if leak:
            assert report.first is not None and report.first.aten_op == "aten.sqrt.default"
            assert report.first.module == "Model"  # the root module, by its type's name
        else:
            assert report.first is None and report.contained == 1


def test_masked_attention_stays_clean_and_counts_nothing_contained() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 8, requires_grad=True)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    padded = torch.tensor([[False] * 5, [False, False, False, True, True]])
    padding = torch.zeros(padded.shape).masked_fill(padded, float("-inf"))
    with watch_nan() as watch:
        layer(x, src_mask=causal, src_key_padding_mask=padding).sum().backward()
    assert watch.report.first is None and watch.report.contained == 0
    assert not [e for e in watch.trace.events if e.kind == "anomaly"]


def _t5_like_step(watched: bool) -> list[Any]:
    namespace: dict[str, Any] = {"__name__": "t5_like"}
    code = T5_LIKE.replace("for step in range(2):", "for step in range(1):")
    if watched:
        with watch_nan():
            exec(compile(code, "t5_like.py", "exec"), namespace)
    else:
        exec(compile(code, "t5_like.py", "exec"), namespace)
    return [p.detach().clone() for p in namespace["model"].parameters()]


def test_following_lineage_changes_no_result_bit_for_bit() -> None:
    plain, watched = _t5_like_step(False), _t5_like_step(True)
    assert len(plain) == len(watched)
    for a, b in zip(plain, watched, strict=True):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_a_trace_saved_keeps_what_was_contained(
    t5_like: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t5.jsonl"
    assert cli.main(["nan", "-o", str(trace), str(t5_like), "--bug"]) == 1
    said = capsys.readouterr().out.split("trace saved")[0]
    assert cli.main(["nan", str(trace)]) == 1
    again = capsys.readouterr().out
    assert again.splitlines()[0] == said.splitlines()[0]
    assert "(6 contained)" in again
    trace_clean = tmp_path / "clean.jsonl"
    assert cli.main(["nan", "-o", str(trace_clean), str(t5_like)]) == 0
    capsys.readouterr()
    assert cli.main(["nan", str(trace_clean)]) == 0
    assert "6 contained non-finite values seen" in capsys.readouterr().out


def test_the_flight_recorder_is_not_stopped_by_a_contained_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autograd_viz.trace import Trace

    script = tmp_path / "t5_like_steps.py"
    code = T5_LIKE.replace('model = Encoder(bug="--bug" in sys.argv)', "model = Encoder()")
    code = code.replace(
        "for step in range(2):\n", "for step in range(4):\n    model.block[2].ff.bug = step == 2\n"
    )
    script.write_text(code, encoding="utf-8")
    trace = tmp_path / "last.jsonl"
    assert cli.main(["nan", "--last", "2", "-o", str(trace), str(script)]) == 1
    assert capsys.readouterr().out.startswith("NaN born in the forward pass at SqrtBackward0")
    # Every call takes log(0); the call that holds the real birth is call 2.
    assert [task.call for task in Trace.load(trace).graph_tasks.values()] == [1, 2]


def test_a_value_written_through_a_view_is_followed_in_the_tensor_it_views() -> None:
    w = torch.ones(3, requires_grad=True)

    def through_a_view() -> None:
        x = torch.ones(3)
        x[:1].sub_(1).log_()  # log(0) written into x through its view
        (x * w).sum().backward()

    report = _findings(through_a_view)
    first = report.first
    assert first is not None and first.aten_op == "aten.log_.default" and first.born
    assert report.contained == 0
    p = torch.nn.Parameter(torch.ones(3))

    def into_a_parameter() -> None:
        with torch.no_grad():
            p[1:].mul_(torch.tensor([0.0, 1.0]).log())  # -inf into the parameter

    report = _findings(into_a_parameter)
    assert report.first is not None and report.first.aten_op == "aten.log.default"
    assert report.contained == 0
