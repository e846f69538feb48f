"""Several processes under ``record``: children of every start method, each with its own trace."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograd_viz.launch import processes
from autograd_viz.launch.processes import ChildSettings, process_info, process_trace_path
from autograd_viz.trace import Trace, TraceFormatError

REPO = Path(__file__).resolve().parents[3]

CHILDREN = """
    import multiprocessing as mp
    import sys

    import engine


    def work(scale):
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        (x * scale).sum().backward()
        if scale == 3.0 and "fail" in sys.argv:
            raise ValueError("the child of scale 3 fails")


    if __name__ == "__main__":
        work(1.0)  # the parent's own backward, before any child starts
        ctx = mp.get_context(sys.argv[1])
        procs = [ctx.Process(target=work, args=(s,)) for s in (2.0, 3.0)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        sys.exit(max(p.exitcode for p in procs))
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(processes.ENV, None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def left_running(marker: Path) -> list[str]:
    """Processes still alive whose command line names ``marker``."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(marker) in cmdline:
            alive.append(cmdline)
    return alive


def child_traces(tmp_path: Path) -> dict[str, Trace]:
    return {p.name: Trace.load(p) for p in sorted(tmp_path.glob("t.pid*.jsonl"))}


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_every_child_saves_its_own_trace(tmp_path: Path, method: str) -> None:
    script = tmp_path / "children.py"
    script.write_text(textwrap.dedent(CHILDREN), encoding="utf-8")
    done = run(tmp_path, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script), method)
    assert done.returncode == 0, done.stderr
    own = Trace.load(tmp_path / "t.jsonl")
    assert len(own.graph_tasks) == 1  # a forked child's events never reach the parent's trace
    assert own.header["process"]["launcher"] is None
    children = child_traces(tmp_path)
    assert len(children) == 2, done.stdout
    grads: list[tuple[float, ...]] = []
    for name, trace in children.items():
        # a forked child starts from its parent's recording, emptied: its own backward only
        assert len(trace.graph_tasks) == 1, name
        process = trace.header["process"]
        assert name == f"t.pid{process['pid']}.jsonl"
        assert process["launcher"] == f"multiprocessing ({method})"
        assert process["rank"] is None
        (leaf,) = trace.state_at(len(trace)).leaves.values()
        assert leaf.grad is not None
        assert leaf.grad.values is not None
        grads.append(leaf.grad.values)
    assert sorted(grads) == [(2.0, 2.0), (3.0, 3.0)]
    assert "2 child processes recorded" in done.stdout
    assert not left_running(script)


def test_a_failing_child_keeps_its_trace_and_the_status(tmp_path: Path) -> None:
    script = tmp_path / "children.py"
    script.write_text(textwrap.dedent(CHILDREN), encoding="utf-8")
    unwatched = run(tmp_path, str(script), "spawn", "fail")
    done = run(
        tmp_path, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script), "spawn", "fail"
    )
    assert done.returncode == unwatched.returncode == 1, done.stderr
    assert "the child of scale 3 fails" in done.stderr
    children = child_traces(tmp_path)
    assert len(children) == 2
    assert all(len(t.graph_tasks) == 1 for t in children.values())
    assert not left_running(script)


def test_a_child_of_a_script_without_backward_records_nothing(tmp_path: Path) -> None:
    script = tmp_path / "quiet.py"
    script.write_text(
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', 'import sys; print(sys.path[:1])'], check=True)\n",
        encoding="utf-8",
    )
    done = run(tmp_path, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script))
    assert done.returncode == 0, done.stderr
    assert "cli/startup" not in done.stdout  # the child's path is its own again
    assert "No backward pass ran while recording" in done.stdout
    assert not list(tmp_path.glob("t.pid*.jsonl"))
    assert done.stderr == ""


def _child_under_record(tmp_path: Path, sitecustomize: str, child: str) -> str:
    """The first line a child prints (``python -c child``) when the recorded script starts
    it, with ``sitecustomize`` the environment's own."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(sitecustomize, encoding="utf-8")
    script = tmp_path / "check.py"
    script.write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}], check=True)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    env.pop(processes.ENV, None)
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[0]


def test_the_children_user_sitecustomize_still_runs(tmp_path: Path) -> None:
    first = _child_under_record(
        tmp_path,
        "import os\nos.environ['USER_SITE_RAN'] = '1'\n",
        "import os; print(os.environ.get('USER_SITE_RAN'))",
    )
    assert first == "1"


def test_the_childs_sitecustomize_is_its_own_and_what_it_made_lives(tmp_path: Path) -> None:
    """The child sees its own ``sitecustomize`` module, kept for the process: ops it defines
    with a ``torch.library.Library`` (freed, the Library takes them away) are there when
    the child runs (the shim that lets torchvision import beside a CPU-only torch)."""
    pytest.importorskip("torch")
    first = _child_under_record(
        tmp_path,
        "import torch\n"
        "MARK = 42\n"
        "_lib = torch.library.Library('avtest', 'DEF')\n"
        "_lib.define('twice(Tensor x) -> Tensor')\n"
        "_lib.impl('twice', lambda x: x * 2, 'CPU')\n",
        "import gc, sitecustomize, torch; gc.collect(); "
        "print(sitecustomize.MARK, torch.ops.avtest.twice(torch.ones(2)).tolist())",
    )
    assert first == "42 [2.0, 2.0]"


def test_process_trace_paths() -> None:
    assert process_trace_path("t.jsonl", {"rank": 1, "pid": 7}) == "t.rank1.jsonl"
    assert process_trace_path("out/t.jsonl", {"rank": None, "pid": 7}) == "out/t.pid7.jsonl"
    assert process_trace_path("trace", {"rank": 0, "pid": 7}) == "trace.rank0.jsonl"


def test_rank_from_the_environment_unless_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    info = process_info()
    assert (info["rank"], info["world_size"], info["local_rank"]) == (3, 4, 1)
    assert info["pid"] == os.getpid()
    inherited = process_info(inherited_rank="3")  # a data loader worker of rank 3
    assert (inherited["rank"], inherited["world_size"], inherited["local_rank"]) == (None,) * 3


def test_settings_travel_through_the_environment(tmp_path: Path) -> None:
    settings = ChildSettings("nan", str(tmp_path), "/x/t.jsonl", 4, {"first": True}, "0")
    assert ChildSettings.from_env(settings.to_env()) == settings
    with pytest.raises(ValueError, match="holds no settings"):
        ChildSettings.from_env("[1]")


def test_the_process_record_round_trips_and_is_checked(tmp_path: Path) -> None:
    trace = Trace()
    trace.header["process"] = process_info()
    trace.save(tmp_path / "t.jsonl")
    loaded = Trace.load(tmp_path / "t.jsonl")
    assert loaded.header["process"]["host"] == trace.header["process"]["host"]
    assert list(loaded.header["process"]["clock"]) == trace.header["process"]["clock"]
    text = (tmp_path / "t.jsonl").read_text().replace('"rank":null', '"rank":"zero"')
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(TraceFormatError, match="process: rank"):
        Trace.load(tmp_path / "bad.jsonl")


def test_a_timeline_of_several_processes_lines_their_clocks_up(tmp_path: Path) -> None:
    import json

    import engine
    from autograd_viz import cli
    from autograd_viz.trace.recording import record

    paths = []
    for rank in (0, 1):
        with record() as trace:
            x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
            (x * 2.0).sum().backward()
        process = {**process_info(), "rank": rank, "world_size": 2, "host": "node\x1b[31m"}
        # rank 1's first event came 5 ms after rank 0's, by the wall clock
        process["clock"] = [trace.events[0].t_ns, 10**18 + rank * 5_000_000]
        trace.header["process"] = process
        paths.append(tmp_path / f"t.rank{rank}.jsonl")
        trace.save(paths[-1])
    assert cli.main(["timeline", *map(str, paths)]) == 0
    document = json.loads((tmp_path / "t.timeline.json").read_text())
    assert document["otherData"]["aligned"] is True
    items = document["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in items if e["name"] == "process_name"}
    assert names == {
        1: f"rank 0 of 2 (pid {os.getpid()} on node\\x1b[31m)",
        2: f"rank 1 of 2 (pid {os.getpid()} on node\\x1b[31m)",
    }
    for pid, start in ((1, 0.0), (2, 5000.0)):
        slices = [e for e in items if e["pid"] == pid and e["ph"] == "X"]
        assert min(e["ts"] for e in slices) == pytest.approx(start)
        assert {e["cat"] for e in slices} == {"node", "graph_task"}
    flows = [e["id"] for e in items if e["ph"] == "s"]
    assert len(flows) == len(set(flows))  # each process's arrows keep their own ids


def test_collectives_are_slices_on_their_buckets_lanes_with_an_arrow_from_their_node(
    tmp_path: Path,
) -> None:
    import engine
    from autograd_viz.draw.render.words import explain
    from autograd_viz.timeline import to_chrome_trace
    from autograd_viz.trace.recording import record
    from engine.events import HUB

    with record() as trace:
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        (x * 2.0).sum().backward()
        (gid,) = trace.graph_tasks
        for bucket, phase in ((0, "launched"), (1, "launched"), (0, "finished"), (1, "finished")):
            data = {"op": "allreduce", "bucket": bucket, "bytes": 8, "params": ("w",)}
            HUB.emit_data("comm", "cpu", gid, None, {**data, "phase": phase})
    trace.save(tmp_path / "t.jsonl")
    trace = Trace.load(tmp_path / "t.jsonl")  # comm events are part of the schema
    items = to_chrome_trace(trace)["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in items if e["name"] == "thread_name"}
    comm = [e for e in items if e.get("cat") == "comm"]
    assert sorted(lanes[e["tid"]] for e in comm) == [
        "communication: bucket 0",
        "communication: bucket 1",
    ]
    assert all(e["dur"] >= 0 and e["args"]["status"] == "finished" for e in comm)
    arrows = [e for e in items if e["ph"] in "sf" and e["name"] == "launch"]
    assert len(arrows) == 4
    assert len({e["id"] for e in items if e["ph"] == "s"}) == len(
        [e for e in items if e["ph"] == "s"]
    )
    launched = next(e for e in trace.events if e.kind == "comm")
    sentence = explain(launched, launched.data, lambda node_id, name: str(name))
    assert "bucket 0 (w)" in sentence and "launched" in sentence


FIVE_CALLS = """
    import multiprocessing as mp
    import sys

    import engine


    def work():
        for i in range(5):
            x = engine.tensor([1.0, float(i)], requires_grad=True, name="x")
            (x * 2.0).sum().backward()


    if __name__ == "__main__":
        child = mp.get_context("spawn").Process(target=work)
        child.start()
        child.join()
"""


@pytest.mark.parametrize(("option", "kept"), [("--every=2", 3), ("--last=2", 2)])
def test_a_child_counts_and_selects_its_own_calls(tmp_path: Path, option: str, kept: int) -> None:
    script = tmp_path / "five.py"
    script.write_text(textwrap.dedent(FIVE_CALLS), encoding="utf-8")
    done = run(tmp_path, "-m", "autograd_viz", "record", option, "-o", "t.jsonl", str(script))
    assert done.returncode == 0, done.stderr
    (trace,) = child_traces(tmp_path).values()
    assert len(trace.graph_tasks) == kept


def test_nan_in_one_rank_of_torchrun_heads_its_report_with_the_rank(tmp_path: Path) -> None:
    script = tmp_path / "nan_rank.py"
    script.write_text(
        "import numpy as np\nimport engine\n"
        "x = engine.tensor([0.0, 1.0], requires_grad=True, name='x')\n"
        "with np.errstate(all='ignore'):\n    (x * 0.0).log().sum().backward()\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANK": "1", "WORLD_SIZE": "2"}
    env.pop(processes.ENV, None)
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "nan", "-o", "t.jsonl", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("rank 1 of 2 (pid "), done.stdout
    assert Trace.load(tmp_path / "t.rank1.jsonl").header["process"]["rank"] == 1


STREAMING_CHILD = """
    import multiprocessing as mp
    import os

    import engine


    def work():
        for i in range(3):
            x = engine.tensor([1.0, float(i)], requires_grad=True, name="x")
            (x * 2.0).sum().backward()
        with open(f"t.pid{os.getpid()}.jsonl", encoding="utf-8") as f:  # while it still runs
            print("written", sum('"type":"graph_task"' in line for line in f))


    if __name__ == "__main__":
        child = mp.get_context("spawn").Process(target=work)
        child.start()
        child.join()
"""


def test_a_spawned_child_writes_each_call_as_it_ends(tmp_path: Path) -> None:
    script = tmp_path / "streaming.py"
    script.write_text(textwrap.dedent(STREAMING_CHILD), encoding="utf-8")
    done = run(tmp_path, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script))
    assert done.returncode == 0, done.stderr
    assert "written 3" in done.stdout  # on disk before the child ended: its memory stays flat
    (trace,) = child_traces(tmp_path).values()
    assert len(trace.graph_tasks) == 3
    assert trace.header["process"]["launcher"] == "multiprocessing (spawn)"


KILLED_CHILD = """
    import multiprocessing as mp
    import os
    import signal
    import sys
    import time

    import engine


    def work(ready):
        for i in range(4):
            x = engine.tensor([1.0, float(i)], requires_grad=True, name="x")
            (x * 2.0).sum().backward()
        ready.set()
        try:
            time.sleep(60)
        finally:
            print("the child's finally ran", flush=True)


    if __name__ == "__main__":
        context = mp.get_context("spawn")
        ready = context.Event()
        child = context.Process(target=work, args=(ready,))
        child.start()
        ready.wait(60)
        time.sleep(0.5)  # the child is asleep in its own code
        os.kill(child.pid, getattr(signal, sys.argv[1]))
        child.join()
        print("child exit code", child.exitcode)
"""


def test_a_child_killed_with_kill_9_keeps_the_calls_written_so_far(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(KILLED_CHILD), encoding="utf-8")
    done = run(tmp_path, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script), "SIGKILL")
    assert done.returncode == 0, done.stderr
    assert "child exit code -9" in done.stdout
    (trace,) = child_traces(tmp_path).values()
    assert len(trace.graph_tasks) == 4  # every call it had ended: only one in flight is lost
    assert "process" not in trace.header  # it never reached its exit hooks
    (path,) = tmp_path.glob("t.pid*.jsonl")
    assert f"ended before finishing its trace; the calls it wrote are in {path}" in done.stderr
    assert not left_running(script)


@pytest.mark.parametrize("last", [None, "2"])
def test_a_child_stopped_by_sigterm_saves_what_it_holds_and_ends_by_it(
    tmp_path: Path, last: str | None
) -> None:
    """Note [A child stopped by a signal]: torchrun and mp.spawn stop the other ranks so."""
    script = tmp_path / "stopped.py"
    script.write_text(textwrap.dedent(KILLED_CHILD), encoding="utf-8")
    plain = run(tmp_path, str(script), "SIGTERM")
    assert "child exit code -15" in plain.stdout
    assert "the child's finally ran" not in plain.stdout
    options = ["--last", last] if last else []
    done = run(
        tmp_path, "-m", "autograd_viz", "record", *options, "-o", "t.jsonl", str(script), "SIGTERM"
    )
    assert done.returncode == 0, done.stderr
    assert "child exit code -15" in done.stdout  # the status the job has unwatched
    assert re.search(r"process \d+ got SIGTERM: saving what it recorded, then ending", done.stderr)
    (trace,) = child_traces(tmp_path).values()  # its flight recorder, or its streamed file
    assert len(trace.graph_tasks) == (2 if last else 4)
    assert trace.header["process"]["launcher"] == "multiprocessing (spawn)"
    assert "1 child process recorded" in done.stdout
    assert "ended before finishing" not in done.stderr
    assert not left_running(script)


def test_a_watched_child_starts_without_the_drawing_modules(tmp_path: Path) -> None:
    """A child imports the recorder only (Note [Lazy top-level names]); the public names
    still resolve on first use."""
    settings = ChildSettings(command="record", job=str(tmp_path), output=str(tmp_path / "t.jsonl"))
    env = {
        **os.environ,
        processes.ENV: settings.to_env(),
        "PYTHONPATH": os.pathsep.join([processes.STARTUP_DIR, str(REPO)]),
    }
    probe = textwrap.dedent(
        """
        import sys
        assert "autograd_viz.cli.children" in sys.modules  # the child is watched
        heavy = ("graphviz", "rich", "textual", "autograd_viz.draw", "autograd_viz.trace.replay",
                 "autograd_viz.live", "autograd_viz.nan")
        print(sorted(m for m in sys.modules if m.startswith(heavy)))
        import autograd_viz
        print(sorted(n for n in autograd_viz.__all__ if getattr(autograd_viz, n) is None))
        from autograd_viz import ExecutionState, to_dot, watch_nan
        from autograd_viz.trace import NodeStatus
        print(to_dot.__module__, watch_nan.__module__, ExecutionState.__module__, NodeStatus.__name__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[]",
        "[]",
        "autograd_viz.draw.render.dot autograd_viz.nan.watch autograd_viz.trace.replay NodeStatus",
    ]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        import autograd_viz

        _ = autograd_viz.nothing
