"""Why each parameter got no gradient in a PyTorch backward call, and how its gradients flowed.

:class:`TorchGrads` runs every ``Tensor.backward``, ``torch.autograd.backward``
and ``torch.autograd.grad`` call that its function mode sees
(:mod:`autograd_viz.grads.torch_uses`): before the call it walks the graph
from the roots and hooks every node (:class:`CallPlan`); after it, it reads
which parameters' ``AccumulateGrad`` ran and with what, and explains every one
that got nothing (:func:`explain`) or only zeros (:func:`zeros_born_at`).

Note [Watching a backward call]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The hooks are node post hooks that return ``None`` and keep no gradient: for
each node, whether what it received and what it gave each next node holds a
non-zero (a 0-d bool tensor, left on the gradient's device until the call
ends), and for an ``AccumulateGrad`` the squared norm of what it received (this
call's gradient, whatever ``.grad`` held before). Statistics are taken under
``no_grad``, so ``create_graph=True`` records nothing more; handles are
removed when the call returns or raises (``retain_graph=True`` would keep
them). Gradients are bit-identical with and without the watch (the tests
compare them), and ``AccumulateGrad`` still steals the gradient it is given.

Note [The reasons, in order]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A parameter of the modules the forward ran that got no gradient is:
frozen (``requires_grad`` False); pruned (the call's ``inputs=`` or ``grad()``
left it out); otherwise, when its ``AccumulateGrad`` was on the graph but got
nothing, a node returned no gradient for it; otherwise it never reached the
graph, and the forward log says why: never used (its module never ran, or never
read it), used only without grad, cut (the latest cut whose graph holds it), or
what it made never reaches the loss (the latest module output, not reached from
the roots, whose graph holds it; else its last use). Walks from cuts and
outputs stop at nodes the roots reach, so together they cost one pass over
the graph.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from autograd_viz.grads.report import (
    CUT,
    FROZEN,
    NEVER_USED,
    NO_GRAD,
    NO_GRADIENT,
    PRUNED,
    UNREACHED,
    ZEROS,
    CallGrads,
    Finding,
    FlowRow,
    Where,
    flag_flow,
)
from autograd_viz.grads.torch_uses import ForwardLog, UsesTracker, user_line
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.caller_line import call_from
from autograd_viz.sources.pytorch.origins import ORIGIN_KEY, Origin

_SIGNATURES: dict[Any, inspect.Signature] = {}


def _where_made(node: Any) -> Where | None:
    origin = node.metadata.get(ORIGIN_KEY)
    if isinstance(origin, Origin):
        return Where(origin.file, origin.line, origin.function)
    return None


def _module_made(node: Any) -> str | None:
    origin = node.metadata.get(ORIGIN_KEY)
    return origin.module if isinstance(origin, Origin) else None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [value]
    return list(value)


class CallPlan:
    """One backward call: its graph from the roots, and what each node got (Note
    [Watching a backward call])."""

    def __init__(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        signature = _SIGNATURES.get(func)
        if signature is None:
            signature = _SIGNATURES[func] = inspect.signature(func)
        bound = signature.bind(*args, **kwargs).arguments
        self.kind = "grad" if func is torch.autograd.grad else "backward"
        roots = bound.get("self", bound.get("tensors", bound.get("outputs")))
        self.roots = [t for t in _as_list(roots) if isinstance(t, torch.Tensor)]
        inputs = bound.get("inputs")
        self.inputs: list[Any] | None = None if inputs is None else _as_list(inputs)
        self.nodes: list[Any] = []
        self.index: dict[int, int] = {}
        self.parents: list[list[tuple[int, int]]] = []
        self.leaves: dict[int, int] = {}
        """``id`` of each leaf on the graph → its ``AccumulateGrad``'s index."""
        self.received: list[Any] = []
        self.produced: list[Any] = []
        self.norms: dict[int, Any] = {}
        self._walk()

    def _walk(self) -> None:
        stack = []
        for t in self.roots:
            if t.requires_grad:
                node = torch.autograd.graph.get_gradient_edge(t).node
                if node is not None and self._add(node):
                    stack.append(node)
        while stack:
            node = stack.pop()
            i = self.index[id(node)]
            for slot, (child, _) in enumerate(node.next_functions):
                if child is None:
                    continue
                new = self._add(child)
                self.parents[self.index[id(child)]].append((i, slot))
                if new:
                    stack.append(child)
        self.received = [None] * len(self.nodes)
        self.produced = [None] * len(self.nodes)

    def _add(self, node: Any) -> bool:
        if id(node) in self.index:
            return False
        self.index[id(node)] = len(self.nodes)
        self.nodes.append(node)
        self.parents.append([])
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            self.leaves[id(variable)] = len(self.nodes) - 1
        return True

    def hook(self) -> list[Any]:
        """Hook every node; the handles to remove when the call ends."""
        return [node.register_hook(self._hook_for(i)) for i, node in enumerate(self.nodes)]

    def _hook_for(self, i: int) -> Callable[[Any, Any], None]:
        accumulates = getattr(self.nodes[i], "variable", None) is not None

        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            with torch.no_grad():
                self.received[i] = [_nonzero(g) for g in grad_outputs]
                self.produced[i] = [_nonzero(g) for g in grad_inputs]
                if accumulates and grad_outputs and grad_outputs[0] is not None:
                    self.norms[i] = _squared_norm(grad_outputs[0])

        return hook

    def got(self, i: int) -> bool | None:
        """Whether node ``i`` ran and received a defined gradient (None: it did not run)."""
        received = self.received[i]
        if received is None:
            return None
        return any(r is not None for r in received)

    def nonzero(self, flags: list[Any] | None) -> bool:
        """Whether any of ``flags`` (as the hooks keep them) says non-zero."""
        return any(f is not None and bool(f) for f in flags or ())


def _nonzero(g: Any) -> Any:
    if g is None:
        return None
    try:
        return g.detach().any()
    except (RuntimeError, TypeError):  # a sparse or exotic gradient: counted as non-zero
        return True


def _squared_norm(g: Any) -> Any:
    try:
        return torch.linalg.vector_norm(g.detach(), dtype=torch.float64) ** 2
    except (RuntimeError, TypeError):
        return None


class TorchGrads:
    """Explains every backward call of the thread that arms it (see the module docstring).

    Args:
        add: called with each call's :class:`CallGrads`.
    """

    def __init__(self, add: Callable[[CallGrads], None]) -> None:
        self._add = add
        self._calls = itertools.count()
        self.tracker = UsesTracker(self.backward)

    def arm(self) -> None:
        self.tracker.arm()

    def disarm(self) -> None:
        self.tracker.disarm()

    def backward(self, func: Any, args: Any, kwargs: dict[str, Any], frame: Any) -> Any:
        """Run one backward call hooked, then explain what it gave (Note [Watching ...])."""
        where = user_line(frame)
        index = next(self._calls)
        try:
            plan: CallPlan | None = CallPlan(func, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the call runs unwatched, and says so
            warn_once(f"autograd-viz grads: cannot read this backward call ({exc!r}); not checked")
            plan = None
        handles = plan.hook() if plan is not None else []
        try:
            out = call_from(frame, func, args, kwargs)
        finally:
            for handle in handles:
                handle.remove()
            log = self.tracker.new_log()
        if plan is not None:
            try:
                self._add(explain(plan, log, out, index, where))
            except Exception as exc:  # noqa: BLE001 - watching goes on, and says so
                warn_once(f"autograd-viz grads: could not explain a backward call ({exc!r})")
        return out


def _candidates(log: ForwardLog) -> list[tuple[str, str | None, int | None, torch.Tensor]]:
    seen: set[int] = set()
    found = []
    for root in log.roots.values():
        for name, module, module_id, p in root.parameters:
            if id(p) not in seen:
                seen.add(id(p))
                found.append((name, module, module_id, p))
    for p in log.bare.values():
        if id(p) not in seen:
            seen.add(id(p))
            found.append((f"Parameter{tuple(p.shape)}", None, None, p))
    return found


def explain(
    plan: CallPlan, log: ForwardLog, out: Any, index: int, where: Where | None
) -> CallGrads:
    """What the call gave each parameter of the modules its forward ran (Note [The reasons,
    in order])."""
    call = CallGrads(index, plan.kind, where)
    candidates = _candidates(log)
    call.parameters = len(candidates)
    inputs = None if plan.inputs is None else {id(t): j for j, t in enumerate(plan.inputs)}
    grads = _as_list(out) if plan.kind == "grad" else None
    claims: Claims | None = None
    flow: dict[str, list[float]] = {}
    for name, module, module_id, p in candidates:
        shape = tuple(p.shape)

        def found(reason: str, why: str, at: Where | None = None) -> None:
            call.findings.append(Finding(name, module, shape, reason, why, at))  # noqa: B023

        if not p.requires_grad:
            found(FROZEN, "requires_grad is False")
            continue
        if inputs is not None and id(p) not in inputs:
            what = "torch.autograd.grad(...)" if plan.kind == "grad" else "backward(inputs=...)"
            found(PRUNED, f"{what} left it out", where)
            continue
        acc = plan.leaves.get(id(p))
        if grads is not None and inputs is not None:
            g = grads[inputs[id(p)]]
            got: bool | None = g is not None
            nonzero = got and bool(g.detach().any())
        else:
            got = plan.got(acc) if acc is not None else None
            nonzero = got and plan.nonzero(plan.received[acc])  # type: ignore[index]
            if got and acc in plan.norms and plan.norms[acc] is not None:
                entry = flow.setdefault(module or name, [0.0, 0.0, 0])
                entry[0] += float(plan.norms[acc])
                entry[1] += float(torch.linalg.vector_norm(p.detach(), dtype=torch.float64)) ** 2
                entry[2] += 1
        if got:
            if not nonzero:
                why, at = zeros_born_at(plan, acc) if acc is not None else ("", None)
                found(ZEROS, why or "every element of its gradient is exactly zero", at)
            continue
        if acc is not None:
            why, at = _no_gradient_from(plan, acc)
            found(NO_GRADIENT, why, at)
            continue
        use = log.uses.get(id(p))
        if use is None or (use.grad is None and use.no_grad is None):
            if module_id is not None and module_id not in log.called:
                found(NEVER_USED, f"module {module} was never called in this forward")
            else:
                holder = f"module {module}" if module else "the forward"
                found(NEVER_USED, f"{holder} ran but never read it")
            continue
        if use.grad is None:
            assert use.no_grad is not None
            at, in_module, mode = use.no_grad
            inside = f" (in {in_module})" if in_module else ""
            found(NO_GRAD, f"used only under torch.{mode}(){inside}", at)
            continue
        if claims is None:
            claims = Claims(plan, log)
        cut = claims.cuts.get(id(p))
        if cut is not None:
            of = f" ({cut.made_in})" if cut.made_in else ""
            found(CUT, f"cut by {cut.kind}{of} on the way to the loss", cut.where)
            continue
        output = claims.outputs.get(id(p))
        if output is not None:
            found(UNREACHED, f"{output[0]} never reaches the loss", output[1])
            continue
        at, in_module, _ = use.grad
        inside = f" (in {in_module})" if in_module else ""
        found(UNREACHED, f"what its last use made{inside} never reaches the loss", at)
    call.flow = flag_flow(
        FlowRow(m, math.sqrt(g2), math.sqrt(w2), n) for m, (g2, w2, n) in flow.items()
    )
    return call


def _no_gradient_from(plan: CallPlan, acc: int) -> tuple[str, Where | None]:
    for parent, slot in plan.parents[acc]:
        produced = plan.produced[parent]
        if produced is not None and produced[slot] is None:
            node = plan.nodes[parent]
            return f"{node.name()} returned no gradient for it", _where_made(node)
    return "its AccumulateGrad was on the graph but received no gradient", None


def zeros_born_at(plan: CallPlan, acc: int) -> tuple[str, Where | None]:
    """Where the gradient of the parameter at node ``acc`` became all zeros: the nearest node
    that received a non-zero gradient and gave it zeros (Note [Watching a backward call])."""
    seen = {acc}
    queue = deque([acc])
    passed_nonzero = False
    while queue:
        child = queue.popleft()
        if not plan.parents[child] and child != acc:
            return "the gradient given to the backward call is all zeros", None
        for parent, slot in plan.parents[child]:
            produced = plan.produced[parent]
            if produced is None:
                continue
            if produced[slot] is not None and bool(produced[slot]):
                passed_nonzero = True
                continue
            if plan.nonzero(plan.received[parent]):
                node = plan.nodes[parent]
                module = _module_made(node)
                inside = f" in {module}" if module else ""
                return (
                    f"every path to it multiplied by zero: the gradient became all zeros "
                    f"at {node.name()}{inside}",
                    _where_made(node),
                )
            if parent not in seen:
                seen.add(parent)
                queue.append(parent)
    if passed_nonzero:
        return "the gradients that reach it cancel out exactly", None
    return "every element of its gradient is exactly zero", None


class Claims:
    """Which cut, and which dropped module output, each unreached parameter is under (Note
    [The reasons, in order])."""

    def __init__(self, plan: CallPlan, log: ForwardLog) -> None:
        reached = set(plan.index)
        self.cuts: dict[int, Any] = {}
        self.outputs: dict[int, tuple[str, Where | None]] = {}
        seen = set(reached)
        for cut in sorted(log.cuts, key=lambda c: -c.order):
            if cut.leaf is not None:
                self.cuts.setdefault(cut.leaf, cut)
            elif cut.node is not None:
                for leaf in _leaves_under(cut.node, seen):
                    self.cuts.setdefault(leaf, cut)
        seen = set(reached)
        by_node: dict[int, list[Any]] = {}
        for output in log.outputs:
            by_node.setdefault(id(output.node), []).append(output)
        for output in sorted(log.outputs, key=lambda o: -o.order):
            if id(output.node) in seen:
                continue
            same = by_node[id(output.node)]
            inner, outer = same[0], same[-1]
            text = f"the output of {inner.module}"
            if outer.module != inner.module:
                text += f" (returned by {outer.module} as output {outer.index})"
            for leaf in _leaves_under(output.node, seen):
                self.outputs.setdefault(leaf, (text, inner.where))


def _leaves_under(node: Any, seen: set[int]) -> list[int]:
    """``id`` of the leaves whose ``AccumulateGrad`` is under ``node``, not through ``seen``."""
    found = []
    stack = [node]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        variable = getattr(fn, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(id(variable))
        stack.extend(child for child, _ in fn.next_functions if child is not None)
    return found
