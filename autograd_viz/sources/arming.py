"""Arming every source while somebody records or steps: PyTorch's engine as well as ours.

Our engine emits its events by itself. PyTorch's backward calls are watched by
the bridge (:mod:`autograd_viz.sources.pytorch`), which has to be armed; this
module arms it for the duration of a recording or a live session, so that a
PyTorch user ports nothing and passes no flag.

Note [Arming without importing torch]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A program on our engine alone must never import PyTorch (it may not be
installed, and importing it costs seconds). So the bridge is armed at once
only when ``torch`` is already in ``sys.modules``; otherwise an import hook
(:mod:`autograd_viz.sources.import_hooks`) waits for the program's own
``import torch`` and arms the bridge right after PyTorch finished importing,
before the program's next line runs. Without PyTorch installed, the
program's ``import torch`` fails exactly as it would without us: the hook
only looks at a module once it has loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autograd_viz.sources.import_hooks import (
    call_when_torch_is_imported,
    stop_waiting,
    when_torch_is_imported,
)
from autograd_viz.sources.refcount import Refcount
from autograd_viz.sources.tracebacks import trim_traceback

__all__ = ["acquire", "every_source", "release", "when_torch_is_imported"]
# when_torch_is_imported is offered here too: the other PyTorch watchers wait through it.

_watch: Any = None
"""The bridge's open handle (a ``TorchWatch``), while armed."""
_stop_ddp: Callable[[], None] | None = None
"""Stops watching DDP's and FSDP2's communication (:mod:`autograd_viz.sources.pytorch.ddp`,
:mod:`~autograd_viz.sources.pytorch.fsdp`), while armed."""


@contextmanager
def every_source() -> Iterator[None]:
    """Arm the PyTorch bridge inside the block (now, or when the program imports torch).

    Blocks nest and may overlap across threads: the bridge stays armed while
    any is open. An exception leaving the block loses the bridge's frames from
    its traceback (Note [A traceback as without us] in
    :mod:`autograd_viz.sources.tracebacks`).
    """
    acquire()
    try:
        yield
    except BaseException as exc:
        trim_traceback(exc)
        raise
    finally:
        release()


def acquire() -> None:
    """Count one more holder; arm now or when ``torch`` is imported (Note [Arming without ...])."""
    _releases.append(_held())


def release() -> None:
    """Count one holder less; disarm when none is left."""
    _releases.pop()()


def _wait_for_torch() -> None:
    call_when_torch_is_imported(_arm)


def _disarm() -> None:
    global _watch, _stop_ddp
    stop_waiting(_arm)
    if _watch is not None:
        _watch.close()
        _watch = None
    if _stop_ddp is not None:
        _stop_ddp()
        _stop_ddp = None


_bridge = Refcount(_wait_for_torch, _disarm)  # Note [Armed while held]
_releases: list[Callable[[], None]] = []
"""One release per :func:`acquire` not yet released (any one of them lets go of one hold)."""


def _held() -> Callable[[], None]:
    release = _bridge.hold()
    assert release is not None  # waiting for torch always arms
    return release


def _arm() -> None:
    global _watch, _stop_ddp
    if _watch is not None:
        return
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "autograd"):
        return  # a half-imported or foreign module named torch: nothing to watch
    from autograd_viz.sources.pytorch import watch_torch
    from autograd_viz.sources.pytorch.ddp import watch_ddp
    from autograd_viz.sources.pytorch.fsdp import watch_fsdp

    _watch = watch_torch()
    stops = [watch_ddp(), watch_fsdp()]

    def stop_distributed() -> None:
        for stop in stops:
            stop()

    _stop_ddp = stop_distributed


def _prepare() -> None:
    """Once torch is imported: note hooks and compiled regions as the program makes them.

    See Note [Seeing the user's hooks] and Note [Compiled regions] in the bridge:
    a hook registered, or a function compiled, before the bridge is armed must
    still be seen when it is. Nothing is watched until then.
    """
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "autograd"):
        return
    from autograd_viz.sources.pytorch import compiled

    compiled.install()


call_when_torch_is_imported(_prepare)  # Note [Arming without importing torch]: imports nothing
