"""Where a NaN or an Inf is born in a PyTorch program: every aten op checked as it runs.

A :class:`TorchNanChecker` arms three things on the thread that enters it:

* a ``TorchDispatchMode`` that sees every aten op of the forward pass and
  checks its outputs with one cheap reduction each: the sum
  of a tensor is finite exactly when every element is (or the sum overflowed,
  which the exact check then sorts out); ops whose outputs only alias an
  input (views) are skipped by schema;
* a ``TorchFunctionMode`` that links each new ``grad_fn`` to the user's
  ``file:line`` and to the module it was made in (kept in the node's own
  ``metadata``: an :class:`~autograd_viz.sources.pytorch.origins.Origin`,
  and the line under ``traceback_`` where
  anomaly mode would keep its stack), and ties a forward finding to the node
  of its op;
* global module forward hooks that keep the qualified name of the module
  running (``encoder.layers.0.self_attn``).

It emits ``anomaly`` events into :data:`engine.events.HUB` with the data
fields of our engine's (``phase``, ``op``, ``value``, ``born``, ``tensor``,
``inputs``, ``nonfinite_inputs``, ``traceback``, ...) plus ``aten_op`` and
``module``: a forward event for each output *born* non-finite, and, while the
PyTorch bridge watches the backward, a backward event for each node output
that is not finite, as anomaly mode checks them, with the tensors the node
saved (``saved``: they say why). Tensors are read, never changed and never
kept: events carry summaries.

Note [Born in PyTorch]
~~~~~~~~~~~~~~~~~~~~~~
As in our engine (Note [Born non-finite] in engine/anomaly.py), an output is
born non-finite when it holds a checked value (NaN, or ±Inf with
``check_inf``) and no input held one. The inputs of an in-place op are read
before it runs. The backward is checked node by node, as anomaly mode does:
aten ops run by a backward node are not dispatched to the checker at all
(the mode steps aside while a backward call runs), so backward costs one
reduction per node output and nothing per op.

Note [Intentional -inf]
~~~~~~~~~~~~~~~~~~~~~~~
Masked attention fills scores with ``-inf`` on purpose, so that softmax gives
them weight 0. A ``-inf`` is *intentional* when a fill op (``masked_fill``,
``where``, ``full``, ``fill``, ``scalar_tensor``, a tensor literal, ...) put it
there from a ``-inf`` fill value, or when an op made it only from intentional
``-inf`` inputs (``mask + scores``, ``baddbmm(mask, q, k)``, views). It is not
reported, and an intentional input does not count as non-finite, so a NaN
made from it (softmax of a row that is all ``-inf``) is reported where that
NaN is born. A NaN or ``+inf`` fill is not intentional; an op given to
``ignore`` is treated as a fill op of any value. Intentional tensors are
remembered by weak reference only.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import torch

from autograd_viz.nan.forward.backward import BackwardChecks
from autograd_viz.nan.forward.births import Births, NonFiniteError
from autograd_viz.nan.forward.compiled import RegionChecks, eagerly
from autograd_viz.nan.forward.functions import FunctionCalls, FunctionMode
from autograd_viz.nan.forward.lineage import OUTPUT, OutputHooks
from autograd_viz.nan.forward.module_hooks import ModuleHooks
from autograd_viz.nan.forward.ops import DispatchMode, OpChecks
from autograd_viz.nan.forward.settings import TorchChecks
from autograd_viz.sources.pytorch.compiled import around_compiled
from autograd_viz.sources.pytorch.op_values import NAN, NEGINF, POSINF
from autograd_viz.sources.tracebacks import trim_traceback
from engine.events import HUB


class TorchNanChecker:
    """Checks a PyTorch program for NaN and Inf as it runs (see the module docstring).

    Enter and leave it on the same thread; it watches that thread's ops, and
    every PyTorch backward call the bridge watches. Findings are ``anomaly``
    events: they go nowhere, and nothing is checked in collect mode, while
    nobody listens to :data:`engine.events.HUB`.

    The checker arms and owns one object per job: the module hooks
    (:class:`ModuleHooks`), the torch functions and the nodes they make
    (:class:`FunctionCalls`, behind its function mode), the aten ops
    (:class:`OpChecks`, behind its dispatch mode), the forward findings
    (:class:`Births`) and the backward listener (:class:`BackwardChecks`).

    Args:
        checks: what to check and whether to raise at the first finding.
    """

    def __init__(self, checks: TorchChecks | None = None) -> None:
        self.checks = checks or TorchChecks()
        """The settings."""
        self.findings = 0
        """How many ``anomaly`` events this checker emitted."""
        c = self.checks
        self._checked = frozenset(
            ([NAN] if c.check_nan else []) + ([POSINF, NEGINF] if c.check_inf else [])
        )
        self._modes: list[Any] = []
        self._modules = ModuleHooks(self._modes)
        self._births = Births(self.checks, self._checked, self._modules, self._found)
        self._births.any_found = lambda: self.findings > 0
        self._functions = FunctionCalls(
            self._modules, self._modes, self._births.emit, self._reached
        )
        self._births.transformed = self._functions.transformed
        self._outputs = OutputHooks(self._births.lineage, self._reached_output)
        self._ops = OpChecks(self.checks, self._births, self._functions)
        self._backward = BackwardChecks(
            self.checks, self._checked, self._births.kinds, self._found, self._births.words
        )
        self._settings = ExitStack()
        self._outer_regions: Any = None

    # -- arming ------------------------------------------------------------------------
    def __enter__(self) -> TorchNanChecker:
        if self.checks.forward:
            self._modules.hook()
            self._outputs.hook()
            self._births.steps.hook()
            self._modes[:] = [FunctionMode(self._functions), DispatchMode(self._ops)]
            for mode in self._modes:
                mode.__enter__()
            regions = RegionChecks(
                self.checks, self._checked, self._modes, self._births, self._ops.guarded
            )
            self._outer_regions = around_compiled(regions)
        if self.checks.eager_compiled:
            eagerly(self._settings)
        HUB.subscribe(self._backward.listener)
        return self

    def __exit__(self, *exc: object) -> None:
        if isinstance(exc[1], BaseException):  # Note [A traceback as without us]
            trim_traceback(exc[1])
        HUB.unsubscribe(self._backward.listener)
        if self._modes:
            around_compiled(self._outer_regions)
        self._settings.close()
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        self._modes.clear()
        self._births.steps.unhook()
        self._outputs.unhook()
        self._modules.unhook()

    def _reached(self, what: str, tree: Any) -> None:
        """Values in ``tree`` reached ``what``: the births they came from are said (Note
        [Lineage] in ``lineage.py``); nothing to look up while none lives."""
        if self._births.lineage:
            self.guarded(self._births.reach, what, tree)

    def _reached_output(self, output: Any) -> None:
        self._reached(OUTPUT, output)

    def _found(self) -> None:
        """One more ``anomaly`` event emitted (forward or backward)."""
        self.findings += 1

    @property
    def checked(self) -> frozenset[str]:
        """The kinds of value checked (``nan``, ``+inf``, ``-inf``)."""
        return self._checked

    def kinds(self, t: torch.Tensor) -> frozenset[str]:
        """Which of NaN, +Inf, -Inf ``t`` holds (exact)."""
        return self._births.kinds(t)

    def guarded(self, check: Any, *args: Any) -> Any:
        """Run a check that never breaks the program (see :meth:`OpChecks.guarded`)."""
        return self._ops.guarded(check, *args)


__all__ = ["NonFiniteError", "TorchChecks", "TorchNanChecker"]
