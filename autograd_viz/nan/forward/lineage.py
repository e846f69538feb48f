"""Which births a non-finite value came from, and whether it reached anything that matters.

One job of :class:`~autograd_viz.nan.forward.checks.TorchNanChecker`,
beside the births it follows (:mod:`~autograd_viz.nan.forward.births`).

Note [Lineage]
~~~~~~~~~~~~~~
A value born non-finite is often thrown away on purpose: T5's relative
position bucket takes ``log(0) = -inf`` and casts it to an integer, a
``where`` masks it, an index selects around it, ``nan_to_num`` replaces it.
Such a birth is *contained*; only a birth whose values *reach* something
that matters is a bug. What matters:

* the loss: a root of a backward call (``loss.backward()``, ``grad(loss, ...)``);
* a gradient: a backward node whose output is not finite, when the forward op
  that made the node read or made a value of the birth's lineage (``where``'s
  ``log(0)`` gives ``0/0 = NaN`` in ``LogBackward0`` when a masked position
  was 0) and the gradients it was given are finite (Note [Reached through a
  gradient] in ``backward.py``: a node given a NaN passes it on);
* a parameter: a leaf that requires grad, written in place (an optimizer step);
* the model's output: what the outermost module call returns (so that
  inference, which calls no backward, is judged too).

Each birth gets a number. Each non-finite tensor an op writes is given, by
weak reference, the set of births whose values flowed into it: the union of
its inputs' sets, plus the birth made there; an output that is finite gets
none, which is where a lineage ends (``where``, a cast, an index, a mask
times a finite value, ``nan_to_num``); a view shares its input's set. A
node made by an op that read or made such a value keeps the set in its
``metadata``, for the backward check to name. When a value of a lineage
reaches one of the four, an ``anomaly`` event says so once per birth
(``reached``, ``lineage``); the report heads with the first birth reached
and lists the others as contained.

Cost: nothing while every value is finite. Once a non-finite value lives,
each op looks its tensor inputs up in one weak dictionary (an identity
lookup per input), and a backward call looks up its roots; the sets die
with their tensors, so a contained birth stops costing as soon as the
values it made are dropped. Module calls pay two small hooks each, which
count depth and look only at the outermost call's output, and only then.
The lineage follows the ops the dispatch check sees: values that leave
through ``.tolist()``, ``.item()`` or NumPy carry none.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from autograd_viz.sources.pytorch.compiled import is_compiling
from autograd_viz.sources.pytorch.op_values import tensors

LINEAGE_KEY = "autograd_viz.lineage"
"""The key of a node's ``metadata`` under which the births it read or made are kept."""

NO_IDS: frozenset[int] = frozenset()

LOSS, PARAMETER, OUTPUT = "loss", "parameter", "output"
"""What a lineage can reach besides a gradient (Note [Lineage])."""


class Lineage:
    """The births (by number) each live non-finite tensor came from (Note [Lineage])."""

    def __init__(self) -> None:
        self.tensors: WeakIdKeyDictionary = WeakIdKeyDictionary()
        """Non-finite tensors: the numbers of the births their values came from."""
        self.reached: set[int] = set()
        """Births already said to have reached something (said once each)."""
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        """Whether some live tensor carries a lineage (else nothing is looked up)."""
        return bool(self.tensors)

    def new_birth(self) -> int:
        """A number for a new birth."""
        with self._lock:
            return next(self._numbers)

    def of(self, tree: Any) -> frozenset[int]:
        """The births the tensors in ``tree`` came from."""
        marks = self.tensors
        found = [marks[t] for t in tensors(tree) if t in marks]
        if not found:
            return NO_IDS
        return found[0] if len(found) == 1 else frozenset().union(*found)

    def mark(self, t: torch.Tensor, births: frozenset[int]) -> None:
        """``t``'s values came from ``births``."""
        self.tensors[t] = births

    def drop(self, t: torch.Tensor) -> None:
        """``t`` holds finite values now (written in place): it carries no lineage."""
        self.tensors.pop(t, None)

    def carry(self, args: Any, out: Any) -> None:
        """A view shares its input's lineage."""
        births = self.of(args)
        if births:
            for t in tensors(out):
                self.tensors[t] = births

    def unsaid(self, births: frozenset[int]) -> frozenset[int]:
        """Those of ``births`` not yet said to have reached anything; now they are."""
        with self._lock:
            new = births - self.reached
            self.reached |= new
        return frozenset(new)


def tag_node(fn: Any, births: frozenset[int]) -> None:
    """Keep ``births`` on the node ``fn`` (with any it already had)."""
    metadata = fn.metadata
    metadata[LINEAGE_KEY] = metadata.get(LINEAGE_KEY, NO_IDS) | births


def node_lineage(fn: Any) -> frozenset[int]:
    """The births the forward op that made ``fn`` read or made (Note [Lineage])."""
    births = fn.metadata.get(LINEAGE_KEY)
    return births if isinstance(births, frozenset) else NO_IDS


def backward_roots(args: Any, kwargs: dict[str, Any]) -> Any:
    """The tensors a backward call starts from: ``Tensor.backward``'s self,
    ``autograd.backward``'s ``tensors``, ``autograd.grad``'s ``outputs``."""
    if args:
        return args[0]
    return kwargs.get("tensors", kwargs.get("outputs"))


class _Depth(threading.local):
    def __init__(self) -> None:
        self.calls = 0


class OutputHooks:
    """Global module hooks that tell ``reached`` of the outermost module call's output.

    Args:
        lineage: the births' lineage (nothing is looked at while it is empty).
        reached: called with the output's tensors when some carry a lineage.
    """

    def __init__(self, lineage: Lineage, reached: Callable[[Any], None]) -> None:
        self._lineage = lineage
        self._reached = reached
        self._depth = _Depth()
        self._handles: list[Any] = []

    def hook(self) -> None:
        """Follow every module call from now on."""
        hooks = torch.nn.modules.module
        self._handles += [
            hooks.register_module_forward_pre_hook(self._enter),
            hooks.register_module_forward_hook(self._leave, always_call=True),
        ]

    def unhook(self) -> None:
        """Stop following module calls."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if not is_compiling():
            self._depth.calls += 1

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if is_compiling():
            return
        depth = self._depth
        depth.calls = max(depth.calls - 1, 0)
        if not depth.calls and self._lineage:
            self._reached(output)


__all__ = [
    "LINEAGE_KEY",
    "LOSS",
    "NO_IDS",
    "OUTPUT",
    "PARAMETER",
    "Lineage",
    "OutputHooks",
    "backward_roots",
    "node_lineage",
    "tag_node",
]
