"""What the app's background builds made, moved out of the cyclic collector's way once done.

Note [What the app built is frozen]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Once a 20,000-node trace is open, the process holds some 364,000 objects
that live as long as the app: the node list's rows, the replay's index, the
pictures' module tree and names, the widgets. Python's cyclic collector scans
every one of them in each full (generation-2) collection, ~145 ms that lands
on whichever key happens to allocate the object that starts one. They are
made in threads with the collector paused (``paused_gc``), so when the builds
end they are all still young, to be scanned again on their way up.

So once no build runs (no rows or pictures being made in a thread, the
replay indexed to its end) after one ended, the app calls ``gc.freeze()``:
every object the collector tracks then moves to its permanent generation,
which no collection scans; what is made after is collected as usual. It is
safe because:

* freezing keeps nothing alive: a frozen object is still freed when its last
  reference goes, so a picture dropped from the cache is freed as before;
* what it leaks is only what is already cyclic garbage at that moment (never
  collected after); it happens once per build (the first screen, a new graph
  task, the first drawn DAG or ``/`` of a task), not per key;
* it is process-wide, so only an app that is the whole process does it:
  ``replay`` (its trace was frozen the same way, Note [A replayed trace skips
  the collector]), ``run`` and ``demo`` ask for it; the library does not (a
  program that calls it owns its process).

``run`` and ``demo`` freeze a live program's objects too (its model, its
graph, the modules it imported): at 20,000 nodes a full collection there
took several hundred ms, on whichever key set it off. A frozen object that a
program drops later as part of a cycle (a graph kept with
``retain_graph=True`` and let go, one never differentiated) is never
collected while frozen, and a program makes one per step; so a live app
(``live=True``) gives what it froze back to the collector and collects it
once, right before each freeze after the first. That is one full collection
per new big graph task, when its rows or pictures are made, instead of one
on some key; memory stays bounded by what one step leaves.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from textual.message_pump import MessagePump
from textual.timer import Timer

POLL_S = 0.2
"""How often, while a build still runs, whether they have all ended is asked again."""


class Freezer:
    """Freezes what the builds made once none runs (Note [What the app built is frozen]).

    Args:
        pump: the app, whose timers ask again while a build runs.
        building: whether a build runs now (asked on the UI thread).
        live: the process runs a program that keeps making and dropping objects: collect
            what was frozen before each freeze after the first.
    """

    def __init__(
        self, pump: MessagePump, building: Callable[[], bool], *, live: bool = False
    ) -> None:
        self._pump = pump
        self._building = building
        self._live = live
        self._pending = False
        self._timer: Timer | None = None
        self.freezes = 0
        """How many times the app froze what it built (for tests and benchmarks)."""

    def built(self) -> None:
        """A build ended (or began and will end): freeze once none runs."""
        self._pending = True
        if self._timer is None:
            self._check()

    def _check(self) -> None:
        self._timer = None
        if not self._pending:
            return
        if self._building():
            self._timer = self._pump.set_timer(POLL_S, self._check)
            return
        self._pending = False
        if self._live and self.freezes:
            gc.unfreeze()  # what the program dropped since, in a cycle, is freed here
            gc.collect()
        gc.freeze()
        self.freezes += 1

    def stop(self) -> None:
        """Freeze nothing more (the app is closing)."""
        self._pending = False
        if self._timer is not None:
            self._timer.stop()
            self._timer = None


__all__ = ["POLL_S", "Freezer"]
