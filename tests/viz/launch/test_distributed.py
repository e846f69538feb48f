"""Real two-process DDP jobs on the CPU (gloo) under ``record`` and ``nan``.

Each job is launched as a user would: ``torch.multiprocessing.spawn`` inside
the script, or ``torchrun`` (``python -m torch.distributed.run``) around
``python -m autograd_viz record``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograd_viz.launch import processes
from autograd_viz.trace import Trace

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

REPO = Path(__file__).resolve().parents[3]

JOB = """
    import os
    import sys

    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel as DDP


    def work(rank, world, port, mode, out):
        if port:
            dist.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
            )
        else:  # under torchrun
            dist.init_process_group("gloo")
            rank = dist.get_rank()
        torch.manual_seed(0)
        layers = [torch.nn.Linear(4, 600), torch.nn.Tanh(), torch.nn.Linear(600, 600)]
        layers += [torch.nn.Tanh(), torch.nn.Linear(600, 1)]
        model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=1)  # 1.4 MB: several buckets
        if mode == "hook":  # the program's own comm hook, registered after DDP was made
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(None, default_hooks.allreduce_hook)
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
            if mode == "fail" and rank == 1 and step == 2:  # rank 0 is not left waiting
                raise RuntimeError("rank 1 fails after its last step")
        torch.save([p.detach() for p in model.parameters()], f"{out}.{rank}.pt")
        if mode == "stall":  # rank 1 fails; rank 0, asleep, is stopped by the launcher's SIGTERM
            if rank == 1:
                raise RuntimeError("rank 1 fails while rank 0 waits")
            import time

            time.sleep(120)
        dist.destroy_process_group()


    if __name__ == "__main__":
        mode, out = sys.argv[1], sys.argv[2]
        if "RANK" in os.environ:
            work(0, 0, 0, mode, out)
        else:
            mp.spawn(work, args=(2, int(sys.argv[3]), mode, out), nprocs=2)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for name in (processes.ENV, "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def job(tmp_path: Path) -> Path:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB), encoding="utf-8")
    return script


def left_running(marker: Path) -> list[str]:
    """Processes still alive whose command line names ``marker``."""
    alive = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(marker) in cmdline and int(pid) != os.getpid():
            alive.append(cmdline)
    return alive


def same_parameters(tmp_path: Path, watched: str, unwatched: str) -> bool:
    for rank in (0, 1):
        ours = torch.load(tmp_path / f"{watched}.{rank}.pt")
        theirs = torch.load(tmp_path / f"{unwatched}.{rank}.pt")
        if not all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True)):
            return False
    return True


def check_rank_traces(tmp_path: Path, launcher: str, graph_tasks: int = 3) -> None:
    for rank in (0, 1):
        trace = Trace.load(tmp_path / f"t.rank{rank}.jsonl")
        assert len(trace.graph_tasks) == graph_tasks
        process = trace.header["process"]
        assert (process["rank"], process["world_size"]) == (rank, 2)
        assert process["backend"] == "gloo"
        assert process["launcher"] == launcher
        assert process["host"] == socket.gethostname()
    assert not (tmp_path / "t.jsonl").exists()  # the launching process ran no backward


def check_allreduces(trace: Trace) -> None:
    """Every graph task launched and finished each bucket's allreduce, from an AccumulateGrad."""
    buckets = []
    for gid in trace.graph_tasks:
        comm = [e for e in trace.events if e.kind == "comm" and e.graph_task == gid]
        launched = [e for e in comm if e.data["phase"] == "launched"]
        finished = {e.data["bucket"] for e in comm if e.data["phase"] == "finished"}
        buckets.append(len(launched))
        assert {e.data["bucket"] for e in launched} == finished
        # named as model.named_parameters() names them on the DDP object the program holds
        params = {f"module.{layer}.{kind}" for layer in (0, 2, 4) for kind in ("weight", "bias")}
        assert {p for e in launched for p in e.data["params"]} == params
        leaves = {n.leaf.name for n in trace.graph_tasks[gid].nodes.values() if n.leaf}
        assert leaves == params  # and as the trace names the leaves
        assert all((e.node_name or "").endswith("AccumulateGrad") for e in launched)
        end = next(e for e in trace.events if e.kind == "graph_task_end" and e.graph_task == gid)
        assert all(e.seq < end.seq for e in comm)
    # DDP's first step reduces one bucket; it then rebuilds them in the order gradients came
    assert buckets[0] >= 1 and max(buckets) >= 2
    # gloo completes the futures on its own threads: named for the backend, never Dummy-N
    finished = {
        e.thread for e in trace.events if e.kind == "comm" and e.data["phase"] == "finished"
    }
    assert all(re.fullmatch(r"gloo(-\d+)?|MainThread", name) for name in finished), finished
    assert not any(e.thread.startswith("Dummy-") for e in trace.events)


def test_mp_spawn_job_one_trace_per_rank_same_parameters(tmp_path: Path) -> None:
    script = job(tmp_path)
    plain = run(tmp_path, str(script), "plain", "unwatched", str(free_port()))
    assert plain.returncode == 0, plain.stderr
    done = run(
        tmp_path,
        *("-m", "autograd_viz", "record", "-o", "t.jsonl"),
        *(str(script), "plain", "watched", str(free_port())),
    )
    assert done.returncode == 0, done.stderr
    check_rank_traces(tmp_path, "torch.multiprocessing.spawn")
    assert "rank 1 of 2" in done.stdout
    assert same_parameters(tmp_path, "watched", "unwatched")
    assert not left_running(script)
    check_allreduces(Trace.load(tmp_path / "t.rank0.jsonl"))
    merged = run(tmp_path, "-m", "autograd_viz", "timeline", "t.rank0.jsonl", "t.rank1.jsonl")
    assert merged.returncode == 0, merged.stderr
    document = json.loads((tmp_path / "t.timeline.json").read_text())
    assert document["otherData"]["aligned"] is True
    names = {
        e["pid"]: e["args"]["name"]
        for e in document["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert [names[1].split(" (")[0], names[2].split(" (")[0]] == ["rank 0 of 2", "rank 1 of 2"]


@pytest.mark.slow
def test_torchrun_job_one_trace_per_rank(tmp_path: Path) -> None:
    script = job(tmp_path)
    done = run(
        tmp_path,
        *("-m", "torch.distributed.run", "--nproc-per-node", "2"),
        *("--master-port", str(free_port()), "-m", "autograd_viz", "record"),
        *(str(script), "plain", "watched", "-o", "t.jsonl"),
    )
    assert done.returncode == 0, done.stderr
    check_rank_traces(tmp_path, "torchrun")
    plain = run(tmp_path, str(script), "plain", "unwatched", str(free_port()))
    assert same_parameters(tmp_path, "watched", "unwatched"), plain.stderr
    assert not left_running(script)


@pytest.mark.slow
def test_a_raising_rank_keeps_its_trace_and_the_exit_status(tmp_path: Path) -> None:
    script = job(tmp_path)
    plain = run(tmp_path, str(script), "fail", "unwatched", str(free_port()))
    done = run(
        tmp_path,
        *("-m", "autograd_viz", "record", "-o", "t.jsonl"),
        *(str(script), "fail", "watched", str(free_port())),
    )
    assert done.returncode == plain.returncode != 0
    assert "rank 1 fails after its last step" in done.stderr
    failed = Trace.load(tmp_path / "t.rank1.jsonl")
    assert len(failed.graph_tasks) == 3
    assert failed.header["process"]["rank"] == 1
    assert not left_running(script)


def test_nan_names_the_rank_that_saw_it_first(tmp_path: Path) -> None:
    script = job(tmp_path)
    done = run(tmp_path, "-m", "autograd_viz", "nan", str(script), "nan", "w", str(free_port()))
    assert done.returncode == 1, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("rank 1 of 2 saw the first NaN or Inf of 2 processes"), done.stdout
    assert "sqrt" in done.stdout
    assert not left_running(script)


@pytest.mark.slow
def test_a_comm_hook_of_the_program_runs_inside_the_watching_one(tmp_path: Path) -> None:
    script = job(tmp_path)
    plain = run(tmp_path, str(script), "hook", "unwatched", str(free_port()))
    assert plain.returncode == 0, plain.stderr
    done = run(
        tmp_path,
        *("-m", "autograd_viz", "record", "-o", "t.jsonl"),
        *(str(script), "hook", "watched", str(free_port())),
    )
    assert done.returncode == 0, done.stderr
    assert same_parameters(tmp_path, "watched", "unwatched")
    check_allreduces(Trace.load(tmp_path / "t.rank1.jsonl"))


def test_run_print_follows_the_ranks_of_mp_spawn(tmp_path: Path) -> None:
    """``run`` without a terminal prints each rank's calls, headed by its rank."""
    script = job(tmp_path)
    plain = run(tmp_path, str(script), "nan", "unwatched", str(free_port()))
    assert plain.returncode == 0, plain.stderr
    done = run(tmp_path, "-m", "autograd_viz", "run", str(script), "nan", "w", str(free_port()))
    assert done.returncode == 0, done.stderr
    assert "not a terminal: printing each backward call" in done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(re.match(r"\[rank[01]\] ", line) for line in lines), lines[:5]
    for rank in (0, 1):
        mine = [line.removeprefix(f"[rank{rank}] ") for line in lines if f"[rank{rank}]" in line]
        headers = [line for line in mine if line.startswith("── backward call")]
        assert [h.split(" · ")[0] for h in headers] == [f"── backward call {i}" for i in range(3)]
        said = sum(int(re.findall(r" · (\d+) nodes · ", h)[0]) for h in headers)
        nodes = [line for line in mine if re.match(r" +\d+  topo \d+ +\S", line)]
        assert len(nodes) == said > 0
        assert all(re.search(r"waited for \d+ +main$", line) for line in nodes)
        assert len([line for line in mine if "allreduce is launched" in line]) >= 3
        assert len([line for line in mine if line.lstrip().startswith("done")]) == 3
    born = [line for line in lines if "born here" in line]
    assert born and all(line.startswith("[rank1] ") for line in born)
    assert "(op sqrt)" in born[0] and f"{script}:" in born[0]
    assert "6 backward calls by 2 child processes (rank 0 of 2, rank 1 of 2)" in done.stderr
    for rank in (0, 1):  # bit for bit, NaNs included
        ours = torch.load(tmp_path / f"w.{rank}.pt")
        theirs = torch.load(tmp_path / f"unwatched.{rank}.pt")
        assert [a.numpy().tobytes() for a in ours] == [b.numpy().tobytes() for b in theirs]
    assert not left_running(script)


@pytest.mark.slow
def test_a_rank_stopped_by_torchrun_saves_its_flight_recorder(tmp_path: Path) -> None:
    """Note [A child stopped by a signal]: rank 1 fails, torchrun sends rank 0 SIGTERM."""
    script = job(tmp_path)
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("no torchrun beside this python")
    done = run(
        tmp_path,
        *("-m", "autograd_viz", "record", "--last", "2", "-o", "t.jsonl", str(torchrun)),
        *("--nproc-per-node", "2", "--master-port", str(free_port())),
        *(str(script), "stall", "w"),
    )
    assert done.returncode == 1, done.stderr  # torchrun's status for a failed rank, as unwatched
    assert "rank 1 fails while rank 0 waits" in done.stderr
    assert re.search(r"process \d+ got SIGTERM: saving what it recorded", done.stderr)
    for rank in (0, 1):
        trace = Trace.load(tmp_path / f"t.rank{rank}.jsonl")
        assert len(trace.graph_tasks) == 2  # the last two of its three calls
        assert trace.header["process"]["rank"] == rank
    assert not left_running(script)
