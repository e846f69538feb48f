r"""Why each parameter got no gradient in a PyTorch backward call, and how its gradients flowed.

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

Note [Which parameters]
~~~~~~~~~~~~~~~~~~~~~~~
After a call: the parameters of every module the forward ran from outside any
other module (a *root*: the model, its loss), and of every module the calling
code holds (its frames' variables) that holds a module that ran. The second
names parameters as the program knows them when it calls a model's parts
directly (``model.forward_features(x)`` runs ``patch_embed``, ``blocks``, ...
each as a root: ``cls_token`` is then ``cls_token``, not a bare parameter) and
adds a head it never called; a module the code holds whose parts did not run
(an EMA copy, another model) is left out. The held module with the most
parameters names them as ``named_parameters()`` does; another held module's
are prefixed with its variable (``value_head.weight``). ``nn.Parameter``\ s
used outside all of them are looked at too.

Note [Nested backward calls]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A reentrant checkpoint (``checkpoint(..., use_reentrant=True)``) runs its
forward under ``no_grad`` and a backward call of its own inside the outer one,
on a graph that exists only then: the parameters inside get their gradients
from that nested call, which the walk from the outer roots never sees. So each
parameter looked at also has a post-accumulate-grad hook for the call (it only
notes that ``.grad`` was added to); one the nested call reached got a gradient
and is no finding (its zeros are not read). Its flow is read from its ``.grad``
after the call when it had none before (``zero_grad()``'s default): that
``.grad`` is then the sum of what the call gave it. One that had a ``.grad``
already (accumulating over calls) is left out of the flow, and the table says
how many were: what this call added cannot be told from the sum without a copy.

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
from collections.abc import Callable
from typing import Any

import torch

from autograd_viz.grads.plan import (
    CallPlan,
    Flow,
    Stats,
    gradient_of,
    settled_before_the_call,
    settled_by_its_gradient,
)
from autograd_viz.grads.report import (
    CUT,
    NEVER_USED,
    NO_GRAD,
    UNREACHED,
    CallGrads,
    Finding,
    Where,
)
from autograd_viz.grads.torch_uses import ForwardLog, Root, UsesTracker, root_of, user_line
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.caller_line import call_from
from autograd_viz.sources.pytorch.origins import ORIGIN_KEY, Origin, user_frames

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


def _nonzero(g: Any) -> Any:
    try:
        return g.detach().any()
    except (RuntimeError, TypeError):  # a sparse or exotic gradient: counted as non-zero
        return True


def _squared_norm(g: Any) -> Any:
    try:
        return torch.linalg.vector_norm(g.detach(), dtype=torch.float64) ** 2
    except (RuntimeError, TypeError):
        return None


def _root_node(t: Any) -> Any:
    if not isinstance(t, torch.Tensor) or not t.requires_grad:
        return None
    return torch.autograd.graph.get_gradient_edge(t).node


TORCH_STATS = Stats(_root_node, _nonzero, _squared_norm, torch.no_grad, _where_made, _module_made)
"""How PyTorch's gradients and nodes are read."""


def plan_call(func: Any, args: Any, kwargs: dict[str, Any]) -> CallPlan:
    """The :class:`CallPlan` of a ``backward``, ``autograd.backward`` or ``grad`` call."""
    signature = _SIGNATURES.get(func)
    if signature is None:
        signature = _SIGNATURES[func] = inspect.signature(func)
    bound = signature.bind(*args, **kwargs).arguments
    kind = "grad" if func is torch.autograd.grad else "backward"
    roots = bound.get("self", bound.get("tensors", bound.get("outputs")))
    inputs = bound.get("inputs")
    return CallPlan(
        kind,
        [t for t in _as_list(roots) if isinstance(t, torch.Tensor)],
        None if inputs is None else _as_list(inputs),
        TORCH_STATS,
    )


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
        accumulated: set[int] = set()
        had_grad: set[int] = set()
        try:
            candidates = _candidates(self.tracker.log, *held_by_program(frame))
            plan: CallPlan | None = plan_call(func, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the call runs unwatched, and says so
            warn_once(f"autograd-viz grads: cannot read this backward call ({exc!r}); not checked")
            plan = None
        handles = []
        if plan is not None:
            handles = plan.hook() + _accumulation_hooks(candidates, accumulated, had_grad)
        try:
            out = call_from(frame, func, args, kwargs)
        finally:
            for handle in handles:
                handle.remove()
            log = self.tracker.new_log()
        if plan is not None:
            try:
                self._add(
                    explain(plan, log, out, index, where, candidates, (accumulated, had_grad))
                )
            except Exception as exc:  # noqa: BLE001 - watching goes on, and says so
                warn_once(f"autograd-viz grads: could not explain a backward call ({exc!r})")
        return out


def _accumulation_hooks(
    candidates: list[tuple[str, str | None, int | None, torch.Tensor]],
    accumulated: set[int],
    had_grad: set[int],
) -> list[Any]:
    """Note in ``accumulated`` each leaf parameter whose ``.grad`` gets added to, and in
    ``had_grad`` each that has a ``.grad`` before the call (Note [Nested backward calls])."""
    handles = []
    for *_, p in candidates:
        if p.requires_grad and p.grad_fn is None:
            if p.grad is not None:
                had_grad.add(id(p))
            handles.append(p.register_post_accumulate_grad_hook(_noting(accumulated)))
    return handles


def _noting(accumulated: set[int]) -> Callable[[Any], None]:
    def hook(p: Any) -> None:
        accumulated.add(id(p))

    # Ours, not the program's: a recording of the same run does not list it on the leaf.
    hook._autograd_viz_watcher = True  # type: ignore[attr-defined]  # WATCHERS_OWN
    return hook


def held_by_program(
    frame: Any, frames: int = 8
) -> tuple[list[tuple[str, torch.nn.Module]], dict[int, str]]:
    """What the calling code holds in its frames' variables, the innermost frame's name
    first: its modules (Note [Which parameters]) and, by ``id``, its parameters' variables
    (a bare parameter is named by its variable, ``temperature``, as a module's are by their
    path)."""
    modules: dict[int, tuple[str, torch.nn.Module]] = {}
    parameters: dict[int, str] = {}
    for depth, user in enumerate(user_frames(frame)):
        if depth >= frames:
            break
        for scope in (user.f_locals, user.f_globals):
            for variable, value in list(scope.items()):
                if isinstance(value, torch.nn.Parameter):
                    parameters.setdefault(id(value), variable)
                elif isinstance(value, torch.nn.Module):
                    modules.setdefault(id(value), (variable, value))
    return list(modules.values()), parameters


def _candidates(
    log: ForwardLog,
    held: list[tuple[str, torch.nn.Module]],
    variables: dict[int, str],
) -> list[tuple[str, str | None, int | None, torch.Tensor]]:
    """``(name, module, module id, parameter)`` of every parameter looked at (Note [Which
    parameters]); ``variables``: the names the program holds bare parameters by."""
    ran = set(log.called)
    covering = []
    for variable, held_module in held:
        root = root_of(held_module)
        if ran.intersection(root.paths):
            covering.append((variable, root))
    covering.sort(key=lambda vr: -len(vr[1].parameters))
    named: list[tuple[str, Root]] = [
        ("" if i == 0 else f"{variable}.", root) for i, (variable, root) in enumerate(covering)
    ]
    covered = {i for _, root in named for i in root.paths}
    named += [("", root) for key, root in log.roots.items() if key not in covered]
    seen: set[int] = set()
    found: list[tuple[str, str | None, int | None, torch.Tensor]] = []
    for prefix, root in named:
        for name, module, module_id, p in root.parameters:
            if id(p) not in seen:
                seen.add(id(p))
                path = f"{prefix}{module}" if prefix and module else module
                found.append((f"{prefix}{name}", path, module_id, p))
    names = {name for name, *_ in found}
    for ref in list(log.bare.values()):
        bare = ref()
        if bare is not None and id(bare) not in seen:
            seen.add(id(bare))
            name = variables.get(id(bare)) or f"Parameter{tuple(bare.shape)}"
            numbered, count = name, 1
            while numbered in names:  # two parameters never share a name in the report
                count += 1
                numbered = f"{name}#{count}"
            names.add(numbered)
            found.append((numbered, None, None, bare))
    return found


def explain(
    plan: CallPlan,
    log: ForwardLog,
    out: Any,
    index: int,
    where: Where | None,
    candidates: list[tuple[str, str | None, int | None, torch.Tensor]],
    nested: tuple[set[int], set[int]],
) -> CallGrads:
    """What the call gave each parameter of the modules its forward ran (Note [The reasons,
    in order]); ``nested``: the parameters whose ``.grad`` the call added to, a nested
    backward's included, and those that had a ``.grad`` before it (Note [Nested backward
    calls])."""
    accumulated, had_grad = nested
    call = CallGrads(index, plan.kind, where)
    call.parameters = len(candidates)
    inputs = None if plan.inputs is None else {id(t): j for j, t in enumerate(plan.inputs)}
    grads = _as_list(out) if plan.kind == "grad" else None
    claims: Claims | None = None
    flow = Flow()
    api = "torch.autograd.grad(...)" if plan.kind == "grad" else "backward(inputs=...)"
    for name, module, module_id, p in candidates:
        shape = tuple(p.shape)

        def found(reason: str, why: str, at: Where | None = None) -> None:
            call.findings.append(Finding(name, module, shape, reason, why, at))  # noqa: B023

        if settled_before_the_call(found, p.requires_grad, id(p), inputs, api, where):
            continue
        got, nonzero, acc, norm2 = gradient_of(
            plan, id(p), grads, inputs, lambda g: bool(g.detach().any())
        )
        nested_only = not got and id(p) in accumulated  # only a nested backward reached it
        if nested_only:
            if id(p) in had_grad or p.grad is None:
                call.flow_left_out += 1
            else:
                norm2 = _squared_norm(p.grad)
        if norm2 is not None:
            weights = float(torch.linalg.vector_norm(p.detach(), dtype=torch.float64)) ** 2
            flow.add(module or name, float(norm2), weights)
        if nested_only:
            continue  # it got a gradient: no finding
        if settled_by_its_gradient(plan, found, got, nonzero, acc):
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
            at, _, mode = use.no_grad
            found(NO_GRAD, f"used only under torch.{mode}()", at)
            continue
        if claims is None:
            claims = Claims(plan, log)
        cut = claims.cuts.get(id(p))
        if cut is not None:
            of = f" ({cut.made_in})" if cut.made_in else ""
            gives = f": it gives {cut.result}, which carry no gradient" if cut.result else ""
            found(CUT, f"cut by {cut.kind}{of} on the way to the loss{gives}", cut.where)
            continue
        output = claims.outputs.get(id(p))
        if output is not None:
            found(UNREACHED, f"{output[0]} never reaches the loss", output[1])
            continue
        at, in_module = use.grad
        inside = f" (in {in_module})" if in_module else ""
        found(UNREACHED, f"what its last use made{inside} never reaches the loss", at)
    call.flow = flow.rows()
    return call


class Claims:
    """Which cut, and which dropped module output, each unreached parameter is under (Note
    [The reasons, in order])."""

    def __init__(self, plan: CallPlan, log: ForwardLog) -> None:
        reached = set(plan.index)
        self.cuts: dict[int, Any] = {}
        self.outputs: dict[int, tuple[str, Where | None]] = {}
        seen = set(reached)
        for cut in sorted(log.cuts, key=lambda c: -c.order):
            node = cut.node
            if cut.leaf is not None:
                self.cuts.setdefault(cut.leaf, cut)
            elif node is not None:
                for leaf in _leaves_under(node, seen):
                    self.cuts.setdefault(leaf, cut)
        seen = set(reached)
        by_node: dict[int, list[Any]] = {}
        alive = []
        for output in log.outputs:
            node = output.node
            if node is not None:
                by_node.setdefault(id(node), []).append(output)
                alive.append((output, node))
        for _, node in sorted(alive, key=lambda on: -on[0].order):
            if id(node) in seen:
                continue
            same = by_node[id(node)]  # inner module first, outer ones after
            inner, outer = same[0], same[-1]
            text = f"the output of {inner.module}"
            if outer.module != inner.module:
                text += f" (returned by {outer.module} as output {outer.index})"
            for leaf in _leaves_under(node, seen):
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
