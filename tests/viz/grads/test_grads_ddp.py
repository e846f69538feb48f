"""``grads`` under DDP: each rank says which parameters its own backward gave nothing, as DDP
would name them ("Parameters which did not receive grad for rank 0"), and why.

Two gloo ranks on the CPU under ``torchrun`` (``python -m torch.distributed.run``),
each running ``python -m autograd_viz grads``. The branch ``extra`` runs on rank 1
only; with ``find_unused_parameters=True`` DDP fills rank 0's ``extra.weight.grad``
from rank 1's, so ``.grad`` is not ``None`` there, yet rank 0's backward gave it
nothing: the report is of each rank's own backward.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from grads_programs import write

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]

JOB = """
import sys
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.extra = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x, rank):
        h = torch.tanh(self.enc(x))
        if rank == 1:
            h = h + self.extra(h)
        return self.head(h)


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(Net(), find_unused_parameters=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(2):
    opt.zero_grad()
    model(torch.randn(5, 4, generator=g), rank).pow(2).mean().backward()
    opt.step()
if rank == 0:
    print("rank 0 extra.weight.grad is None:", model.module.extra.weight.grad is None)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``python command...`` in ``tmp_path``, as a fresh shell would start it (no rank)."""
    if not __import__("torch").distributed.is_available():
        pytest.skip("torch.distributed is not available")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_each_rank_reports_what_its_own_backward_left_out(torch: object, tmp_path: Path) -> None:
    script = write(tmp_path, "ddp_job", JOB)
    done = _run(
        tmp_path,
        *("-m", "torch.distributed.run", "--nproc-per-node", "2"),
        *("--master-port", str(free_port()), "--tee", "3"),
        *("-m", "autograd_viz", "grads", str(script)),
    )
    out = done.stdout
    # rank 0's report and exit status 1; torchrun then says a rank failed (status 1)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "rank 0 extra.weight.grad is None: False" in out  # DDP filled it from rank 1
    rank0 = "\n".join(
        line.split("]:", 1)[1] for line in out.splitlines() if line.startswith("[default0]:")
    )
    rank1 = "\n".join(
        line.split("]:", 1)[1] for line in out.splitlines() if line.startswith("[default1]:")
    )
    assert "2 trainable parameters got no gradient on rank 0 (2 backward calls)" in rank0
    assert "extra.weight (8, 8), extra.bias (8,)" in rank0
    assert "module extra was never called in this forward" in rank0
    assert "every trainable parameter got a gradient on rank 1 in 2 backward calls" in rank1


def test_grads_around_torchrun_explains_each_rank(torch: object, tmp_path: Path) -> None:
    """``autograd-viz grads torchrun ... job.py``: the backward calls run in the ranks, each
    explained and reported by its rank (Note [Children explained] in cli/grads.py)."""
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("no torchrun beside this python")
    script = write(tmp_path, "ddp_job", JOB)
    done = _run(
        tmp_path,
        *("-m", "autograd_viz", "grads", str(torchrun)),
        *("--nproc-per-node", "2", "--master-port", str(free_port()), str(script)),
    )
    out = done.stdout
    assert done.returncode == 1, done.stderr[-2000:]  # rank 0 found a parameter without one
    assert "no backward call" not in out
    rank0 = out.index("2 trainable parameters got no gradient on rank 0 (2 backward calls)")
    rank1 = out.index("every trainable parameter got a gradient on rank 1 in 2 backward calls")
    assert "module extra was never called in this forward" in out[rank0:]
    # One report after the other, never interleaved.
    assert "gradient flow" in out[min(rank0, rank1) : max(rank0, rank1)]
    assert out.rstrip().endswith(
        "2 child processes explained their backward calls above; 1 process found a "
        "parameter without gradient"
    )


SPAWNED = """
import torch
import torch.multiprocessing as mp


def work(rank):
    torch.manual_seed(rank)
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 2), "spare": torch.nn.Linear(2, 2)})
    out = model["used"](torch.randn(3, 4))
    if rank == 1:
        out = model["spare"](out)
    out.sum().backward()


if __name__ == "__main__":
    mp.spawn(work, nprocs=2)
"""


def test_grads_explains_each_spawned_worker_headed_by_its_process(
    torch: object, tmp_path: Path
) -> None:
    script = write(tmp_path, "spawned", SPAWNED)
    done = _run(tmp_path, "-m", "autograd_viz", "grads", "-o", "t.jsonl", str(script))
    assert done.returncode == 1, done.stderr[-2000:]  # worker 0 left "spare" out
    assert "-o t.jsonl: no backward call; the children's are in their reports above" in (
        done.stderr
    )
    out = done.stdout
    heads = re.findall(r"^process (\d+)$", out, re.MULTILINE)
    assert len(heads) == 2 and len(set(heads)) == 2
    assert out.count("got no gradient (1 backward call)") == 1
    assert "module spare was never called in this forward" in out
    assert out.count("every trainable parameter got a gradient in 1 backward call") == 1
    assert out.rstrip().endswith("1 process found a parameter without gradient")
