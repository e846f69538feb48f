"""What watching adds to a DDP training step: two CPU ranks (gloo), watched against plain.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.ddp_step [--steps 20] [--repeat 5]

Two ranks (``torch.multiprocessing.spawn``) train the same MLP (4-600-600-3,
tanh, batch 64, float32, 1 MB buckets: two allreduces per backward), each
step a forward, ``backward()`` (with DDP's allreduces) and an SGD step. Each
repeat times ``--steps`` steps plain, ``--steps`` steps recorded by
``autograd_viz.record()`` of a model made before it (its backward watched,
DDP's buckets not), and ``--steps`` steps of a model made inside it (DDP's
buckets watched too: Note [Watching DDP through its comm hook]), interleaved
repeat by repeat. Rank 0 prints the median ms per step of each and their
ratio to plain.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def _model() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(4, 600), nn.Tanh(), nn.Linear(600, 600), nn.Tanh(), nn.Linear(600, 3)]
    return DistributedDataParallel(nn.Sequential(*layers), bucket_cap_mb=1)


def _steps(model: nn.Module, steps: int, rank: int) -> float:
    """Seconds per step of ``steps`` training steps."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 4, generator=data)
    y = torch.randint(0, 3, (64,), generator=data)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps


def _rank(rank: int, world: int, port: int, steps: int, repeat: int, out: Any) -> None:
    import autograd_viz

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    plain, backward_only, watched, events = [], [], [], 0
    _steps(_model(), 2, rank)  # warm-up
    for _ in range(repeat):
        plain.append(_steps(_model(), steps, rank))
        model = _model()
        with autograd_viz.record():
            backward_only.append(_steps(model, steps, rank))
        with autograd_viz.record() as trace:
            watched.append(_steps(_model(), steps, rank))
        events = len(trace.events) // steps
    if rank == 0:
        medians = [statistics.median(times) for times in (plain, backward_only, watched)]
        out.put((*medians, events))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    mp.spawn(_rank, args=(2, port, args.steps, args.repeat, out), nprocs=2)
    plain, backward_only, watched, events = out.get()
    print(f"DDP step, 2 ranks (gloo), {args.steps} steps x {args.repeat} repeats, medians:")
    print(f"  plain                        {plain * 1e3:8.2f} ms per step")
    print(
        f"  recorded, buckets unwatched  {backward_only * 1e3:8.2f} ms per step  "
        f"{backward_only / plain:.2f}x"
    )
    print(
        f"  recorded, buckets watched    {watched * 1e3:8.2f} ms per step  "
        f"{watched / plain:.2f}x  ({events} events per step)"
    )


if __name__ == "__main__":
    main()
