"""Data-parallel training on two CPU processes (DDP, gloo): an unmodified PyTorch script.

Every process of the job is watched, each saving its own trace:

    autograd-viz record examples/torch_ddp.py -o ddp.jsonl   # ddp.rank0.jsonl, ddp.rank1.jsonl
    autograd-viz timeline ddp.rank0.jsonl ddp.rank1.jsonl    # both ranks on one clock
    autograd-viz replay ddp.rank0.jsonl ddp.rank1.jsonl      # R switches rank

Each rank's allreduce of a gradient bucket shows up as a ``comm`` event on the
AccumulateGrad that completed the bucket, and as a slice on the timeline.
"""

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def train(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    torch.manual_seed(0)  # the same starting weights on every rank
    layers = nn.Sequential(nn.Linear(4, 600), nn.Tanh(), nn.Linear(600, 600), nn.Tanh())
    model = DistributedDataParallel(nn.Sequential(layers, nn.Linear(600, 3)), bucket_cap_mb=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)  # each rank its own batch
    for step in range(3):
        x = torch.randn(16, 4, generator=data)
        y = torch.randint(0, 3, (16,), generator=data)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # DDP averages the gradients over the ranks while it runs
        optimizer.step()
        print(f"rank {rank} step {step}: loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:  # a free port for the ranks to meet on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(2, port), nprocs=2)
