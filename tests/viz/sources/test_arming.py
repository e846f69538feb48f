"""Arming the PyTorch bridge: only when the program uses PyTorch, and never in its way."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_recording_our_engine_never_imports_torch() -> None:
    done = _run(
        """
        import sys
        import autograd_viz, engine
        with autograd_viz.record() as trace:
            a = engine.tensor([1.0, 2.0], requires_grad=True)
            (a * a).sum().backward()
        assert "torch" not in sys.modules, "torch was imported"
        assert trace.header["sources"] == ["engine"], trace.header
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_missing_torch_raises_the_programs_own_import_error() -> None:
    """Without PyTorch (a finder that refuses it stands in), the error is the one without us."""
    code = """
        import sys
        class NoTorch:
            def find_spec(self, name, path, target=None):
                if name == "torch":
                    raise ModuleNotFoundError("No module named 'torch'", name="torch")
                return None
        sys.meta_path.insert(0, NoTorch())
        import autograd_viz
        def program():
            try:
                import torch
            except ImportError as exc:
                print(type(exc).__name__, exc)
        {}
        """
    plain = _run(code.format("program()"))
    watched = _run(code.format("with autograd_viz.record():\n            program()"))
    assert plain.returncode == watched.returncode == 0, watched.stderr
    assert plain.stdout == watched.stdout == "ModuleNotFoundError No module named 'torch'\n"


def test_torch_imported_inside_a_recording_is_watched_and_released_after() -> None:
    pytest.importorskip("torch")
    done = _run(
        """
        import sys
        import autograd_viz
        with autograd_viz.record() as trace:
            import torch
            import torch.autograd.graph as graph
            x = torch.randn(3, requires_grad=True)
            (x * x).sum().backward()
            patched = graph._engine_run_backward
        assert patched is not graph._engine_run_backward, "still patched after the recording"
        assert "autograd_viz" not in type(torch.__spec__.loader).__module__
        assert not any("autograd_viz" in type(f).__module__ for f in sys.meta_path)
        assert trace.header["sources"] == ["torch " + torch.__version__], trace.header
        kinds = [e.kind for e in trace.events]
        assert kinds[0] == "graph_task_start" and kinds[-1] == "graph_task_end", kinds
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_program_using_both_engines_records_both() -> None:
    pytest.importorskip("torch")
    done = _run(
        """
        import autograd_viz, engine, torch
        with autograd_viz.record() as trace:
            a = engine.tensor([1.0, 2.0], requires_grad=True)
            (a * a).sum().backward()
            x = torch.ones(2, requires_grad=True)
            (x * 3).sum().backward()
        assert trace.header["sources"] == ["engine", "torch " + torch.__version__]
        assert len(trace.graph_tasks) == 2
        ids = [n for info in trace.graph_tasks.values() for n in info.nodes]
        assert len(ids) == len(set(ids)), "node ids collide between the engines"
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_name_names_a_tensor_of_either_engine() -> None:
    import autograd_viz
    import engine

    a = autograd_viz.name(engine.tensor([1.0], requires_grad=True), "a")
    assert a.name == "a"
    with pytest.raises(TypeError, match="engine.Tensor or a torch.Tensor, got list"):
        autograd_viz.name([1.0], "a")
    with pytest.raises(TypeError, match="must be a string, got int"):
        autograd_viz.name(a, 3)  # type: ignore[arg-type]
    torch = pytest.importorskip("torch")
    t = autograd_viz.name(torch.randn(2, requires_grad=True), "weights")
    with autograd_viz.record() as trace:
        (t * t).sum().backward()
    (task,) = trace.graph_tasks.values()
    assert [n.leaf.name for n in task.nodes.values() if n.leaf] == ["weights"]


def test_every_watcher_waiting_for_torch_is_armed_by_the_programs_import() -> None:
    """The bridge (backward) and the NaN checks (forward) share one import hook."""
    pytest.importorskip("torch")
    done = _run(
        """
        import sys
        from autograd_viz.nan.watch import watch_nan
        with watch_nan() as watch:
            assert "torch" not in sys.modules
            import torch
            x = torch.zeros(2, requires_grad=True)
            (x.log() * 0).sum().backward()  # log(0) = -inf in the forward pass
        first = watch.report.first
        assert first is not None and first.phase == "forward", first
        assert watch.trace.header["sources"] == ["torch " + torch.__version__]
        assert not any("autograd_viz" in type(f).__module__ for f in sys.meta_path)
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
