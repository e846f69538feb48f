"""Anomaly mode's backward check, on each PyTorch node the bridge saw end.

The backward half of :class:`~autograd_viz.nan.forward.checks.TorchNanChecker`,
an object of its own that the checker subscribes: each output of a node is
checked once (Note [Born in PyTorch] in ``checks.py``), and a non-finite
one is an ``anomaly`` event on that node, with the tensors it saved. The
listener outlives its own failure on one node (Note [Listener errors] in
engine/events.py).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from autograd_viz.nan.forward.births import NonFiniteError
from autograd_viz.nan.forward.lineage import NO_IDS, node_lineage
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.op_values import NAN, checked_values, finite
from autograd_viz.sources.pytorch.origins import node_origin
from autograd_viz.sources.pytorch.saved import saved_summaries
from autograd_viz.sources.pytorch.summary import TorchSummary
from autograd_viz.trace.summary import TensorSummary
from engine.events import HUB, Event

if TYPE_CHECKING:
    from autograd_viz.nan.forward.settings import TorchChecks


class BackwardChecks:
    """Anomaly mode's backward check: subscribe :attr:`listener` to the hub.

    Args:
        checks: what to check and whether to raise at the first finding.
        checked: the kinds of value flagged (``nan``, ``+inf``, ``-inf``).
        kinds: which of those a tensor holds (the checker's own test).
        found: called once per finding emitted (the checker counts them).
        born: ``first`` mode, what the earliest of some forward births was, for the error
            (Note [Stopping where a value reaches something] in ``births.py``).
    """

    def __init__(
        self,
        checks: TorchChecks,
        checked: frozenset[str],
        kinds: Callable[[torch.Tensor], frozenset[str]],
        found: Callable[[], None],
        born: Callable[[frozenset[int]], str | None] = lambda births: None,
    ) -> None:
        self.checks = checks
        self._checked = checked
        self.kinds = kinds
        self._found = found
        self._born = born
        self.listener = backward_checks(self)
        """The event listener (one object: the hub unsubscribes by identity)."""
        self._passed: dict[int, TorchSummary] = {}
        """The summaries of the latest gradients checked finite, by ``id`` (Note [A gradient
        passed on])."""
        self._local = threading.local()  # .started: (node id, input summaries) of its last node

    def _pass(self, summary: TorchSummary, gradient: torch.Tensor) -> None:
        """``summary``'s gradient was checked and is finite (as it is at its version)."""
        if gradient._version != summary.version:
            return
        passed = self._passed
        if len(passed) >= _PASSED_MAX:
            passed.clear()
        passed[id(summary)] = summary

    def _on_event(self, event: Event) -> None:
        """Anomaly mode's backward check, on each PyTorch node the bridge saw end."""
        kind = event.kind
        if kind == "node_start":  # what it was given (Note [Reached through a gradient])
            self._local.started = (event.node_id, event.data.get("inputs"))
            return
        if kind != "node_end" or event.data.get("derived"):
            return
        for index, summary in enumerate(event.data.get("outputs") or ()):
            if _known_finite(summary):
                continue  # Note [A gradient summarized already]
            gradient = _tensor_of(summary)
            if gradient is None:
                continue
            passed = self._passed.get(id(summary))
            if passed is not None and passed is summary and gradient._version == passed.version:
                continue  # checked as an earlier node's output (Note [A gradient passed on])
            # Outside _DisableTorchDispatch: a nested tensor is a Python subclass.
            tensor = checked_values(gradient)
            if tensor is None:
                continue  # no values to check (Note [Tensors without values])
            with torch._C._DisableTorchDispatch(), torch.no_grad():
                try:
                    if finite(tensor):
                        self._pass(summary, gradient)
                        continue
                    kinds = self.kinds(tensor)
                except Exception as exc:  # noqa: BLE001 - one gradient, never the watching
                    warn_once(
                        f"autograd-viz: an output of {event.node_name} could not be checked "
                        f"for NaN ({exc!r})"
                    )
                    continue
                if kinds & self._checked:
                    value = NAN if NAN in kinds and self.checks.check_nan else "inf"
                    self._emit_backward(event, index, value, summary)

    def _emit_backward(self, event: Event, index: int, value: str, summary: Any) -> None:
        fn = torch._C._current_autograd_node()  # the bridge's post hook runs on its thread
        origin = node_origin(fn) if fn is not None else None
        data = {
            "phase": "backward",
            "output_index": index,
            "value": value,
            "raised": self.checks.first,
            "grad": summary,
            "traceback": origin.formatted() if origin is not None else None,
            "module": origin.module if origin is not None else None,
            "saved": [] if fn is None else list(saved_summaries(fn, self.checks.max_values, {})),
        }
        births = NO_IDS if fn is None else node_lineage(fn)
        if births and self._given_non_finite(event):
            births = NO_IDS  # passed on: Note [Reached through a gradient]
        if births:  # the forward values this node read or made reached a gradient
            data["lineage"] = sorted(births)
        HUB.emit_data("anomaly", event.device, event.graph_task, _NodeFields(event), data)
        self._found()
        if self.checks.first:
            message = (
                f"Function '{event.node_name}' returned {value} values in its {index}th output."
            )
            born = self._born(births) if births else None
            if born is not None:  # a value born in the forward reached a gradient here
                message += f" It came from the forward: {born}."
            raise NonFiniteError(message)

    def _given_non_finite(self, event: Event) -> bool:
        """Whether the node of ``event`` was given a gradient that is not finite (as far as
        its inputs' summaries still reach their tensors)."""
        started = getattr(self._local, "started", None)
        if started is None or started[0] != event.node_id:
            return False
        for summary in started[1] or ():
            gradient = _tensor_of(summary)
            tensor = None if gradient is None else checked_values(gradient)
            if tensor is None or (tensor.numel() and not tensor.data_ptr()):
                continue  # no values to read, or their memory released (read, it would crash)
            with torch._C._DisableTorchDispatch(), torch.no_grad():
                if not finite(tensor):
                    return True
        return False


# Note [Reached through a gradient]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A backward node made by an op that read or made a birth's values (Note [Lineage] in
# lineage.py) and whose output is not finite says the birth reached a gradient, but only
# when the gradients it was given are finite: then its own forward values made the output
# non-finite (``LogBackward0`` dividing by the 0 a ``where`` hid). Given a NaN, it passes it
# on whatever it saved, and the NaN came from elsewhere (the loss, another branch), whose
# birth is reached there. So an RMSNorm's ``pow`` that overflowed, which the ``rsqrt``
# after it turns into zeros, stays contained when a later layer's overflow makes every
# gradient NaN, as it is when the program stops at that first reach (``--first``).
# Its inputs are the node_start event's summaries, read just before its node_end on the
# same thread; their tensors are alive while the node's post hook runs. Without summaries
# (``--values none``) nothing is known, and the node counts as before.


class _NodeFields:
    """The node fields of an event, to emit another event about the same node."""

    __slots__ = ("_id", "_name", "sequence_nr", "topological_nr")

    def __init__(self, event: Event) -> None:
        self._id = event.node_id
        self._name = event.node_name
        self.sequence_nr = event.sequence_nr
        self.topological_nr = event.topological_nr

    def name(self) -> str | None:
        return self._name


# Note [A gradient passed on]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Many nodes hand a gradient on as it came: AddBackward0 returns the very tensor it took,
# once per input. The bridge gives the same unchanged tensor the same summary object
# (Note [One summary per gradient] in sources/pytorch/summary.py), so a summary whose
# gradient was checked finite as an earlier node's output, and whose version counter has
# not moved since (nothing wrote it in place), is not summed again. The latest few hundred
# are remembered by their summaries, which hold the gradients only weakly.

_PASSED_MAX = 256

# Note [A gradient summarized already]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Under watch_nan the recorder listens before the checks (it subscribes first) and, at the
# values tier ``all``, resolves every node output's summary as the event reaches it: the
# summary of a large gradient starts with the very sum the check would take (Note
# [Summaries of large tensors] in sources/pytorch/summary.py), and any summary read from
# the values counts NaN and Inf exactly. So a gradient whose summary is already there,
# read from its values (``min`` set) with no NaN and no Inf, is finite, and the check
# takes no second pass over a million elements. Anything else (no summary yet: a lower
# tier, a call not recorded, a mid-size gradient whose summary is settled later in a
# batch; or a summary without values) is checked by its own reduction, as before. A
# gradient that is not finite always takes the exact path (``kinds``).


def _known_finite(summary: Any) -> bool:
    """Whether ``summary`` (a bridge summary) was already read from values that are finite."""
    if type(summary) is not TorchSummary:
        return False
    taken = summary.summary
    return (
        type(taken) is TensorSummary
        and taken.min is not None
        and not taken.nan_count
        and not taken.inf_count
    )


def _tensor_of(summary: Any) -> torch.Tensor | None:
    """The gradient a bridge summary stands for, if it is still alive (a weak reference)."""
    if not isinstance(summary, TorchSummary):
        return None
    tensor: torch.Tensor | None = summary.array()
    return tensor


def backward_checks(checker: BackwardChecks) -> functools.partial[None]:
    """The checker's event listener, which outlives its own failure (Note [Listener errors]).

    A check that fails on one node (an output it cannot read) skips that node,
    with one line, and the checks go on for every later node and call. A
    ``partial``, because it takes an ``on_error`` attribute and calls through
    in C: a listener runs on every event.
    """

    def on_error(exc: Exception, graph_task: int) -> None:
        warn_once(
            f"autograd-viz: a backward NaN check in graph task {graph_task} failed "
            f"({type(exc).__name__}: {exc}); later nodes and calls are checked"
        )

    listener = functools.partial(checker._on_event)
    listener.on_error = on_error  # type: ignore[attr-defined]
    # It checks the calls the other listeners watch (Note [Calls no listener wants] in
    # sources/pytorch/chokepoint.py): a call they all leave out runs unchecked node by node.
    listener.follows_calls = True  # type: ignore[attr-defined]
    return listener


__all__ = ["BackwardChecks", "backward_checks"]
