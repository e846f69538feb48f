"""Armed while anybody holds it: the one count behind every watcher that patches PyTorch.

Note [Armed while held]
~~~~~~~~~~~~~~~~~~~~~~~
Recordings, live sessions and the NaN checks open and close watchers in any
order, nested and across threads. A watcher that patches something global
(PyTorch's chokepoint, DDP's and FSDP2's classes, the import hook that waits
for ``torch``) is armed by its first holder and disarmed by its last.
:meth:`Refcount.hold` counts one more holder and, for the first, arms; the
function it returns counts one less and, for the last, disarms, and does
nothing when it is called again. The count is raised before ``arm`` runs, so
that what ``arm`` sets off at once (a patch of a module already imported)
sees the watcher held; an ``arm`` that returns ``False`` (or raises) armed
nothing, and that holder is not counted. Arming and disarming run under the count's lock,
so a holder that comes while the last one leaves finds the watcher disarmed
and arms it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Refcount:
    """A watcher armed by its first holder and disarmed by its last (Note [Armed while held]).

    Args:
        arm: arms the watcher; returns ``False`` when it could not (anything else: armed).
        disarm: undoes ``arm``.
    """

    def __init__(self, arm: Callable[[], bool | None], disarm: Callable[[], None]) -> None:
        self._arm = arm
        self._disarm = disarm
        self._lock = threading.RLock()  # arm may hold again, on the same thread
        self.holders = 0
        """How many hold the watcher now."""

    def hold(self) -> Callable[[], None] | None:
        """Count one more holder, arming for the first.

        Returns:
            The function that lets go (safe to call twice), or ``None`` when
            arming failed and nothing is held.
        """
        with self._lock:
            self.holders += 1
            try:
                armed = self.holders > 1 or self._arm() is not False
            except BaseException:
                self.holders -= 1
                raise
            if not armed:
                self.holders -= 1
                return None
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                self.holders -= 1
                if self.holders == 0:
                    self._disarm()

        return release
