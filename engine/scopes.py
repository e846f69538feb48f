"""Named scopes: which part of a program made each node of the backward graph.

A model built on PyTorch has modules, and a trace of it says which module's
forward made each node (``transformer.h.3.attn``). A program on this engine
names its parts with :func:`scope`::

    with engine.scope("encoder", kind="Encoder"):
        for i, layer in enumerate(layers):
            with engine.scope(f"layer{i}", kind="Layer"):
                x = layer(x)

Every node made inside the block remembers the scopes open on its thread,
outermost first; a nested scope's path is its parent's path, a dot and its
own name (``encoder.layer0``). Each time a scope is entered it is a new call
of that path: a cell run at every step of an unrolled loop is one path with
many calls. Recorders (``autograd_viz``) read the scopes from the node's
``metadata`` and number the calls of each path within one backward graph.

Note [Scopes cost nothing outside them]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Node creation already reads one flag, ``anomaly.STATE.node_metadata``, to
decide whether a node gets a metadata dict (anomaly mode's forward stack).
The flag is also on while any scope is open, and then the dict holds the
thread's scopes as one shared tuple. So a program that opens no scope makes
its nodes exactly as before, and results never depend on scopes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engine import anomaly
from engine._context import SCOPE_KEY, TLS

__all__ = ["Scope", "current_scope", "node_scope", "scope"]

Scope = tuple[tuple[str, int, str], ...]
"""The scopes a node was made in, outermost first: ``(path, call id, kind)`` each. A call id
is unique in the process (each entry of a scope takes the next one); recorders turn it into a
call number within one graph."""

_call_ids = itertools.count()
_lock = anomaly.NODE_METADATA_LOCK  # open_scopes is shared by every thread


@contextmanager
def scope(name: str, kind: str | None = None) -> Iterator[str]:
    """Name the nodes made inside the block (on this thread) after a part of the program.

    Args:
        name: the part's name; inside another scope it is appended to that scope's path
            with a dot (``"encoder"`` then ``"layer1"`` gives ``"encoder.layer1"``).
        kind: what kind of part it is, as a module's class name says (``"Linear"``);
            ``"scope"`` when not given.

    Yields:
        The scope's full path.

    Raises:
        TypeError: ``name`` or ``kind`` is not a string.
        ValueError: ``name`` is empty.
    """
    if not isinstance(name, str):
        raise TypeError(f"a scope's name must be a string, got {type(name).__name__}")
    if not name:
        raise ValueError("a scope's name must not be empty")
    if kind is None:
        kind = "scope"
    elif not isinstance(kind, str):
        raise TypeError(f"a scope's kind must be a string, got {type(kind).__name__}")
    outer = TLS.scope
    path = f"{outer[-1][0]}.{name}" if outer else name
    TLS.scope = (*outer, (path, next(_call_ids), kind))
    state = anomaly.STATE
    with _lock:
        state.open_scopes += 1
        state.node_metadata = True
    try:
        yield path
    finally:
        TLS.scope = outer
        with _lock:
            state.open_scopes -= 1
            state.node_metadata = state.enabled or state.open_scopes > 0


def current_scope() -> Scope:
    """The scopes open on this thread, outermost first (``()`` outside any)."""
    scopes: Scope = TLS.scope
    return scopes


def node_scope(node: Any) -> Scope:
    """The scopes ``node`` was made in, outermost first (``()`` if it was made outside any)."""
    metadata = node._metadata
    if not metadata:
        return ()
    scopes: Scope = metadata.get(SCOPE_KEY, ())
    return scopes
