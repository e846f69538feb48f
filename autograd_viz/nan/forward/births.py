"""Where a forward NaN or Inf was born, and its ``anomaly`` event.

The slow path of :class:`~autograd_viz.nan.forward.checks.TorchNanChecker`,
an object the checker owns: when an aten op's output fails the cheap check,
:class:`Births` finds out whether it was born in that op (Note [Born in
PyTorch], Note [Intentional -inf] in ``checks.py``) and summarizes it at
once; the op check then has it emitted on the op's node, at once or when
the torch function running returns (raising :class:`NonFiniteError` in
``first`` mode). It keeps what is known of tensors between ops: which hold
an intentional ``-inf``, which a norm op made.

Note [Stopping where a value reaches something]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
With ``first=True`` a finding stops the program, as anomaly mode's error
does. A numbered birth may be contained (Note [Lineage] in
``lineage.py``: T5's ``log(0)`` cast to an integer), and stopping a
healthy program there would be a false alarm, so a birth raises nothing
where it is born: its words (node, op, the program's line, module) are kept
by number, and :class:`NonFiniteError` is raised where its values first reach
something: at the backward call whose roots carry them (the loss), at the
in-place write of a parameter, at the return of the outermost module call
(its output), or at the backward node whose output is not finite (a
gradient, ``backward.py``), the error naming the birth. The
traceback then ends at the program's line that got there (``loss.backward()``,
``model(x)``, ``opt.step()``), our frames taken out as they are from every
error (Note [A traceback as without us]). A birth the lineage cannot follow
(inside a ``torch.func`` transform, no number) raises where it is born, as
before. The words of the latest :data:`KEPT_WORDS` births not reached yet are
kept, so memory stays bounded; an older one reaching something is named only
as a birth in the forward.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from autograd_viz.nan.forward.lineage import LOSS, OUTPUT, PARAMETER, Lineage, tag_node
from autograd_viz.sources.pytorch.node import TorchNode
from autograd_viz.sources.pytorch.op_values import (
    NAN,
    NEGINF,
    POSINF,
    OpInfo,
    checked_values,
    finite,
    mutated,
    scalar_kinds,
    tensors,
)
from autograd_viz.sources.pytorch.origins import user_stack
from autograd_viz.sources.pytorch.summary import summarize_tensor
from autograd_viz.sources.tracebacks import RaisedOnPurpose
from autograd_viz.trace.summary import TensorSummary
from engine.activity import ACTIVITY
from engine.events import HUB

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from autograd_viz.nan.forward.module_hooks import ModuleHooks
    from autograd_viz.nan.forward.settings import TorchChecks

NO_KINDS: frozenset[str] = frozenset()

KEPT_WORDS = 1024
"""How many births not reached yet ``first`` mode keeps the words of (Note [Stopping where a
value reaches something])."""

_REACHED_WORDS = {LOSS: "the loss", PARAMETER: "a parameter", OUTPUT: "the model's output"}

_FRAME = re.compile(r'\s*File "(?P<file>.*)", line (?P<line>\d+), in (?P<name>.*)')


class NonFiniteError(RuntimeError, RaisedOnPurpose):
    """A NaN or Inf was found while checking with ``first=True`` (anomaly mode's raise).

    Its traceback ends at the program's line (Note [A traceback as without us]).
    """

    _engine_propagate = True
    """Raised in an event listener, it fails the backward call (see ``engine.events.listen``)."""


@dataclass(slots=True)
class Birth:
    """A non-finite output born in one op, summarized at once."""

    op: OpInfo
    output_index: int
    value: str
    output: TensorSummary
    inputs: list[TensorSummary | None]
    nonfinite_inputs: list[int]
    input_ops: list[str | None]
    """Per input, ``"norm"`` when a norm op made it."""
    ref: Any
    """A weak reference to the output, to find its ``grad_fn`` once autograd attached it."""
    node_nr: int | None
    """The ``sequence_nr`` autograd gave the op's node, if it made one."""
    device: str
    stack: list[str]
    module: str | None
    number: int | None
    """The birth's number (Note [Lineage] in ``lineage.py``); ``None`` inside a
    ``torch.func`` transform, whose wrapped tensors the lineage cannot follow: such a
    birth is reported as born, whatever becomes of its values."""
    held: dict[int, str | None] = field(default_factory=dict)
    """The inputs that are parameters holding the value before the op, with their names
    (Note [A parameter that holds a NaN])."""


class Births:
    """The forward findings: whether a non-finite output was born in its op, and its event.

    Args:
        checks: what to check and whether to raise at the first finding.
        checked: the kinds of value flagged (``nan``, ``+inf``, ``-inf``).
        modules: the module running on each thread (a finding names it).
        found: called once per finding emitted (the checker counts them).
    """

    def __init__(
        self,
        checks: TorchChecks,
        checked: frozenset[str],
        modules: ModuleHooks,
        found: Callable[[], None],
    ) -> None:
        self.checks = checks
        self.checked = checked
        self._modules = modules
        self._found = found
        self.intentional: WeakIdKeyDictionary = WeakIdKeyDictionary()
        """Tensors holding an intentional ``-inf`` (Note [Intentional -inf]): their kinds."""
        self.norms: WeakIdKeyDictionary = WeakIdKeyDictionary()
        """Tensors a norm op made (a finding says which inputs were norms)."""
        self.lineage = Lineage()
        """Which births each live non-finite tensor came from (Note [Lineage])."""
        self.transformed: Callable[[], bool] = lambda: False
        """Whether the op runs inside a ``torch.func`` transform (set by the checker)."""
        self.any_found: Callable[[], bool] = lambda: False
        """Whether a finding was emitted in this run so far (set by the checker)."""
        self.steps = OptimizerSteps()
        """Whether this thread is inside an optimizer's ``step`` (hooked by the checker)."""
        self._said_held: WeakIdKeyDictionary = WeakIdKeyDictionary()
        """Parameters already said to hold a NaN or Inf (Note [A parameter that holds a NaN])."""
        self._words: OrderedDict[int, str] = OrderedDict()
        """``first`` mode: what each birth not reached yet was, by number, for the error
        raised where its values reach something (the latest :data:`KEPT_WORDS`)."""

    def kinds(self, t: torch.Tensor) -> frozenset[str]:
        """Which of NaN, +Inf, -Inf ``t`` holds (exact; for tensors that failed the sum)."""
        if type(t) is not torch.Tensor:
            values = checked_values(t)
            if values is None:
                return NO_KINDS
            t = values
        with torch.no_grad():
            kinds = []
            if bool(torch.isnan(t).any()):
                kinds.append(NAN)
            if not t.is_complex():
                if bool(torch.isposinf(t).any()):
                    kinds.append(POSINF)
                if bool(torch.isneginf(t).any()):
                    kinds.append(NEGINF)
            elif bool(torch.isinf(t).any()):
                kinds.append(POSINF)
        return frozenset(kinds)

    def marked(self) -> bool:
        """Whether any tensor is marked intentional, a norm or with a lineage (a view then
        carries it)."""
        return bool(self.intentional or self.norms or self.lineage)

    def carry(self, args: Any, out: Any) -> None:
        """A view of a marked tensor is marked too."""
        if self.intentional:
            self._carry(self.intentional, args, out)
        if self.norms:
            self._carry(self.norms, args, out)
        if self.lineage:
            self.lineage.carry(args, out)

    @staticmethod
    def _carry(marks: WeakIdKeyDictionary, args: Any, out: Any) -> None:
        found = [marks[t] for t in tensors(args) if t in marks]
        if found:
            kinds = frozenset().union(*found)
            for t in tensors(out):
                marks[t] = kinds

    def look(
        self,
        op: OpInfo,
        args: Any,
        kwargs: dict[str, Any],
        bad: list[tuple[int, torch.Tensor]],
        before: dict[int, frozenset[str]],
    ) -> Iterator[Birth]:
        """The slow path: some output is not finite; the births among them, one at a time
        (in ``first`` mode, emitting the first one raises and ends the look)."""
        checked = self.checked
        inputs = list(tensors((args, kwargs)))
        numbers = scalar_kinds((args, kwargs))
        # A fill value of -inf is meant; any other non-finite number the user wrote
        # (x * inf) is where the value came from, so the output is not born here.
        carried = set(numbers & {NEGINF}) if op.fills else set()
        flagged = not op.fills and bool(numbers & checked)
        in_place = {id(t) for t in mutated(op, args, kwargs)} if op.mutated else set()
        nonfinite = []
        held: dict[int, str | None] = {}
        passed_on = False
        for i, t in enumerate(inputs):
            if not (t.is_floating_point() or t.is_complex()):
                continue
            if id(t) in in_place:
                kinds = before.get(id(t), NO_KINDS)
            else:
                kinds = NO_KINDS if finite(t) else self.kinds(t)
            if not kinds:
                continue
            nonfinite.append(i)
            meant = self.intentional.get(t)
            if meant is not None:
                carried |= meant
            elif op.fills and (t.dim() == 0 or op.short.startswith("lift")):
                carried |= kinds & {NEGINF}  # a fill value, or a tensor literal
            elif kinds & checked and self._held_by_parameter(_base(t)):
                held[i] = self._modules.parameter_name(_base(t))
            elif kinds & checked:
                flagged = True
                passed_on = passed_on or t.dim() > 0  # a tensor's values, not a literal
        for index, t in bad:
            kinds = self.kinds(t)
            if op.ignored or (not flagged and carried and kinds <= carried):
                self.intentional[t] = kinds
            elif kinds & checked and not flagged:
                birth = self.born(op, index, t, kinds, inputs, nonfinite, in_place)
                birth.held.update(held)
                yield birth
        for i in held:
            self._said_held[_base(inputs[i])] = True
        if flagged and in_place and (self.steps.running() or (passed_on and self.any_found())):
            # Stepped by an optimizer from its gradients, or written from a tensor's values
            # once a finding was said: a value that came from a backward, not held unseen.
            for t in mutated(op, args, kwargs):
                self._said_held[_base(t)] = True

    def _held_by_parameter(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is a parameter holding a value no checked op made, not said yet
        (Note [A parameter that holds a NaN])."""
        return (
            t.requires_grad
            and t.is_leaf
            and t not in self._said_held
            and not (self.lineage and t in self.lineage.tensors)
        )

    def born(
        self,
        op: OpInfo,
        index: int,
        t: torch.Tensor,
        kinds: frozenset[str],
        inputs: list[torch.Tensor],
        nonfinite: list[int],
        in_place: set[int],
    ) -> Birth:
        """Output ``index`` of ``op``, ``t``, was born holding ``kinds``: summarized now."""
        value = NAN if NAN in kinds and self.checks.check_nan else "inf"
        max_values = self.checks.max_values
        device = str(t.device)
        # An input written in place holds the output now: only its shape is known.
        summaries: list[TensorSummary | None] = [
            TensorSummary(tuple(x.shape), str(x.dtype).removeprefix("torch."), str(x.device))
            if id(x) in in_place
            else summarize_tensor(x, str(x.device), max_values)
            for x in inputs
        ]
        node_nr = None
        if torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
            node_nr = torch._C._autograd._get_sequence_nr() - 1
        return Birth(
            op,
            index,
            value,
            summarize_tensor(t, device, max_values),
            summaries,
            nonfinite,
            ["norm" if x in self.norms else None for x in inputs],
            weakref.ref(t),
            node_nr,
            device,
            user_stack(),
            self._modules.current,
            None if self.transformed() else self.lineage.new_birth(),
        )

    def emit(self, birth: Birth, fn: Any) -> None:
        """The forward ``anomaly`` event of ``birth`` on ``fn``, its node (``None``: on the op)."""
        op = birth.op
        node = TorchNode(fn, fn.name(), fn._sequence_nr(), birth.device) if fn else None
        if node is None:
            node = TorchNode(None, op.name, 0, birth.device)
        # A numbered birth may be contained: it stops the program only where its values
        # reach something (Note [Stopping where a value reaches something]).
        raises = self.checks.first and birth.number is None
        if self.checks.first and birth.number is not None:
            self._keep_words(birth.number, self._words_of(birth, node.name()))
        if HUB.active:
            ACTIVITY.enter()  # a debugger may pause this thread here (Note [Quiescence])
            try:
                HUB.emit_data(
                    "anomaly",
                    birth.device,
                    0,
                    node,
                    {
                        "phase": "forward",
                        "op": op.short,
                        "aten_op": op.name,
                        "output_index": birth.output_index,
                        "value": birth.value,
                        "born": True,
                        "raised": raises,
                        "tensor": birth.output,
                        "inputs": birth.inputs,
                        "nonfinite_inputs": birth.nonfinite_inputs,
                        "input_ops": birth.input_ops,
                        "traceback": birth.stack,
                        "module": birth.module,
                        **({} if birth.number is None else {"birth": birth.number}),
                        **(_held_data(birth.held) if birth.held else {}),
                    },
                )
            finally:
                ACTIVITY.leave()
            self._found()
        if raises:
            raise NonFiniteError(self._words_of(birth, node.name()) + ".")

    def born_in_region(
        self, op: OpInfo, index: int, t: torch.Tensor, kinds: frozenset[str], inputs: list[Any]
    ) -> None:
        """A compiled region's output ``index`` was born non-finite: emit it on its node."""
        birth = self.born(op, index, t, kinds, inputs, [], set())
        if birth.number is not None:
            number = frozenset((birth.number,))
            self.lineage.mark(t, number)  # Note [Lineage] in lineage.py
            if t.grad_fn is not None:
                tag_node(t.grad_fn, number)
        self.emit(birth, t.grad_fn)

    @staticmethod
    def _words_of(birth: Birth, node_name: str | None) -> str:
        """The birth as anomaly mode's error would say it, with the program's line and
        module."""
        produced = f"produced {birth.value} values in its {birth.output_index}th forward output"
        if node_name is None or node_name == birth.op.name:  # no node: nothing required grad
            words = f"Op '{birth.op.name}' {produced}"
        else:
            words = f"Function '{node_name}' {produced} (op '{birth.op.name}')"
        frame = _FRAME.match(birth.stack[-1]) if birth.stack else None
        if frame is not None:
            words += f", born at {frame['file']}:{frame['line']} in {frame['name']}"
        if birth.module:
            words += f" (module {birth.module})"
        return words

    def _keep_words(self, number: int, words: str) -> None:
        kept = self._words
        kept[number] = words
        if len(kept) > KEPT_WORDS:
            kept.popitem(last=False)

    def words(self, births: frozenset[int]) -> str | None:
        """``first`` mode: what the earliest of ``births`` whose words are kept was."""
        for number in sorted(births):
            words = self._words.get(number)
            if words is not None:
                return words
        return None

    def reach(self, what: str, tree: Any) -> None:
        """The tensors in ``tree`` reached ``what`` (the loss, a parameter, the model's
        output): say, once per birth, which births' values got there (Note [Lineage])."""
        lineage = self.lineage
        for t in tensors(tree):
            births = lineage.tensors.get(t)
            if births:
                new = lineage.unsaid(births)
                if new and HUB.active:
                    self._emit_reach(what, t, new)
                if new and self.checks.first:
                    self._stop(what, new)

    def _stop(self, what: str, births: frozenset[int]) -> None:
        """``first`` mode: values of ``births`` reached ``what``; the program stops here,
        the error naming where they were born (Note [Stopping where a value reaches
        something])."""
        words = self.words(births) or "A NaN or Inf born in the forward"
        for number in births:
            self._words.pop(number, None)
        raise NonFiniteError(f"{words}; its values reached {_REACHED_WORDS.get(what, what)}.")

    def _emit_reach(self, what: str, t: torch.Tensor, births: frozenset[int]) -> None:
        kinds = self.kinds(t)
        device = str(t.device)
        fn = t.grad_fn
        if fn is not None:
            node = TorchNode(fn, fn.name(), fn._sequence_nr(), device)
        else:
            node = TorchNode(None, what, 0, device)
        ACTIVITY.enter()  # a debugger may pause this thread here (Note [Quiescence])
        try:
            HUB.emit_data(
                "anomaly",
                device,
                0,
                node,
                {
                    "phase": "forward",
                    "op": what,
                    "output_index": 0,
                    "value": NAN if NAN in kinds and self.checks.check_nan else "inf",
                    "born": False,
                    "raised": False,
                    "tensor": summarize_tensor(t, device, self.checks.max_values),
                    "traceback": user_stack(),
                    "module": self._modules.current,
                    "reached": what,
                    "lineage": sorted(births),
                },
            )
        finally:
            ACTIVITY.leave()


__all__ = ["NO_KINDS", "Birth", "Births", "NonFiniteError"]


class _Depth(threading.local):
    def __init__(self) -> None:
        self.steps = 0


class OptimizerSteps:
    """Whether this thread runs an optimizer's ``step`` (``torch.optim``'s global step hooks):
    what a step writes into a parameter comes from its gradients (Note [A parameter that
    holds a NaN])."""

    def __init__(self) -> None:
        self._depth = _Depth()
        self._handles: list[Any] = []

    def running(self) -> bool:
        return self._depth.steps > 0

    def hook(self) -> None:
        from torch.optim import optimizer

        self._handles += [
            optimizer.register_optimizer_step_pre_hook(self._enter),
            optimizer.register_optimizer_step_post_hook(self._leave),
        ]

    def unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._depth.steps = 0

    def _enter(self, *_: Any) -> None:
        self._depth.steps += 1

    def _leave(self, *_: Any) -> None:  # not called when a step raises: the run ends there
        self._depth.steps = max(self._depth.steps - 1, 0)


def _base(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose memory ``t`` views (a linear layer reads ``weight.t()``), or ``t``."""
    base = t._base
    return t if base is None else base


def _held_data(held: dict[int, str | None]) -> dict[str, list[Any]]:
    """The event's ``held_inputs`` and ``held_names`` (Note [A parameter that holds a NaN])."""
    ordered = sorted(held.items())
    return {"held_inputs": [i for i, _ in ordered], "held_names": [n for _, n in ordered]}


# Note [A parameter that holds a NaN]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A parameter can hold a NaN or an Inf that no checked op made: the program wrote it
# (``p[0] = inf``, a checkpoint loaded from a file), or a step ran unchecked. Every op
# that reads it then only passes the value on, so nothing was born in the forward pass,
# and the report headed with the first backward node that returned a NaN
# (``LogSoftmaxBackward0``, ``0 × inf``), as anomaly mode does: a node far from the
# cause. So the first op that reads a parameter holding a value of no lineage is where
# that value enters the computation: its output is born there, its cause the parameter,
# by name where the model names it (``head.fc.weight``). Said once per parameter: the
# ops after it carry its lineage, and later steps reading it again are passed on. A
# parameter an optimizer's ``step`` wrote from non-finite values came from its gradients:
# from a backward of this process, already reported, or of another rank whose NaN an
# allreduce brought (that rank reports it): it is passed on, not held. So is one a checked
# op wrote in place from a tensor's non-finite values once a finding was said (a step
# written by hand). A literal the program wrote (``p[0] = inf``: a 0-d tensor copied in),
# and a tensor copied in before anything was found (``load_state_dict`` of a checkpoint
# that holds a NaN), are no such value: the first read names the parameter.
