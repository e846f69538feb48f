"""The backward calls ``--steps``/``--every`` leave out, checked at the leaves.

Note [Checking calls not recorded]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
With ``steps`` or ``every``, only the chosen backward calls are recorded,
and a NaN born in a backward is read from the recorded nodes; the forward's
ops are checked in every call. A NaN born in the backward of a call left out
would go unseen, so those calls are checked where their gradients land:
a post-accumulate-grad hook on each parameter of the modules the code
calling backward can reach (found once, at the first call left out, as
:mod:`~autograd_viz.sources.pytorch.leaf_names` finds them), put on when such
a call starts and taken off when it ends (a recorded call shows the
program's hooks only), sums the gradient that was just accumulated: a
reduction per parameter, not per node. A NaN or an Inf anywhere in a
gradient makes its sum non-finite; a non-finite sum is
confirmed element-wise (a sum can overflow on its own). When the call ends,
a non-finite gradient is a :class:`MissedFinding`: the parameter, the call,
and the call to record to see where it was born. Checking stops at the first.

The hooks return ``None`` and change nothing; a gradient is never kept, only
its sum until the call ends. ``torch.autograd.grad`` accumulates into no
leaf and is not checked this way, nor is a leaf that is not a parameter of a
reachable module, nor code on our own engine.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recorder import Recorder


@dataclass(frozen=True)
class MissedFinding:
    """A NaN or Inf that reached a parameter's gradient in a backward call not recorded."""

    value: str
    """``"nan"`` or ``"inf"``."""
    parameter: str
    """The parameter's name (``fc.bias``), the first non-finite one."""
    call: int
    """The backward call, numbered from 0 as ``--steps`` numbers them."""
    others: int = 0
    """How many other parameters' gradients were non-finite in that call."""
    t_ns: int = 0
    """When that call ended (``time.perf_counter_ns``, the events' clock): which process
    saw it first, of several (:func:`~autograd_viz.cli.children.first_finding`)."""

    def __str__(self) -> str:
        also = f" (and {self.others} more)" if self.others else ""
        value = "NaN" if self.value == "nan" else "Inf"
        return f"{value} reached {self.parameter}{also} in backward call {self.call}"


class LeafCheck:
    """Checks the gradients that reach parameters in the calls a recorder leaves out.

    A watcher of :data:`engine.calls.CALLS`, added after ``recorder``'s so
    that a call's number is known when it starts (Note [Checking calls not
    recorded]).

    Args:
        recorder: the recorder whose choice of calls it follows.
        calls: that choice.
        inf: an Inf counts as well as a NaN.
    """

    def __init__(self, recorder: Recorder, calls: CallSelection, inf: bool = True) -> None:
        self._recorder = recorder
        self._calls = calls
        self._inf = inf
        self._lock = threading.Lock()
        self._call: int | None = None  # the call left out that runs now (hooks may run on
        # a device's engine thread: not a thread-local)
        self._sums: list[tuple[Any, Any]] = []
        self._names: dict[int, str] = {}
        self._parameters: list[Any] = []
        self._handles: list[Any] = []
        self._scanned = False
        self.missed: MissedFinding | None = None
        """The first NaN or Inf found in a call not recorded."""

    def call_started(self) -> None:
        """A backward call starts: hook the parameters once, and check it if left out."""
        index = self._recorder.calls_seen - 1
        if self.missed is not None or self._calls.wants(index):
            return
        if not self._scanned and "torch" in sys.modules:  # our engine's calls: no hooks
            self._scanned = True
            self._find(sys._getframe(1))
        reached = self._reached
        self._handles = [p.register_post_accumulate_grad_hook(reached) for p in self._parameters]
        self._call = index

    def call_ended(self) -> None:
        """The call ended: a non-finite sum of a gradient it accumulated is a finding."""
        index, self._call = self._call, None
        self._unhook()
        with self._lock:
            sums, self._sums = self._sums, []
        if index is None or not sums:
            return
        found = _non_finite(sums, self._inf)
        if found:
            (value, first), *others = found
            name = self._names.get(id(first), "a parameter")
            self.missed = MissedFinding(value, name, index, len(others), time.perf_counter_ns())

    def close(self) -> None:
        """Remove every hook and forget the parameters (they are as they were)."""
        self._unhook()
        self._parameters = []
        self._names = {}

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _find(self, frame: Any) -> None:
        from autograd_viz.sources.pytorch.leaf_names import qualified_parameters

        self._parameters, self._names = qualified_parameters(frame)

    def _reached(self, parameter: Any) -> None:
        if self._call is None:
            return
        import torch

        with torch._C.DisableTorchFunction(), torch.no_grad():  # the checks' own modes aside
            grad = parameter.grad
            if grad is None or not grad.dtype.is_floating_point:
                return
            total = grad.sum()
        with self._lock:
            self._sums.append((parameter, total))


def _non_finite(sums: list[tuple[Any, Any]], inf: bool) -> list[tuple[str, Any]]:
    """``(value, parameter)`` for each gradient with a NaN (or an Inf), in the order reached."""
    import torch

    found: list[tuple[str, Any]] = []
    with torch._C.DisableTorchFunction(), torch.no_grad():
        try:  # one check (one device sync) for the usual case: every sum finite
            if bool(torch.isfinite(torch.stack([total for _, total in sums])).all()):
                return found
        except RuntimeError:  # sums on several devices
            pass
        flags = [bool(torch.isfinite(total)) for _, total in sums]
        for (parameter, _total), finite in zip(sums, flags, strict=True):
            if finite:
                continue
            grad = parameter.grad
            if grad is None:
                continue
            if bool(grad.isnan().any()):
                found.append(("nan", parameter))
            elif inf and bool(grad.isinf().any()):
                found.append(("inf", parameter))
    return found


__all__ = ["LeafCheck", "MissedFinding"]
