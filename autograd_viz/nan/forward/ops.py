"""The aten ops a checked program runs, each checked as it writes (Note [Born in PyTorch]).

One job of :class:`~autograd_viz.nan.forward.checks.TorchNanChecker`,
driven by its ``TorchDispatchMode``: every aten op of the forward pass runs,
and what it wrote is checked with one cheap reduction per output; ops whose
outputs only alias an input (views) are skipped by schema, but carry their
input's marks (Note [Intentional -inf]). An output that fails goes to
:class:`~autograd_viz.nan.forward.births.Births`, and a birth it
finds is emitted at once, or when the torch function running returns, once
its node is known (:class:`~autograd_viz.nan.forward.functions.FunctionCalls`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autograd_viz.nan.forward.births import NO_KINDS, NonFiniteError
from autograd_viz.nan.forward.lineage import NO_IDS, PARAMETER
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.caller_line import call_from, caller
from autograd_viz.sources.pytorch.op_values import (
    FILL_OPS,
    KERNEL_STATE_RETURNS,
    NORM_OPS,
    PENDING_NAMESPACES,
    UNINITIALIZED_OPS,
    OpInfo,
    finite,
    mutated,
    results,
    tensors,
)
from engine.events import HUB

if TYPE_CHECKING:
    from autograd_viz.nan.forward.births import Births
    from autograd_viz.nan.forward.functions import FunctionCalls
    from autograd_viz.nan.forward.settings import TorchChecks


BOUNDED_OPS = frozenset(
    {
        *(
            f"aten.{name}.{overload}"
            for name in ("tanh", "sigmoid", "relu", "neg", "abs", "sign", "floor", "ceil", "trunc")
            for overload in ("default", "out")
        ),
        *(f"aten.{name}_.default" for name in ("tanh", "sigmoid", "relu", "neg", "abs", "sign")),
        "aten.round.default",
        "aten.clone.default",
        "aten.index_select.default",
        "aten.gather.default",
        "aten.embedding.default",
        "aten.index.Tensor",
    }
)
"""Ops whose outputs are finite whenever their inputs are (Note [Ops that make no birth])."""

# Note [Ops that make no birth]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An output is born non-finite where no input held a checked value (Note [Born in
# PyTorch] in checks.py). Some ops cannot make a NaN or an Inf from finite inputs: they
# squash (tanh, sigmoid), clip at zero (relu), change a sign (neg, abs, sign), round
# (floor, ceil, trunc, round without decimals), copy in the same dtype (clone), or pick
# elements of one tensor (index_select, gather, embedding, index). So a non-finite output
# of one of them always had a non-finite input, which, with every kind of value checked
# (NaN, +Inf and -Inf), makes it no birth, whatever the values. With nothing marked
# either (no intentional -inf, no norm, no lineage alive, which such an op would have to
# carry on or end), checking their outputs can find nothing, and they run unchecked. An
# op given to ``ignore`` and the fill ops keep their checks: they mark what they make.
# Views cost nothing already. Ops that can overflow (add, mul, exp, matmul, a cast to a
# narrower dtype, cat promoting an integer to a half, round with decimals, dropout's
# scaling) are always checked.


class OpChecks:
    """Runs each aten op and checks what it wrote.

    Args:
        checks: what to check and whether to raise at the first finding.
        births: where an output that fails the check goes.
        functions: the torch function running, whose node a birth may wait for.
    """

    def __init__(self, checks: TorchChecks, births: Births, functions: FunctionCalls) -> None:
        self.checks = checks
        self._births = births
        self._functions = functions
        self._ops: dict[Any, OpInfo] = {}
        self._bounded: set[Any] = set()
        """The ops that cannot make a birth (Note [Ops that make no birth])."""

    def dispatch(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run an aten op and check what it wrote (Note [Born in PyTorch])."""
        # Called as from the caller's line, for the warnings it raises (Note [A warning keeps
        # its line] in sources/pytorch/caller_line.py); the mode's own frame is two up.
        frame = caller(sys._getframe(2), func)
        if torch._C._current_graph_task_id() != -1:
            return call_from(frame, func, args, kwargs)  # a backward node's op: checked by node
        op = self._ops.get(func)
        if op is None:
            op = self._ops[func] = self._op_info(func)
            if self._bounds(op):
                self._bounded.add(func)
        if op.view:
            out = call_from(frame, func, args, kwargs)
            if self._births.marked():
                self.guarded(self._births.carry, args, out)
            return out
        if func in self._bounded and not self._births.marked():
            return call_from(frame, func, args, kwargs)  # Note [Ops that make no birth]
        before = self.guarded(self._before, op, args, kwargs) if op.mutated else None
        out = call_from(frame, func, args, kwargs)
        self.guarded(self._check, op, args, kwargs, out, before or {})
        return out

    def guarded(self, check: Callable[..., Any], *args: Any) -> Any:
        """Run a check; one that fails (an exotic tensor) warns once and never breaks the op."""
        try:
            return check(*args)
        except NonFiniteError:
            raise
        except Exception as exc:  # noqa: BLE001 - a check never breaks the program it watches
            warn_once(f"autograd-viz: an op's output could not be checked for NaN ({exc!r})")
            return None

    def _before(self, op: OpInfo, args: Any, kwargs: dict[str, Any]) -> dict[int, frozenset[str]]:
        """What the tensors an in-place op writes held before it."""
        kinds = self._births.kinds
        return {id(t): kinds(t) for t in mutated(op, args, kwargs) if not finite(t)}

    def _check(
        self,
        op: OpInfo,
        args: Any,
        kwargs: dict[str, Any],
        out: Any,
        before: dict[int, frozenset[str]],
    ) -> None:
        births = self._births
        if op.short in NORM_OPS and isinstance(out, torch.Tensor):
            births.norms[out] = NO_KINDS
        written = results(op, out, args, kwargs)
        bad = [(i, t) for i, t in enumerate(written) if t is not None and not finite(t)]
        lineage = births.lineage
        inherited = lineage.of((args, kwargs)) if lineage else NO_IDS  # Note [Lineage]
        if bad and (self.checks.first or HUB.active):  # else a finding would go nowhere
            born: dict[int, frozenset[int]] = {}
            for birth in births.look(op, args, kwargs, bad, before):
                if birth.number is not None:
                    born[birth.output_index] = frozenset((birth.number,))
                if birth.node_nr is None or not self._functions.wait_for_node(birth):
                    births.emit(birth, None)
            if inherited or born:
                self._follow(op, args, kwargs, bad, inherited, born)
        else:
            if births.intentional and written:
                for t in written:
                    if t is not None:
                        births.intentional.pop(t, None)  # overwritten with finite values
            if inherited:  # a lineage ends here (where, a cast, nan_to_num): its node knows
                self._tag_node(args, kwargs, inherited)
        if lineage and op.mutated and inherited:
            for t in mutated(op, args, kwargs):
                if finite(t):
                    lineage.drop(t)  # overwritten with finite values

    def _follow(
        self,
        op: OpInfo,
        args: Any,
        kwargs: dict[str, Any],
        bad: list[tuple[int, torch.Tensor]],
        inherited: frozenset[int],
        born: dict[int, frozenset[int]],
    ) -> None:
        """Give each non-finite output the births it came from; tell the op's node, and
        say when a parameter was written with them (Note [Lineage])."""
        births = self._births
        lineage = births.lineage
        written_in_place = {id(t) for t in mutated(op, args, kwargs)} if op.mutated else set()
        every = inherited.union(*born.values()) if born else inherited
        for index, t in bad:
            came_from = inherited | born.get(index, NO_IDS)
            if not came_from:
                continue
            lineage.mark(t, came_from)
            if id(t) not in written_in_place:
                continue
            base = t._base  # written through a view: the tensor it views holds them too
            if base is not None:
                lineage.mark(base, lineage.tensors.get(base, NO_IDS) | came_from)
            owner = t if base is None else base
            if owner.is_leaf and owner.requires_grad:
                births.reach(PARAMETER, owner)
        self._tag_node(args, kwargs, every)

    def _tag_node(self, args: Any, kwargs: dict[str, Any], came_from: frozenset[int]) -> None:
        """The node this op is making, if any, keeps the births it read or made."""
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors((args, kwargs))):
            self._functions.node_lineage(torch._C._autograd._get_sequence_nr() - 1, came_from)

    def _bounds(self, op: OpInfo) -> bool:
        """Whether ``op`` makes a non-finite value only from a non-finite input (Note [Ops that
        make no birth]), with every kind of value checked and the op not ignored."""
        checks = self.checks
        return (
            checks.check_nan
            and checks.check_inf
            and not op.ignored
            and not op.fills
            and op.name in BOUNDED_OPS
        )

    def _op_info(self, func: Any) -> OpInfo:
        schema = func._schema
        packet = func.overloadpacket.__name__
        short = packet.strip("_")
        mutated = tuple(
            (i, a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        )
        fresh = tuple(
            i
            for i, r in enumerate(schema.returns)
            if r.alias_info is None and r.name not in KERNEL_STATE_RETURNS
        )
        name = str(func)
        names = {name, name.rsplit(".", 1)[0], short, packet, f"aten.{short}", f"aten.{packet}"}
        return OpInfo(
            name=name,
            short=short,
            view=(not mutated and not fresh and bool(schema.returns))
            or short in UNINITIALIZED_OPS
            or (func.namespace in PENDING_NAMESPACES and short != "wait_tensor"),
            mutated=mutated,
            fresh=fresh,
            several=len(schema.returns) > 1,
            fills=short in FILL_OPS,
            ignored=bool(names & self.checks.ignore),
        )


class DispatchMode(TorchDispatchMode):
    """The checker's dispatch mode: every aten op through :meth:`OpChecks.dispatch`."""

    def __init__(self, ops: OpChecks) -> None:
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.ops.dispatch(func, args, kwargs or {})

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Dynamo compiles under this mode rather than run eagerly and skip the frame for
        good (Note [Compiled regions] in ``sources/pytorch/compiled.py``)."""
        return True
