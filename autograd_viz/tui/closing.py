"""What the app's handlers do once it is quitting: nothing.

Note [Messages still queued while the app closes]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A key that quits right after one that moved the cursor (``/`` Enter, ``q``)
leaves messages queued: the row highlighted, a thread's rows or pictures
arriving. Textual still handles what is queued in each widget while it
removes the widgets one by one, so a handler that looks up a panel
(``query_one``) can run when that panel is gone, and its ``NoMatches``
was the app's last word. Such a handler does nothing once ``q`` stopped
the app, and a panel not found while the app is no longer running means
it has gone, not a bug: that is ignored too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from textual.css.query import NoMatches


class Closable(Protocol):
    """The app, as a guarded handler sees it."""

    @property
    def closing(self) -> bool:
        """``q`` stopped the app, or it is exiting."""

    @property
    def is_running(self) -> bool:
        """The app still runs (its panels are mounted)."""


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def while_open(handler: _Handler) -> _Handler:
    """``handler`` (of a message, or a callback) does nothing once the app is quitting
    (Note [Messages still queued while the app closes]).

    The handler is a method of the app, or of an object whose ``owner`` is the app.
    """

    @functools.wraps(handler)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        app: Closable = getattr(self, "owner", self)
        if app.closing:
            return None
        try:
            return handler(self, *args, **kwargs)
        except NoMatches:
            if app.is_running:
                raise
            return None  # the app is closing: its panels are gone

    return guarded  # type: ignore[return-value]


__all__ = ["Closable", "while_open"]
