"""The app as its parts see it: what the mover, the finder, the exporter and the answerer use.

The parts (:mod:`~autograd_viz.tui.moves`, :mod:`~autograd_viz.tui.finding`,
:mod:`~autograd_viz.tui.exporting`, :mod:`~autograd_viz.tui.answering`) hold the
app as a :class:`Host`, so the app imports them and none of them imports the app.
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

    driver: Driver
    """What the app steps through."""
    capture: PrintCapture
    """What the program printed while the app ran."""
    pinned_task: int | None
    """The graph task the node list shows; ``None`` follows the current step."""
    busy: bool
    """A live move is running in a worker thread."""
    message: str
    """The last thing a move found, shown in the status bar."""
    path: tuple[int, ...]
    """Node ids from the loss to the first problem ``a`` found."""

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
