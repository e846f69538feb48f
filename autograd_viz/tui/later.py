"""The drawn DAG's pictures of a big graph task, made in a thread after the key is answered.

Note [Drawing a new picture later]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A big graph task's first picture needs its module tree and every node's
module view (a second at 20,000 nodes), and so does each new choice of open
modules (the step went into another module, or Enter). The key never waits
for them: the view shows what it has at once (a line saying the graph is
being drawn, or the last picture recoloured and marked as being redrawn),
and a :class:`PictureMaker` makes the picture in a thread worker (pictures
only read the trace) and has the view drawn again once it is there.

Four rules keep the key's own time short:

* a job starts only after the screen has been painted (``call_after_refresh``):
  a thread started with the key shares the interpreter with its paint;
* one job runs at a time; a job wanted while another runs replaces the one
  waiting, never the one running (a thread cannot be stopped halfway), so a
  held key makes one picture for where it stopped, not one per step;
* when nothing is wanted, the pictures of the next few nodes the replay will
  reach are made ahead (:func:`upcoming`), so ``n`` finds them made;
* a job runs with the collector paused: what it builds has no reference cycles,
  and a collection that an allocation of the thread set off would hold the
  interpreter while it scanned (the key's paint waiting); once no build runs,
  the app freezes what they made (Note [What the app built is frozen]).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterable

from textual.widget import Widget

from autograd_viz.trace import GraphTaskInfo, Trace, paused_gc
from autograd_viz.tui.pictures import Pictures

Job = Callable[[], Callable[[], None] | None]
"""Work for the thread; what it returns is called on the UI thread after."""

AHEAD_NODES = 3
"""How many of the next nodes the replay reaches have their pictures made ahead."""

AHEAD_EVENTS = 64
"""How far ahead (events) the next nodes are looked for."""


class PictureMaker:
    """Runs a view's picture jobs in a thread, one at a time (Note [Drawing a new picture later]).

    Args:
        view: the widget whose workers run the jobs, and whose app gets their results.
        failed: called on the UI thread with what a job raised (the next job runs after).
    """

    def __init__(self, view: Widget, failed: Callable[[Exception], None]) -> None:
        self._view = view
        self._failed = failed
        self._wanted: Job | None = None
        self._spare: Job | None = None
        self._running = False
        self._scheduled = False
        self._idle: asyncio.Event | None = None

    @property
    def busy(self) -> bool:
        """A job runs, or waits for the next paint."""
        return self._running or self._scheduled

    def want(self, job: Job) -> None:
        """Run ``job`` next, after the screen's next paint (it replaces a job not started)."""
        self._wanted = job
        self._kick()

    def ahead(self, job: Job) -> None:
        """Run ``job`` when nothing is wanted (it replaces an earlier one not started)."""
        self._spare = job
        self._kick()

    async def wait(self) -> None:
        """Return once no job runs or waits (tests and benchmarks wait for this, never a sleep)."""
        while self.busy:
            if self._idle is None or self._idle.is_set():
                self._idle = asyncio.Event()
            await self._idle.wait()

    def _kick(self) -> None:
        if self._running or self._scheduled:
            return
        self._scheduled = self._view.call_after_refresh(self._start)

    def _start(self) -> None:
        self._scheduled = False
        if self._running:
            return
        job = self._wanted or self._spare
        if self._wanted is not None:
            self._wanted = None
        else:
            self._spare = None
        if job is None:
            if self._idle is not None:
                self._idle.set()
            return
        self._running = True
        view = self._view

        def run() -> None:
            then = None
            try:
                with paused_gc():  # Note [What the app built is frozen]
                    then = job()
            except Exception as exc:  # noqa: BLE001 - said in the view; the app goes on
                then = functools.partial(self._failed, exc)
            finally:
                # Posted, not called from the thread: a thread waiting on a loop that is
                # closing would keep the process from exiting (call_from_thread waits).
                with contextlib.suppress(RuntimeError):  # the app's loop closed meanwhile
                    view.call_later(self._done, then)

        self._view.run_worker(run, thread=True, group="picture", exit_on_error=False)

    def _done(self, then: Callable[[], None] | None) -> None:
        self._running = False
        if then is not None:
            then()
        self._kick()
        if not self.busy and self._idle is not None:
            self._idle.set()


def upcoming(trace: Trace, task: GraphTaskInfo, step: int) -> list[tuple[int, int]]:
    """The next :data:`AHEAD_NODES` nodes of ``task`` that events after ``step`` are about,
    each with the step that first shows it (after its first event)."""
    found: dict[int, int] = {}
    events = trace.events
    for index in range(step, min(len(events), step + AHEAD_EVENTS)):
        event = events[index]
        if event.graph_task == task.id and event.node_id is not None:
            found.setdefault(event.node_id, index + 1)
            if len(found) >= AHEAD_NODES:
                break
    return list(found.items())


def make_ahead(
    pictures: Pictures,
    nodes: Iterable[tuple[int, int]],
    opened: frozenset[int],
    closed: frozenset[int],
    unfolded: frozenset[int],
    expanded: tuple[str, ...] = (),
) -> bool:
    """Make the first picture not made yet of those the view would draw at ``nodes`` (node
    ids, each with its step); ``True`` if one was made (call again for the next)."""
    for node, step in nodes:
        choice = pictures.choice(opened, closed, unfolded, node, step, expanded)
        if pictures.kept(choice, node) is None:
            pictures.picture(choice, node)
            return True
    return False


__all__ = ["AHEAD_EVENTS", "AHEAD_NODES", "PictureMaker", "make_ahead", "upcoming"]
