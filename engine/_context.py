"""Thread-local state of the engine, shared by the engine loop and the nodes it runs.

These mirror the thread-locals of PyTorch's engine.cpp: ``worker_device``
(``None`` on a thread that is not running the engine), ``current_depth`` and
``total_depth`` for reentrant backward, the thread's ``local_ready_queue``, and
the graph task whose node this thread is running now.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

GIL = getattr(sys, "_is_gil_enabled", lambda: True)()
"""Whether this interpreter runs with a GIL (a free-threaded build may not).

The lock-free queue ends and AccumulateGrad's stealing rely on it.
"""


class _EngineThreadState(threading.local):
    def __init__(self) -> None:
        self.worker_device: Any = None
        """Device this thread works for; ``None`` when it is not an engine thread yet."""
        self.current_depth = 0
        """Reentrant backward calls nested on this thread."""
        self.total_depth = 0
        """Reentrant depth including calls handed over from other threads."""
        self.local_ready_queue: Any = None
        """The ReadyQueue this thread pops from."""
        self.graph_task: Any = None
        """The GraphTask whose node this thread is running, if any."""
        self.current_node: Any = None
        """The node whose ``apply`` runs on this thread, kept only in anomaly mode (the
        parent that nodes made during a backward remember; Note [Induced by])."""
        self.scope: tuple[tuple[str, int, str], ...] = ()
        """The scopes open on this thread, outermost first (:mod:`engine.scopes`)."""


TLS = _EngineThreadState()

SCOPE_KEY = "scope_"
"""The key of a node's ``metadata`` that holds the scopes it was made in (:mod:`engine.scopes`)."""


def current_device_name() -> str:
    """Name of the device this thread works for, ``cpu`` outside the engine."""
    dev = TLS.worker_device
    return "cpu" if dev is None else str(dev)


def current_graph_task_id() -> int:
    """Id of the graph task this thread is running a node of; 0 if none."""
    task = TLS.graph_task
    return 0 if task is None else task.id
