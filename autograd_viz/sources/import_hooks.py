"""Calling what waits for a module once the program has imported it, importing nothing itself.

Watchers that patch PyTorch wait here for the program's own ``import torch``
(Note [Arming without importing torch] in :mod:`autograd_viz.sources.arming`),
and the FSDP2 watcher for the one part of PyTorch it patches: an import hook
(a finder first on ``sys.meta_path``) finds nothing itself, wraps the real
loader of the one module it waits for, and calls what waited right after that
module has executed.
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

_lock = threading.RLock()
_waiting: list[Callable[[], None]] = []
"""What to call once the program has imported ``torch``."""


@contextmanager
def when_torch_is_imported(then: Callable[[], None]) -> Iterator[None]:
    """Call ``then`` inside the block: now if ``torch`` is imported, else right after it is.

    ``then`` runs once, on the thread that imports torch, after PyTorch has
    finished importing; it is not called if the block ends first. Other
    PyTorch watchers (the NaN checks) arm themselves through this, so that
    there is one import hook, and a program on our engine alone never
    imports torch.
    """
    call_when_torch_is_imported(then)
    try:
        yield
    finally:
        stop_waiting(then)


@contextmanager
def armed_on_this_thread(arm: Callable[[], Callable[[], None]]) -> Iterator[None]:
    """Call ``arm`` once torch is there, if that happens on this thread; undo it at the end.

    ``arm`` patches PyTorch for this thread's program (the NaN checks, the
    gradient watch) and returns what undoes that. It runs now if torch is
    imported, else when the program imports it on this thread; an import on
    another thread arms nothing (a watch follows the thread that opened it).
    """
    undo: list[Callable[[], None]] = []
    owner = threading.get_ident()

    def then() -> None:
        if undo or threading.get_ident() != owner:
            return
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "autograd"):
            return
        undo.append(arm())

    with when_torch_is_imported(then):
        try:
            yield
        finally:
            for done in undo:
                done()


def call_when_torch_is_imported(then: Callable[[], None]) -> None:
    """Call ``then`` now if ``torch`` is imported, else once the program has imported it."""
    with _lock:
        if "torch" in sys.modules:
            then()
            return
        _waiting.append(then)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def stop_waiting(then: Callable[[], None]) -> None:
    """``then`` no longer waits for ``torch`` (nothing when it never waited or already ran)."""
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
