"""The app as its parts see it: what the mover, the finder, the exporter and the answerer use.

The parts (:mod:`~autograd_viz.tui.moves`, :mod:`~autograd_viz.tui.finding`,
:mod:`~autograd_viz.tui.exporting`, :mod:`~autograd_viz.tui.answering`) hold the
app as a :class:`Host`, so the app imports them and none of them imports the app.
They read its state and never write it: what they found goes back through a call
(:meth:`Host.say`, :meth:`Host.set_busy`, :meth:`Host.pin`, :meth:`Host.mark_path`)
or a posted message, and the app alone sets its attributes, as a Textual app's
widgets leave the app's state to the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from autograd_viz.tui.closing import Closable

if TYPE_CHECKING:
    from textual.message import Message
    from textual.notifications import SeverityLevel
    from textual.widget import Widget

    from autograd_viz.trace import GraphTaskInfo
    from autograd_viz.trace.replay import ExecutionState
    from autograd_viz.tui.capture import PrintCapture
    from autograd_viz.tui.driver import Driver

_Widget = TypeVar("_Widget", bound="Widget")


class Host(Closable, Protocol):
    """The app's state and calls that its parts read and make, and nothing else."""

    @property
    def driver(self) -> Driver:
        """What the app steps through."""
        ...

    @property
    def capture(self) -> PrintCapture:
        """What the program printed while the app ran."""
        ...

    @property
    def pinned_task(self) -> int | None:
        """The graph task the node list shows; ``None`` follows the current step."""
        ...

    @property
    def busy(self) -> bool:
        """A live move is running in a worker thread."""
        ...

    @property
    def path(self) -> tuple[int, ...]:
        """Node ids from the loss to the first problem ``a`` found."""
        ...

    def say(self, text: str) -> None:
        """Show ``text`` in the status bar: the last thing a move or a search found."""
        ...

    def set_busy(self, busy: bool) -> None:
        """A live move starts running in a worker thread, or has ended."""
        ...

    def pin(self, task: int | None) -> None:
        """Show graph task ``task`` in the node list; ``None`` follows the current step."""
        ...

    def mark_path(self, path: tuple[int, ...]) -> None:
        """Highlight these node ids, from the loss to the first problem found, everywhere."""
        ...

    def query_one(self, selector: type[_Widget]) -> _Widget:
        """The app's one widget of this type."""
        ...

    def shown_task(self, state: ExecutionState) -> GraphTaskInfo | None:
        """The graph task in the node list: the pinned one, or the current step's."""
        ...

    def refresh_view(self, *, follow: bool = False) -> None:
        """Redraw every panel for the driver's position."""
        ...

    def refresh_status(self, state: ExecutionState | None = None) -> None:
        """Redraw the status bar and the inspector."""
        ...

    def interrupt(self) -> None:
        """Quit, interrupting the program."""
        ...

    def program_wrote(self, text: str, stderr: bool) -> None:
        """Keep what arrived through the program's descriptor 1 or 2."""
        ...

    def notify(
        self,
        message: str,
        *,
        title: str = ...,
        severity: SeverityLevel = ...,
        markup: bool = ...,
    ) -> None:
        """Show a notice."""
        ...

    def run_worker(
        self,
        work: Callable[[], None],
        *,
        group: str = ...,
        exit_on_error: bool = ...,
        exclusive: bool = ...,
        thread: bool = ...,
    ) -> object:
        """Run ``work`` in a worker."""
        ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``callback`` on the app's thread, from another thread."""
        ...

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Run ``callback`` once the screen is painted."""
        ...

    def post_message(self, message: Message) -> bool:
        """Post ``message`` to the app (thread-safe)."""
        ...


__all__ = ["Host"]
