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
waits for the program's own ``import torch`` and arms the bridge right after
PyTorch finished importing, before the program's next line runs. Without
PyTorch installed, the program's ``import torch`` fails exactly as it would
without us: the hook only looks at a module once it has loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from autograd_viz.sources.tracebacks import trim_traceback

_lock = threading.RLock()
_holders = 0
_watch: Any = None
"""The bridge's open handle (a ``TorchWatch``), while armed."""
_stop_ddp: Callable[[], None] | None = None
"""Stops watching DDP's and FSDP2's communication (:mod:`autograd_viz.sources.pytorch.ddp`,
:mod:`~autograd_viz.sources.pytorch.fsdp`), while armed."""
_waiting: list[Callable[[], None]] = []
"""What to call once the program has imported ``torch`` (Note [Arming without importing torch])."""


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
    global _holders
    with _lock:
        _holders += 1
        if _holders == 1:
            _call_when_torch_is_imported(_arm)


def release() -> None:
    """Count one holder less; disarm when none is left."""
    global _holders, _watch, _stop_ddp
    with _lock:
        _holders -= 1
        if _holders:
            return
        _stop_waiting(_arm)
        if _watch is not None:
            _watch.close()
            _watch = None
        if _stop_ddp is not None:
            _stop_ddp()
            _stop_ddp = None


@contextmanager
def when_torch_is_imported(then: Callable[[], None]) -> Iterator[None]:
    """Call ``then`` inside the block: now if ``torch`` is imported, else right after it is.

    ``then`` runs once, on the thread that imports torch, after PyTorch has
    finished importing; it is not called if the block ends first. Other
    PyTorch watchers (the NaN checks) arm themselves through this, so that
    there is one import hook, and a program on our engine alone never
    imports torch.
    """
    _call_when_torch_is_imported(then)
    try:
        yield
    finally:
        _stop_waiting(then)


def _call_when_torch_is_imported(then: Callable[[], None]) -> None:
    with _lock:
        if "torch" in sys.modules:
            then()
            return
        _waiting.append(then)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def _stop_waiting(then: Callable[[], None]) -> None:
    with _lock:
        if then in _waiting:
            _waiting.remove(then)
        if not _waiting and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def _torch_imported() -> None:
    """PyTorch has just finished importing: call everything that waited for it."""
    with _lock:
        waiting = list(_waiting)
        _waiting.clear()
        if _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        for then in waiting:
            then()


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


class _TorchImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; calls what waits for ``torch`` once the real one has executed."""

    def __init__(self) -> None:
        self._searching = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self._searching:
            return None
        self._searching = True  # a finder that wraps others may ask the path again
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if finder is not self and find else None
                if spec is not None and spec.loader is not None:
                    spec.loader = _ThenLoader(spec.loader)
                    return spec
        finally:
            self._searching = False
        return None  # not installed: the program's own ImportError follows


class _ThenLoader(importlib.abc.Loader):
    """PyTorch's own loader, followed by whatever waited for it."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # PyTorch keeps its own loader, as if we had never been there.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        _torch_imported()

    def __getattr__(self, name: str) -> Any:  # is_package, get_code, get_resource_reader, ...
        return getattr(self._loader, name)


_FINDER = _TorchImportFinder()


class _ModuleImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` right after the module ``name`` has executed, once.

    For a part of PyTorch a watcher patches only if the program uses it (FSDP2's
    collectives): the program's import loads it, as it would unwatched, and
    nothing is imported on our side.
    """

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then
        self._searching = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self._searching:
            return None
        self._searching = True
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if finder is not self and find else None
                if spec is not None and spec.loader is not None:
                    spec.loader = _ModuleThenLoader(spec.loader, self)
                    return spec
        finally:
            self._searching = False
        return None


class _ModuleThenLoader(_ThenLoader):
    """A module's own loader, followed by its finder's ``then``."""

    def __init__(self, loader: importlib.abc.Loader, finder: _ModuleImportFinder) -> None:
        super().__init__(loader)
        self._finder = finder

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        with _lock:
            if self._finder not in sys.meta_path:
                return  # stopped waiting while it loaded
            sys.meta_path.remove(self._finder)
        self._finder.then(module)


def when_module_is_imported(name: str, then: Callable[[ModuleType], None]) -> Callable[[], None]:
    """Call ``then(module)`` now if ``name`` is imported, else right after the program imports it.

    Returns:
        A function that stops waiting (safe to call after ``then`` ran).
    """
    with _lock:
        module = sys.modules.get(name)
        if module is not None:
            then(module)
            return lambda: None
        finder = _ModuleImportFinder(name, then)
        sys.meta_path.insert(0, finder)

    def stop() -> None:
        with _lock:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)

    return stop


_call_when_torch_is_imported(
    _prepare
)  # Note [Arming without importing torch]: waits, imports nothing
