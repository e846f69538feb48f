"""DDP's part of a backward: each gradient bucket's allreduce, as ``comm`` events on its node.

``DistributedDataParallel`` hooks every parameter's ``AccumulateGrad``: when
the last gradient of a bucket has accumulated, the bucket is ready and its
allreduce is launched, while the backward goes on; the backward's final
callback waits for every allreduce. PyTorch shows this through one public
door, the communication hook (``register_comm_hook``), which is called with
each ready bucket and returns the future of its reduction.

Note [Watching DDP through its comm hook]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
While armed, every DDP model made gets a comm hook of ours that emits
``comm`` (``phase: "launched"``) on the node whose gradient made the bucket
ready (the ``AccumulateGrad`` running when DDP calls the hook), reduces the
bucket as DDP does without a hook (PyTorch's own ``allreduce_hook``: divide
by the world size, then allreduce; its documentation promises the same
results as no hook), and emits ``comm`` (``phase: "finished"``) on the
thread that completes the future (Note [Communication threads' names]).
The parameters are bit-identical to an unwatched run
(``tests/viz/launch/test_distributed.py``). DDP takes one comm hook: one the
program registers later runs inside ours, so the program's own reduction is
what runs, and is watched. Not watched: DDP models made before
arming, and reductions DDP makes outside the hook (unused-parameter maps,
``static_graph``'s first iteration's checks).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from autograd_viz.sources.once import program_stacklevel
from autograd_viz.sources.refcount import Refcount
from engine.activity import ACTIVITY
from engine.events import HUB, label_thread

_originals: dict[str, Any] = {}


def watch_ddp() -> Callable[[], None]:
    """Give every DDP model made from now on a comm hook that emits ``comm`` events.

    Returns:
        A function that stops (once every caller has called its own).
    """
    release = _ddp.hold()
    return release if release is not None else lambda: None


def _arm() -> bool:
    ddp_class = _ddp_class()
    if ddp_class is None:
        return False  # no torch.distributed here: nothing to watch
    _patch(ddp_class)
    return True


def _disarm() -> None:
    ddp_class = _ddp_class()
    for name, original in _originals.items():
        setattr(ddp_class, name, original)
    _originals.clear()


_ddp = Refcount(_arm, _disarm)  # Note [Armed while held]


def _ddp_class() -> Any:
    if not dist.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


def _patch(ddp_class: Any) -> None:
    init = ddp_class.__init__
    register = ddp_class.register_comm_hook
    builtin = ddp_class._register_builtin_comm_hook
    _originals.update(
        __init__=init, register_comm_hook=register, _register_builtin_comm_hook=builtin
    )

    @functools.wraps(init)
    def init_and_watch(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            _observe(self)
        except Exception as exc:  # noqa: BLE001 - the model works unwatched; one line says so
            warnings.warn(
                f"autograd-viz: cannot watch this DDP model's communication ({exc!r})",
                RuntimeWarning,
                stacklevel=program_stacklevel(),
            )

    def register_comm_hook(self: Any, state: object, hook: Callable[..., Any]) -> None:
        comm: _Comm | None = getattr(self, "_autograd_viz_comm", None)
        if comm is None:
            return register(self, state, hook)
        self._check_comm_hook(hook)
        comm.program_hook = (hook, state)
        self._comm_hooks.append((hook, state))
        return None

    def _register_builtin_comm_hook(self: Any, comm_hook_type: Any) -> None:
        comm: _Comm | None = getattr(self, "_autograd_viz_comm", None)
        if comm is None:
            return builtin(self, comm_hook_type)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hooks = {
            dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
            dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook,
        }
        comm.program_hook = (hooks[comm_hook_type], self.process_group)
        return None

    ddp_class.__init__ = init_and_watch
    ddp_class.register_comm_hook = register_comm_hook
    ddp_class._register_builtin_comm_hook = _register_builtin_comm_hook


def _observe(ddp: Any) -> None:
    """Register the watching comm hook on a new DDP model (Note [Watching DDP ...])."""
    # Named as the program names them: model.named_parameters() on the DDP object says
    # "module.fc.weight", since the model it wraps is its `module`.
    names = {id(p): name for name, p in ddp.named_parameters()}
    comm = _Comm(ddp.process_group, names)
    dist._register_comm_hook(ddp.reducer, None, comm.hook)
    ddp._autograd_viz_comm = comm


class _Comm:
    """One DDP model's watching comm hook."""

    def __init__(self, group: Any, names: dict[int, str]) -> None:
        self.group = group
        self.names = names
        self.backend = backend_of(group)
        """The process group's backend (``gloo``), which names its callback threads."""
        self.program_hook: tuple[Callable[..., Any], object] | None = None
        """A comm hook the program registered later: it reduces, inside ours."""

    def hook(self, state: object, bucket: Any) -> Any:
        from autograd_viz.sources.pytorch.watch import current_watch

        watch = current_watch() if HUB.active else None
        node = watch.running_node() if watch is not None else None
        data: dict[str, Any] = {}
        if watch is not None:
            buffer = bucket.buffer()
            data = {
                "op": "allreduce",
                "bucket": bucket.index(),
                "bytes": buffer.numel() * buffer.element_size(),
                "params": tuple(self.names.get(id(p), "?") for p in bucket.parameters()),
            }
            watch.emit("comm", node, {**data, "phase": "launched"})
        if self.program_hook is not None:
            hook, hook_state = self.program_hook
            future = hook(hook_state, bucket)
        else:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            future = allreduce_hook(self.group, bucket)
        if watch is None:
            return future
        graph_task = watch.id
        backend = self.backend

        def finished(done: torch.futures.Future[Any]) -> Any:
            if HUB.active:
                name_comm_thread(backend)
                ACTIVITY.enter()
                try:
                    HUB.emit_data("comm", "cpu", graph_task, node, {**data, "phase": "finished"})
                finally:
                    ACTIVITY.leave()
            return done.value()

        return future.then(finished)


# Note [Communication threads' names]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A collective's future completes on a thread of the communication library
# (gloo's, NCCL's), which Python did not start and calls ``Dummy-N``, a name
# that differs from run to run and says nothing. Events on such a thread carry
# the backend's name instead (``gloo``; ``gloo-2`` for a second such thread),
# in the trace itself, so that every view (the TUI, the timeline's tracks,
# ``run --print``) shows the same name. The thread is not renamed: the
# program's own view of it (``threading``, logging's ``threadName``) is as it
# would be unwatched.

_comm_threads: dict[int, str] = {}
_comm_lock = threading.Lock()


def name_comm_thread(backend: str) -> None:
    """Name this thread's events for ``backend`` if Python did not start it (Note [...])."""
    thread = threading.current_thread()
    if not isinstance(thread, threading._DummyThread) or thread.ident is None:
        return
    with _comm_lock:
        name = _comm_threads.get(thread.ident)
        if name is None:
            taken = sum(1 for known in _comm_threads.values() if known.split("-")[0] == backend)
            name = backend if not taken else f"{backend}-{taken + 1}"
            _comm_threads[thread.ident] = name
    # Each callback may come with a fresh Python thread state (and so fresh thread-locals):
    # the name is given again every time, from the thread's id.
    label_thread(name)


def backend_of(group: Any) -> str:
    """The backend of ``group`` (``gloo``, ``nccl``), or ``comm`` when it cannot be told."""
    try:
        return str(dist.get_backend(group)).lower() or "comm"
    except Exception:  # noqa: BLE001 - a group without a backend name still has its events
        return "comm"
