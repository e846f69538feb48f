"""A real two-process FSDP2 (``fully_shard``) job on the CPU (gloo) under ``record`` and ``nan``.

FSDP2 frees each gathered parameter with ``untyped_storage().resize_(0)``;
a storage the bridge had read through ``numpy()`` could not be resized
(Note [Reading a storage without pinning it]). Watched, the job runs and
its parameters are bit for bit those of the unwatched run.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from autograd_viz.trace import Trace
from tests.viz.launch.test_distributed import free_port, left_running, run

torch = pytest.importorskip("torch")
fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this PyTorch has no FSDP2 (fully_shard)", allow_module_level=True)

JOB = """
    import sys

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard


    def work(rank, world, port, out, mode):
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
        )
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(0)
        layers = [torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64)]
        layers += [torch.nn.Tanh(), torch.nn.Linear(64, 1)]
        model = torch.nn.Sequential(*layers)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for step in range(3):
            x = torch.randn(5, 4, generator=g)
            if mode == "nan" and rank == 1 and step == 1:
                x = x.sqrt()  # NaN from the negative entries, on rank 1 only
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        full = [p.full_tensor().detach() for p in model.parameters()]
        torch.save(full, f"{out}.{rank}.pt")
        dist.destroy_process_group()


    if __name__ == "__main__":
        out, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        mp.spawn(work, args=(2, port, out, mode), nprocs=2)
"""


OPS = ("all_gather", "reduce_scatter")
GROUPS = {0: ("0.weight", "0.bias"), 1: ("2.weight", "2.bias"), 2: ("4.weight", "4.bias")}
"""The parameter group of each fully_shard-ed Linear, numbered as first gathered."""


def check_collectives(trace: Trace) -> None:
    """FSDP2's collectives as comm events (Note [Watching FSDP2's collectives])."""
    comm = [e for e in trace.events if e.kind == "comm"]
    for e in comm:
        assert e.data["op"] in OPS
        assert tuple(e.data["params"]) == GROUPS[e.data["bucket"]]
        assert e.data["bytes"] > 0
    launched = [e for e in comm if e.data["phase"] == "launched"]
    finished = [(e.graph_task, e.data["op"], e.data["bucket"]) for e in comm if e not in launched]
    assert sorted((e.graph_task, e.data["op"], e.data["bucket"]) for e in launched) == sorted(
        finished
    )
    # Before each forward every group is gathered, outside any backward call (graph task 0)
    forward = [e.data["bucket"] for e in launched if e.graph_task == 0]
    assert forward == [0, 1, 2] * 3
    for gid in trace.graph_tasks:
        mine = [e for e in launched if e.graph_task == gid]
        # the backward re-gathers the groups the forward freed and reduce-scatters every
        # group's gradients, last layer first
        assert [e.data["bucket"] for e in mine if e.data["op"] == "all_gather"] == [2, 1, 0]
        assert [e.data["bucket"] for e in mine if e.data["op"] == "reduce_scatter"] == [2, 1, 0]
        end = next(e for e in trace.events if e.kind == "graph_task_end" and e.graph_task == gid)
        assert all(e.seq < end.seq for e in comm if e.graph_task == gid)


def test_fsdp2_job_under_record_and_nan_same_parameters(tmp_path: Path) -> None:
    script = tmp_path / "fsdp_job.py"
    script.write_text(textwrap.dedent(JOB), encoding="utf-8")
    plain = run(tmp_path, str(script), "unwatched", str(free_port()), "plain")
    assert plain.returncode == 0, plain.stderr
    done = run(
        tmp_path,
        *("-m", "autograd_viz", "record", "-o", "t.jsonl"),
        *(str(script), "watched", str(free_port()), "plain"),
    )
    assert done.returncode == 0, done.stderr
    assert "not resizable" not in done.stderr
    for rank in (0, 1):
        ours = torch.load(tmp_path / f"watched.{rank}.pt")
        theirs = torch.load(tmp_path / f"unwatched.{rank}.pt")
        assert len(ours) == 6
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
        trace = Trace.load(tmp_path / f"t.rank{rank}.jsonl")
        assert len(trace.graph_tasks) == 3
        assert (trace.header["process"]["rank"], trace.header["process"]["world_size"]) == (
            rank,
            2,
        )
        # The gradients of the gathered parameters were read, the 64 x 64 weight's among them.
        grads = [
            summary
            for e in trace.events
            if e.kind == "node_start" and e.node_name == "AccumulateGrad"
            for summary in e.data["inputs"]
            if summary is not None
        ]
        assert (64, 64) in {g.shape for g in grads}
        assert all(g.norm is not None and g.nan_count == 0 for g in grads)
        check_collectives(trace)
    merged = run(tmp_path, "-m", "autograd_viz", "timeline", "t.rank0.jsonl", "t.rank1.jsonl")
    assert merged.returncode == 0, merged.stderr
    document = json.loads((tmp_path / "t.timeline.json").read_text())
    lanes = {
        e["args"]["name"]
        for e in document["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {f"communication: {op} bucket {b}" for op in OPS for b in range(3)} <= lanes
    slices = [e for e in document["traceEvents"] if e.get("cat") == "comm"]
    assert len(slices) == 2 * 3 * (3 + 3 + 3)  # ranks x steps x (gathers before forward, before
    assert all(e["args"]["status"] == "finished" for e in slices)  # backward, reduce-scatters)
    nan = ("-m", "autograd_viz", "nan", str(script))
    checked = run(tmp_path, *nan, "checked", str(free_port()), "plain")
    assert checked.returncode == 0, checked.stderr
    assert "no nan or inf found in 6 backward calls of 2 processes" in checked.stdout.lower()
    for rank in (0, 1):
        ours = torch.load(tmp_path / f"checked.{rank}.pt")
        theirs = torch.load(tmp_path / f"unwatched.{rank}.pt")
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    born = run(tmp_path, *nan, "born", str(free_port()), "nan")
    assert born.returncode == 1, born.stderr  # a NaN was found
    assert "rank 1 of 2 saw the first NaN or Inf of 2 processes" in born.stdout
    assert "NaN born in the forward pass at aten.sqrt.default" in born.stdout
    assert not left_running(script)


def test_fsdp2_is_patched_when_the_program_imports_it_and_restored_after(tmp_path: Path) -> None:
    """Nothing of FSDP2 is imported on our side; its classes are as they were afterwards."""
    probe = textwrap.dedent(
        """
        import sys

        import torch
        import autograd_viz

        COLLECTIVES = "torch.distributed.fsdp._fully_shard._fsdp_collectives"
        with autograd_viz.record():
            assert COLLECTIVES not in sys.modules  # not imported by us
            from torch.distributed.fsdp._fully_shard import _fsdp_collectives as c
            from torch.distributed.fsdp._fully_shard import _fsdp_param_group as g

            watched = [c.DefaultAllGather.__call__, c.DefaultReduceScatter.__call__]
            watched += [g.FSDPParamGroup.unshard, g.FSDPParamGroup.post_backward]
        plain = [c.DefaultAllGather.__call__, c.DefaultReduceScatter.__call__]
        plain += [g.FSDPParamGroup.unshard, g.FSDPParamGroup.post_backward]
        # each was a wrapper of what is back in its place now
        assert [f.__wrapped__ for f in watched] == plain
        assert not any(a is b for a, b in zip(watched, plain))
        assert not any("autograd_viz" in type(f).__module__ for f in sys.meta_path)
        print("ok")
        """
    )
    done = run(tmp_path, "-c", probe)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
