"""The NaN checks at a compiled region's boundary.

(Note [Compiled regions] in ``sources/pytorch/compiled.py``.)

While a :class:`~autograd_viz.nan.forward.checks.TorchNanChecker` checks
the forward pass, each call of a ``torch.compile``d region runs with the
checker's modes stepped aside, exactly as it runs unwatched, and the checker
looks at its edges: the region's tensor arguments (and, for a module, its
parameters and buffers) before, its outputs after. An output that is not
finite while every input was is a birth inside the region, reported as
an op named after it (``compiled MLP``), tied to the node its output carries
(``CompiledFunctionBackward``). Ops inside are not checked one by one: one
line says so. With ``eager_compiled`` Dynamo runs compiled code eagerly
(``torch.compiler.set_stance("force_eager")``) and every op is checked, with
one line saying results may then differ in the last bits.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _python_dispatch

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.compiled import region_name
from autograd_viz.sources.pytorch.op_values import OpInfo, finite, tensors
from engine.events import HUB

if TYPE_CHECKING:
    from autograd_viz.nan.forward.births import Births
    from autograd_viz.nan.forward.settings import TorchChecks

INSIDE_NOT_CHECKED = (
    "autograd-viz: torch.compile'd code runs compiled: the NaN checks see each compiled "
    "region's inputs and outputs, not the ops inside it one by one (to check those, run "
    "it eagerly: `autograd-viz nan --eager-compiled`, watch_nan(eager_compiled=True))"
)
RUNS_EAGERLY = (
    "autograd-viz: torch.compile'd code runs eagerly so that each op inside is checked; "
    "results may differ from the compiled run in the last bits"
)


class RegionChecks:
    """Runs one checker's compiled regions (installed on its thread by the checker).

    Args:
        checks: what to check and whether to raise at the first finding.
        checked: the kinds of value flagged (``nan``, ``+inf``, ``-inf``).
        modes: the checker's function and dispatch modes while they are armed (one list,
            filled and emptied by the checker), stepped aside while a region runs.
        births: where an output born non-finite inside a region goes.
        guarded: runs a check that never breaks the program (:meth:`OpChecks.guarded`).
    """

    def __init__(
        self,
        checks: TorchChecks,
        checked: frozenset[str],
        modes: list[Any],
        births: Births,
        guarded: Callable[..., Any],
    ) -> None:
        self.checks = checks
        self._checked = checked
        self._modes = modes
        self._births = births
        self._guarded = guarded
        self.depth = 0

    def __call__(
        self,
        compiled: Callable[..., Any],
        owner: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        checks = self.checks
        if self.depth or checks.eager_compiled or not self._modes:
            return compiled(*args, **kwargs)
        warn_once(INSIDE_NOT_CHECKED)
        arguments = [t for t in tensors((args, kwargs)) if t.is_floating_point()]
        inputs = list(arguments)
        if isinstance(owner, torch.nn.Module):
            inputs += [t for t in owner.parameters() if t.is_floating_point()]
            inputs += [t for t in owner.buffers() if t.is_floating_point()]
        silent = not checks.first and not HUB.active  # a finding would go nowhere
        with torch.no_grad():
            nonfinite = [] if silent else [i for i, t in enumerate(inputs) if not finite(t)]
        self.depth += 1
        try:
            with ExitStack() as aside:
                step_aside_modes(aside, self._modes[0], self._modes[1])
                out = compiled(*args, **kwargs)
        finally:
            self.depth -= 1
        if not silent and not nonfinite:
            self._guarded(self._check_outputs, compiled, owner, arguments, out)
        return out

    def _check_outputs(
        self, compiled: Callable[..., Any], owner: Any, arguments: list[Any], out: Any
    ) -> None:
        births = self._births
        name = region_name(compiled, owner)
        op = OpInfo(name, name, False, (), (), False, False, name in self.checks.ignore)
        if op.ignored:
            return
        for index, t in enumerate(tensors(out)):
            if not t.is_floating_point():
                continue
            with torch.no_grad():
                if finite(t):
                    continue
            kinds = births.kinds(t)
            if kinds & self._checked:
                births.born_in_region(op, index, t, kinds, arguments)


def step_aside_modes(aside: ExitStack, function_mode: Any, dispatch_mode: Any) -> None:
    """Take the checker's two modes off their stacks until ``aside`` closes, where on top."""
    if _python_dispatch._get_current_dispatch_mode() is dispatch_mode:
        aside.enter_context(_python_dispatch._pop_mode_temporarily())
    depth = torch._C._len_torch_function_stack()
    if depth and torch._C._get_function_stack_at(depth - 1) is function_mode:
        torch._C._pop_torch_function_stack()
        aside.callback(torch._C._push_on_torch_function_stack, function_mode)


def eagerly(aside: ExitStack) -> None:
    """Run compiled code eagerly until ``aside`` closes (one line says so)."""
    warn_once(RUNS_EAGERLY)
    torch.compiler.set_stance("force_eager")
    aside.callback(torch.compiler.set_stance, "default")


__all__ = ["INSIDE_NOT_CHECKED", "RUNS_EAGERLY", "RegionChecks", "eagerly", "step_aside_modes"]
