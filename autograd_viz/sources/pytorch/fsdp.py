"""FSDP2's part of a job: each all-gather and reduce-scatter, as ``comm`` events.

``fully_shard`` keeps each parameter sharded across the ranks. Before a
module's forward, and again before its backward, FSDP2 all-gathers the
module's parameters (``FSDPParamGroup.unshard``); after its backward it
reduce-scatters their gradients (``FSDPParamGroup.post_backward``). Both go
through FSDP2's communication objects (``DefaultAllGather``,
``DefaultReduceScatter`` and their variants in ``_fsdp_collectives``), which
call ``torch.distributed`` and hand back its work object.

Note [Watching FSDP2's collectives]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
While armed, the ``__call__`` of each of FSDP2's own communication classes is
wrapped: it emits ``comm`` (``phase: "launched"``) with the collective
(``all_gather`` or ``reduce_scatter``), the parameter group it moves (FSDP2's
unit of communication, one per ``fully_shard``-ed module, as a bucket is
DDP's: its ``bucket`` number, in the order the groups are first seen), the
group's parameters (named as in ``named_parameters()``) and its size,
calls the original with the same arguments, and emits ``comm`` (``phase:
"finished"``) when the collective has completed: at once when it ran
synchronously, else from the work object's future, on the thread that
completes it (Note [Communication threads' names] in
:mod:`~autograd_viz.sources.pytorch.ddp`). The call, its tensors and its work
object are FSDP2's own, untouched, so the parameters are bit-identical to an
unwatched run (``tests/viz/sources/test_fsdp.py``). Which module a collective is for
is noted by wrapping ``FSDPParamGroup.unshard`` and ``post_backward``, which
only set a thread-local around the original. Inside a backward call the
events belong to its graph task, on the node running then (none when FSDP2's
hook runs between nodes); in the forward pass they belong to no graph task
(0), as the forward NaN checks' findings do. The classes are patched when
the program imports FSDP2 (nothing of it is imported on our side) and
restored when watching ends. Not watched: a custom communication object set
with ``set_custom_all_gather`` or ``set_custom_reduce_scatter``, and HSDP's
all-reduce across replicas.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from autograd_viz.sources.import_hooks import when_module_is_imported
from autograd_viz.sources.pytorch.ddp import backend_of, name_comm_thread
from autograd_viz.sources.refcount import Refcount
from engine.activity import ACTIVITY
from engine.events import HUB

_PARAM_GROUP = "torch.distributed.fsdp._fully_shard._fsdp_param_group"
"""The module whose import makes FSDP2 usable (it imports its collectives first)."""

_lock = threading.Lock()
_stop_waiting: Callable[[], None] | None = None
_originals: list[tuple[type, str, Any]] = []
_LOCAL = threading.local()  # .group: the FSDPParamGroup unsharding or reducing on this thread
_buckets = itertools.count()


def watch_fsdp() -> Callable[[], None]:
    """Emit ``comm`` events for FSDP2's collectives from now on (Note [Watching FSDP2's ...]).

    Returns:
        A function that stops (once every caller has called its own).
    """
    release = _fsdp.hold()
    assert release is not None  # waiting for the import always arms
    return release


def _arm() -> None:
    global _stop_waiting
    _stop_waiting = when_module_is_imported(_PARAM_GROUP, _patch)


def _disarm() -> None:
    global _stop_waiting
    with _lock:
        stop, _stop_waiting = _stop_waiting, None
        for owner, name, original in _originals:
            setattr(owner, name, original)
        _originals.clear()
    if stop is not None:
        stop()


_fsdp = Refcount(_arm, _disarm)  # Note [Armed while held]


def _patch(param_group: ModuleType) -> None:
    """Wrap FSDP2's communication classes and its param group's two steps (under the lock)."""
    import sys

    collectives = sys.modules.get("torch.distributed.fsdp._fully_shard._fsdp_collectives")
    group_class = getattr(param_group, "FSDPParamGroup", None)
    if collectives is None or group_class is None:
        return  # another FSDP2 than this was written for: it runs unwatched
    with _lock:
        if _fsdp.holders == 0 or _originals:
            return
        for name in ("unshard", "post_backward"):
            original = group_class.__dict__.get(name)
            if original is not None:
                _originals.append((group_class, name, original))
                setattr(group_class, name, _noting_group(original))
        for kind, base in (("all_gather", "AllGather"), ("reduce_scatter", "ReduceScatter")):
            interface = getattr(collectives, base, None)
            if interface is None:
                continue
            for value in vars(collectives).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, interface)
                    and value is not interface
                    and "__call__" in value.__dict__
                ):
                    original = value.__dict__["__call__"]
                    _originals.append((value, "__call__", original))
                    setattr(value, "__call__", _watching(original, kind))  # noqa: B010


def _noting_group(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def noting(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_LOCAL, "group", None)
        _LOCAL.group = self
        try:
            return original(self, *args, **kwargs)
        finally:
            _LOCAL.group = outer

    return noting


def _watching(original: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not HUB.active:
            return original(self, *args, **kwargs)
        # FSDP2 passes them by name; the interface has them first, in this order.
        named = dict(zip(("output_tensor", "input_tensor", "group"), args, strict=False))
        named.update(kwargs)
        group = named.get("group")
        emit = _launched(kind, named.get("output_tensor"), named.get("input_tensor"), group)
        work = original(self, *args, **kwargs)
        if emit is not None:
            _when_finished(work, emit, backend_of(group))
        return work

    return call


def _launched(kind: str, output: Any, input: Any, group: Any) -> Callable[[], None] | None:
    """Emit ``launched``; return what emits ``finished``. ``None`` if this cannot be watched."""
    from autograd_viz.sources.pytorch.watch import current_watch

    param_group = getattr(_LOCAL, "group", None)
    if param_group is None:
        return None  # not one of FSDP2's two steps: not a collective this watches
    try:
        moved = output if kind == "all_gather" else input
        data: dict[str, Any] = {
            "op": kind,
            "bucket": _bucket(param_group),
            "bytes": moved.numel() * moved.element_size(),
            "params": tuple(
                str(getattr(p, "_param_fqn", "?")) for p in getattr(param_group, "fsdp_params", ())
            ),
        }
    except Exception:  # noqa: BLE001 - FSDP2's collective goes on, unwatched
        return None
    watch = current_watch()
    node = watch.running_node() if watch is not None else None
    if watch is not None:
        watch.emit("comm", node, {**data, "phase": "launched"})
        graph_task = watch.id
    else:
        graph_task = 0
        _emit(graph_task, node, {**data, "phase": "launched"})

    def finished() -> None:
        _emit(graph_task, node, {**data, "phase": "finished"})

    return finished


def _bucket(param_group: Any) -> int:
    """The number of a parameter group, FSDP2's unit of communication as a bucket is DDP's:
    given in the order the groups are first seen, kept on the group."""
    number = getattr(param_group, "_autograd_viz_bucket", None)
    if number is None:
        with _lock:
            number = getattr(param_group, "_autograd_viz_bucket", None)
            if number is None:
                number = next(_buckets)
                param_group._autograd_viz_bucket = number
    return int(number)


def _emit(graph_task: int, node: Any, data: dict[str, Any]) -> None:
    if not HUB.active:
        return
    ACTIVITY.enter()  # a debugger may pause this thread here
    try:
        HUB.emit_data("comm", "cpu", graph_task, node, data)
    finally:
        ACTIVITY.leave()


def _when_finished(work: Any, finished: Callable[[], None], backend: str) -> None:
    """Call ``finished`` once ``work`` has completed: now if it ran synchronously."""
    if work is None:
        finished()
        return
    try:
        future = work.get_future()
    except Exception:  # noqa: BLE001 - a backend without futures: its end is not seen
        return

    def done(completed: Any) -> None:
        name_comm_thread(backend)
        with contextlib.suppress(Exception):  # a callback of ours must not fail the collective
            finished()

    future.then(done)
