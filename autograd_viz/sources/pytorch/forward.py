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

import functools
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _python_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.compiled import around_compiled, is_compiling
from autograd_viz.sources.pytorch.forward_compiled import RegionChecks, eagerly, step_aside_modes
from autograd_viz.sources.pytorch.graph import TorchNode
from autograd_viz.sources.pytorch.op_values import (
    FILL_OPS,
    NAN,
    NEGINF,
    NORM_OPS,
    PENDING_NAMESPACES,
    POSINF,
    UNINITIALIZED_OPS,
    OpInfo,
    checked_values,
    finite,
    mutated,
    new_nodes,
    results,
    scalar_kinds,
    tensors,
)
from autograd_viz.sources.pytorch.origins import (
    ORIGIN_KEY,
    Origin,
    node_origin,
    user_frames,
    user_stack,
)
from autograd_viz.sources.pytorch.saved import saved_summaries
from autograd_viz.sources.pytorch.summary import TorchSummary, summarize_tensor
from autograd_viz.trace.summary import TensorSummary
from engine.activity import ACTIVITY
from engine.events import HUB, Event

_BACKWARD_CALLS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})
_NO_KINDS: frozenset[str] = frozenset()


class NonFiniteError(RuntimeError):
    """A NaN or Inf was found while checking with ``first=True`` (anomaly mode's raise)."""

    _engine_propagate = True
    """Raised in an event listener, it fails the backward call (see ``engine.events.listen``)."""


@dataclass(frozen=True)
class TorchChecks:
    """What :class:`TorchNanChecker` checks and what it does with a finding."""

    check_nan: bool = True
    """Flag NaN values."""
    check_inf: bool = True
    """Flag +Inf and -Inf values (intentional ``-inf`` excepted)."""
    forward: bool = True
    """Check every aten op's outputs, not only the backward nodes' outputs."""
    first: bool = False
    """Raise :class:`NonFiniteError` at the first finding instead of collecting them all."""
    ignore: frozenset[str] = field(default_factory=frozenset)
    """Ops whose non-finite outputs are meant: ``masked_fill``, ``aten.log.default``, ..."""
    max_values: int = 16
    """Tensors up to this many elements keep their values in the events' summaries."""
    eager_compiled: bool = False
    """Run ``torch.compile``d code eagerly, so that the ops inside are checked one by one
    (results may then differ in the last bits; Note [Compiled regions])."""


@dataclass(slots=True)
class _Birth:
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


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[_Birth] = []
        self.modules: list[str] = []
        self.names: dict[int, str] = {}
        """Qualified names of the modules under the outermost one running."""
        self.aside_at = -1
        """The module depth at which the function mode stepped aside (Note [Fast paths])."""


class TorchNanChecker:
    """Checks a PyTorch program for NaN and Inf as it runs (see the module docstring).

    Enter and leave it on the same thread; it watches that thread's ops, and
    every PyTorch backward call the bridge watches. Findings are ``anomaly``
    events: they go nowhere, and nothing is checked in collect mode, while
    nobody listens to :data:`engine.events.HUB`.

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
        self._ops: dict[Any, OpInfo] = {}
        self._intentional: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._norms: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._local = _ThreadState()
        self._modes: list[Any] = []
        self._handles: list[Any] = []
        self._listener = _backward_checks(self)  # one object: the hub unsubscribes by identity
        self._settings = ExitStack()
        self._outer_regions: Any = None
        self._names: weakref.WeakKeyDictionary[torch.nn.Module, dict[int, str]] = (
            weakref.WeakKeyDictionary()
        )

    # -- arming ------------------------------------------------------------------------
    def __enter__(self) -> TorchNanChecker:
        if self.checks.forward:
            hooks = torch.nn.modules.module
            self._handles += [
                hooks.register_module_forward_pre_hook(self._module_enter),
                hooks.register_module_forward_hook(self._module_leave, always_call=True),
            ]
            self._modes = [_Functions(self), _Dispatch(self)]
            for mode in self._modes:
                mode.__enter__()
            self._outer_regions = around_compiled(RegionChecks(self))
        if self.checks.eager_compiled:
            eagerly(self._settings)
        HUB.subscribe(self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        HUB.unsubscribe(self._listener)
        if self._modes:
            around_compiled(self._outer_regions)
        self._settings.close()
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        self._modes.clear()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    # -- compiled regions (forward_compiled.py) ------------------------------------------
    def modes_on(self) -> bool:
        """Whether the forward checks are armed."""
        return bool(self._modes)

    def step_aside(self, aside: ExitStack) -> None:
        """Take the modes off their stacks until ``aside`` closes (a compiled region runs)."""
        step_aside_modes(aside, self._modes[0], self._modes[1])

    def born_in_region(
        self, op: OpInfo, index: int, t: torch.Tensor, kinds: frozenset[str], inputs: list[Any]
    ) -> None:
        """A compiled region's output ``index`` was born non-finite: emit it on its node."""
        self._born(op, index, t, kinds, inputs, [], set(), t.grad_fn)

    @property
    def checked(self) -> frozenset[str]:
        """The kinds of value checked (``nan``, ``+inf``, ``-inf``)."""
        return self._checked

    def silent(self) -> bool:
        """Collect mode with nobody listening: a finding would go nowhere."""
        return not self.checks.first and not HUB.active

    _silent = silent

    # -- modules -----------------------------------------------------------------------
    # Note [Fast paths]
    # ~~~~~~~~~~~~~~~~~
    # With any TorchFunctionMode active, PyTorch's has_torch_function() is true, and
    # nn.MultiheadAttention and the nn.Transformer layers skip their inference fast
    # path (results then differ in the last bits). Without grad there is no node to
    # tie to a line, so a module that runs without grad runs with the function mode
    # off the stack, taking the path it takes unwatched; aten ops are checked all the
    # same. The mode goes back when that module returns.

    def _module_enter(self, module: torch.nn.Module, args: Any) -> None:
        if is_compiling():
            return  # Dynamo traces this hook: nothing of ours goes into its graph
        local = self._local
        if local.aside_at < 0 and not torch.is_grad_enabled() and self._function_mode_on_top():
            torch._C._pop_torch_function_stack()
            local.aside_at = len(local.modules)
        if not local.modules:
            names = self._names.get(module)
            if names is None:
                names = {id(m): n for n, m in module.named_modules() if n}
                names[id(module)] = type(module).__name__
                self._names[module] = names
            local.names = names
        local.modules.append(local.names.get(id(module)) or type(module).__name__)

    def _module_leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if is_compiling():
            return
        local = self._local
        if local.modules:
            local.modules.pop()
        if local.aside_at == len(local.modules):
            local.aside_at = -1
            torch._C._push_on_torch_function_stack(self._modes[0])

    def _function_mode_on_top(self) -> bool:
        depth = torch._C._len_torch_function_stack()
        return (
            bool(self._modes)
            and depth > 0
            and (torch._C._get_function_stack_at(depth - 1) is self._modes[0])
        )

    # -- torch functions: nodes, their origin, forward findings --------------------------
    def function_call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run a torch function; tag the nodes it made and emit the births it had."""
        local = self._local
        start = torch._C._autograd._get_sequence_nr()
        local.depth += 1
        out = None
        try:
            if func in _BACKWARD_CALLS and self._modes:
                with self._outside_backward():
                    out = func(*args, **kwargs)
            else:
                out = func(*args, **kwargs)
        finally:
            local.depth -= 1
            pending = local.pending if local.depth == 0 else None
            made = torch._C._autograd._get_sequence_nr() != start
            if made or pending:
                nodes = new_nodes(out, start) if made else {}
                if made:
                    self._tag(nodes.values())
                if pending:
                    local.pending = []
                    self._emit_births(pending, nodes)
        return out

    @contextmanager
    def _outside_backward(self) -> Iterator[None]:
        """Step the dispatch mode aside while a backward call runs (Note [Born in PyTorch])."""
        if _python_dispatch._get_current_dispatch_mode() is not self._modes[-1]:
            yield  # somebody's mode sits above ours: ours checks the graph task id instead
            return
        with _python_dispatch._pop_mode_temporarily():
            yield

    def _tag(self, fns: Iterable[Any]) -> None:
        frame = next(user_frames(sys._getframe(2)), None)
        if frame is None:
            return
        modules = self._local.modules
        origin = Origin(
            frame.f_code.co_filename,
            frame.f_lineno,
            frame.f_code.co_name,
            modules[-1] if modules else None,
        )
        stack = origin.formatted()
        for fn in fns:
            metadata = fn.metadata
            if ORIGIN_KEY not in metadata:
                metadata[ORIGIN_KEY] = origin
                # Where anomaly mode keeps a node's forward stack: the bridge's graph
                # snapshot (and so the TUI's inspector) shows the user's line from it.
                metadata.setdefault("traceback_", stack)

    def _emit_births(self, births: list[_Birth], nodes: dict[int, Any]) -> None:
        for birth in births:
            tensor = birth.ref() if birth.ref is not None else None
            fn = tensor.grad_fn if tensor is not None else None
            if fn is None and birth.node_nr is not None:
                fn = nodes.get(birth.node_nr)
            self._emit_forward(birth, fn)

    # -- aten ops ------------------------------------------------------------------------
    def dispatch(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run an aten op and check what it wrote (Note [Born in PyTorch])."""
        if torch._C._current_graph_task_id() != -1:
            return func(*args, **kwargs)  # a backward node's op: checked by node
        op = self._ops.get(func)
        if op is None:
            op = self._ops[func] = self._op_info(func)
        if op.view:
            out = func(*args, **kwargs)
            if self._intentional or self._norms:
                self._guarded(self._after_view, args, out)
            return out
        before = self._guarded(self._before, op, args, kwargs) if op.mutated else None
        out = func(*args, **kwargs)
        self._guarded(self._check, op, args, kwargs, out, before or {})
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

    _guarded = guarded

    def _after_view(self, args: Any, out: Any) -> None:
        if self._intentional:
            self._carry(self._intentional, args, out)
        if self._norms:
            self._carry(self._norms, args, out)

    def _before(self, op: OpInfo, args: Any, kwargs: dict[str, Any]) -> dict[int, frozenset[str]]:
        """What the tensors an in-place op writes held before it."""
        return {id(t): self._kinds(t) for t in mutated(op, args, kwargs) if not finite(t)}

    def _check(
        self,
        op: OpInfo,
        args: Any,
        kwargs: dict[str, Any],
        out: Any,
        before: dict[int, frozenset[str]],
    ) -> None:
        if op.short in NORM_OPS and isinstance(out, torch.Tensor):
            self._norms[out] = _NO_KINDS
        written = results(op, out, args, kwargs)
        bad = [(i, t) for i, t in enumerate(written) if t is not None and not finite(t)]
        if bad and not self._silent():
            self._look(op, args, kwargs, written, bad, before)
        elif self._intentional and written:
            for t in written:
                if t is not None:
                    self._intentional.pop(t, None)  # overwritten with finite values

    def _op_info(self, func: Any) -> OpInfo:
        schema = func._schema
        packet = func.overloadpacket.__name__
        short = packet.strip("_")
        mutated = tuple(
            (i, a.name)
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        )
        fresh = tuple(i for i, r in enumerate(schema.returns) if r.alias_info is None)
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

    def kinds(self, t: torch.Tensor) -> frozenset[str]:
        """Which of NaN, +Inf, -Inf ``t`` holds (exact; for tensors that failed the sum)."""
        if type(t) is not torch.Tensor:
            values = checked_values(t)
            if values is None:
                return _NO_KINDS
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

    _kinds = kinds

    @staticmethod
    def _carry(marks: WeakIdKeyDictionary, args: Any, out: Any) -> None:
        """A view of a marked tensor is marked too."""
        found = [marks[t] for t in tensors(args) if t in marks]
        if found:
            kinds = frozenset().union(*found)
            for t in tensors(out):
                marks[t] = kinds

    def _look(
        self,
        op: OpInfo,
        args: Any,
        kwargs: dict[str, Any],
        written: list[torch.Tensor | None],
        bad: list[tuple[int, torch.Tensor]],
        before: dict[int, frozenset[str]],
    ) -> None:
        """The slow path: some output is not finite; was it born here?"""
        checked = self._checked
        inputs = list(tensors((args, kwargs)))
        numbers = scalar_kinds((args, kwargs))
        # A fill value of -inf is meant; any other non-finite number the user wrote
        # (x * inf) is where the value came from, so the output is not born here.
        carried = set(numbers & {NEGINF}) if op.fills else set()
        flagged = not op.fills and bool(numbers & checked)
        in_place = {id(t) for t in mutated(op, args, kwargs)} if op.mutated else set()
        nonfinite = []
        for i, t in enumerate(inputs):
            if not (t.is_floating_point() or t.is_complex()):
                continue
            if id(t) in in_place:
                kinds = before.get(id(t), _NO_KINDS)
            else:
                kinds = _NO_KINDS if finite(t) else self._kinds(t)
            if not kinds:
                continue
            nonfinite.append(i)
            meant = self._intentional.get(t)
            if meant is not None:
                carried |= meant
            elif op.fills and (t.dim() == 0 or op.short.startswith("lift")):
                carried |= kinds & {NEGINF}  # a fill value, or a tensor literal
            elif kinds & checked:
                flagged = True
        for index, t in bad:
            kinds = self._kinds(t)
            if op.ignored or (not flagged and carried and kinds <= carried):
                self._intentional[t] = kinds
            elif kinds & checked and not flagged:
                self._born(op, index, t, kinds, inputs, nonfinite, in_place)

    def _born(
        self,
        op: OpInfo,
        index: int,
        t: torch.Tensor,
        kinds: frozenset[str],
        inputs: list[torch.Tensor],
        nonfinite: list[int],
        in_place: set[int],
        fn: Any = None,
    ) -> None:
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
        local = self._local
        node_nr = None
        if torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
            node_nr = torch._C._autograd._get_sequence_nr() - 1
        birth = _Birth(
            op,
            index,
            value,
            summarize_tensor(t, device, max_values),
            summaries,
            nonfinite,
            ["norm" if x in self._norms else None for x in inputs],
            weakref.ref(t),
            node_nr,
            device,
            user_stack(),
            local.modules[-1] if local.modules else None,
        )
        if local.depth and node_nr is not None and fn is None:
            local.pending.append(birth)  # its node is known once autograd attached it
        else:
            self._emit_forward(birth, fn)

    # -- events --------------------------------------------------------------------------
    def _emit_forward(self, birth: _Birth, fn: Any) -> None:
        op = birth.op
        node = TorchNode(fn, fn.name(), fn._sequence_nr(), birth.device) if fn else None
        if node is None:
            node = TorchNode(None, op.name, 0, birth.device)
        raises = self.checks.first
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
                    },
                )
            finally:
                ACTIVITY.leave()
            self.findings += 1
        if raises:
            raise NonFiniteError(
                f"Function '{node.name()}' produced {birth.value} values in its "
                f"{birth.output_index}th forward output (op '{op.name}')."
            )

    def _on_event(self, event: Event) -> None:
        """Anomaly mode's backward check, on each PyTorch node the bridge saw end."""
        if event.kind != "node_end" or event.data.get("derived"):
            return
        for index, summary in enumerate(event.data.get("outputs") or ()):
            tensor = _tensor_of(summary)
            if tensor is None:
                continue
            # Outside _DisableTorchDispatch: a nested tensor is a Python subclass.
            tensor = checked_values(tensor)
            if tensor is None:
                continue  # no values to check (Note [Tensors without values])
            with torch._C._DisableTorchDispatch(), torch.no_grad():
                try:
                    if finite(tensor):
                        continue
                    kinds = self._kinds(tensor)
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
        HUB.emit_data("anomaly", event.device, event.graph_task, _NodeFields(event), data)
        self.findings += 1
        if self.checks.first:
            raise NonFiniteError(
                f"Function '{event.node_name}' returned {value} values in its {index}th output."
            )


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


class _Dispatch(TorchDispatchMode):
    def __init__(self, checker: TorchNanChecker) -> None:
        super().__init__()
        self.checker = checker

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.checker.dispatch(func, args, kwargs or {})


class _Functions(TorchFunctionMode):
    def __init__(self, checker: TorchNanChecker) -> None:
        super().__init__()
        self.checker = checker

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.checker.function_call(func, args, kwargs or {})


# -- helpers ---------------------------------------------------------------------------


def _tensor_of(summary: Any) -> torch.Tensor | None:
    """The gradient a bridge summary stands for, if it is still alive (a weak reference)."""
    if not isinstance(summary, TorchSummary):
        return None
    ref = getattr(summary, "_ref", None)
    return ref() if ref is not None else None


__all__ = ["NonFiniteError", "TorchChecks", "TorchNanChecker"]


def _backward_checks(checker: TorchNanChecker) -> functools.partial[None]:
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
    return listener
