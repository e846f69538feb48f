"""``watch_grads`` on our engine: why a leaf got no gradient in a backward call.

:class:`EngineGrads` wraps ``engine.backward`` and ``engine.grad`` (which
``Tensor.backward`` calls) and the methods that cut a tensor from its graph
(``detach``, ``detach_``, ``item``, ``tolist``, ``numpy``, ``float()``,
``int()``, ``np.asarray``) while the watch lasts; each wrapper calls the
engine's own function unchanged. A backward call is walked and hooked as on
PyTorch (:class:`~autograd_viz.grads.plan.CallPlan`), and explained when it ends.

Note [Leaves on our engine]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Our engine has no modules to list a model's parameters, and no function mode
to see each op. The leaves looked at are those the calling code holds when it
calls backward (the local and global variables of its frames, and the lists,
tuples and dicts in them, one level deep) that require grad or have a
``name`` (a named leaf that does not require grad is *frozen*), named by their
``name`` or else the variable that holds them; the module of a leaf is its
name up to the last dot (``mlp.out`` for ``mlp.out.weight``). Without each op
seen, a leaf off the call's graph and under no cut is said to be *not on the
graph*: never used with grad, used only under ``no_grad``, or dropped before
the loss; PyTorch programs get the finer reasons. Cuts, pruning and exact
zeros are found as on PyTorch; the node where zeros began has a line when the
program runs under ``detect_anomaly`` (its forward stack), and a scope always.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import engine
import engine.autograd
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
    NOT_ON_GRAPH,
    CallGrads,
    Finding,
    Where,
)
from autograd_viz.sources.once import warn_once

_CUTS = {
    "detach": ".detach()",
    "detach_": ".detach_()",
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "__float__": "float()",
    "__int__": "int()",
    "__array__": "a NumPy array (np.asarray)",
}
"""The engine's ``Tensor`` methods that cut a tensor from its graph, with their words."""

_NOT_USER = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (engine.__file__, sys.modules["autograd_viz"].__file__ or "")
)
_FRAME = re.compile(r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.*)')


def _user_frames(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        name = frame.f_code.co_filename
        ours = name.startswith("<") or name.endswith("runpy.py")
        if not ours and not os.path.abspath(name).startswith(_NOT_USER):
            yield frame
        frame = frame.f_back


def _user_line(frame: FrameType | None) -> Where | None:
    found = next(_user_frames(frame), None)
    if found is None:
        return None
    return Where(found.f_code.co_filename, found.f_lineno, found.f_code.co_name)


def _where_made(node: Any) -> Where | None:
    """The last frame of the node's forward stack (kept under ``detect_anomaly``)."""
    stack = node.metadata.get("traceback_") or ()
    for entry in reversed(stack):
        match = _FRAME.match(entry)
        if match:
            return Where(match["file"], int(match["line"]), match["function"].strip())
    return None


def _module_made(node: Any) -> str | None:
    scopes = engine.scopes.node_scope(node)
    return scopes[-1][0] if scopes else None


def _root_node(t: Any) -> Any:
    if not isinstance(t, engine.Tensor) or not t.requires_grad:
        return None
    return t.grad_fn if t.grad_fn is not None else t.gradient_edge().function


def _squared_norm(g: Any) -> Any:
    data = abs(g.data).astype("float64")
    return (data * data).sum()


ENGINE_STATS = Stats(
    _root_node,
    lambda g: g.data.any(),
    _squared_norm,
    engine.no_grad,
    _where_made,
    _module_made,
)
"""How our engine's gradients and nodes are read."""


@dataclass
class _Cut:
    kind: str
    where: Where | None
    node: Any
    leaf: int | None
    made_in: str | None


class EngineGrads:
    """Explains every backward call of our engine on the thread that arms it.

    Args:
        add: called with each call's :class:`CallGrads`.
    """

    def __init__(self, add: Callable[[CallGrads], None]) -> None:
        self._add = add
        self._owner = threading.get_ident()
        self._calls = itertools.count()
        self._depth = 0
        self._cuts: list[_Cut] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def arm(self) -> None:
        """Wrap the engine's backward calls and cuts (each wrapper calls the original)."""
        self._wrap(engine.autograd, "backward", self._backward_wrapper(engine.autograd.backward))
        self._wrap(engine.autograd, "grad", self._backward_wrapper(engine.autograd.grad))
        for name in ("backward", "grad"):
            if name in vars(engine):  # already read through the package: its copy too
                self._wrap(engine, name, getattr(engine.autograd, name))
        for method, kind in _CUTS.items():
            original = vars(engine.Tensor).get(method)
            if original is not None:
                self._wrap(engine.Tensor, method, self._cut_wrapper(original, kind))

    def disarm(self) -> None:
        """Put every wrapped function back."""
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    def _wrap(self, owner: Any, name: str, wrapper: Any) -> None:
        self._saved.append((owner, name, vars(owner)[name]))
        setattr(owner, name, wrapper)

    def _cut_wrapper(self, original: Any, kind: str) -> Any:
        grads = self

        def cut(self: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == grads._owner and self.requires_grad:
                grads._note_cut(kind, self)
            return original(self, *args, **kwargs)

        cut.__name__ = cut.__qualname__ = getattr(original, "__name__", kind)
        cut.__doc__ = original.__doc__
        return cut

    def _note_cut(self, kind: str, t: Any) -> None:
        node = t.grad_fn
        made_in = None
        if node is not None:
            module = _module_made(node)
            made_in = f"made in {module}" if module else None
        leaf = id(t) if node is None else None
        self._cuts.append(_Cut(kind, _user_line(sys._getframe(2)), node, leaf, made_in))
        if len(self._cuts) > 4096:  # Note [What a forward log holds], as on PyTorch
            del self._cuts[:1024]

    def _backward_wrapper(self, original: Any) -> Any:
        grads = self
        kind = "grad" if original is engine.autograd.grad else "backward"

        def call(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != grads._owner or grads._depth:
                return original(tensors, *args, **kwargs)
            return grads.run(original, kind, tensors, args, kwargs)

        call.__name__ = call.__qualname__ = original.__name__
        call.__doc__ = original.__doc__
        return call

    def run(self, original: Any, kind: str, tensors: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """One backward call, hooked, then explained."""
        caller = sys._getframe(2)
        where = _user_line(caller)
        index = next(self._calls)
        inputs = kwargs.get("inputs", args[0] if kind == "grad" and args else None)
        if kind == "backward" and inputs is None and len(args) >= 4:
            inputs = args[3]
        try:
            plan: CallPlan | None = CallPlan(kind, _as_list(tensors), _listed(inputs), ENGINE_STATS)
            held = _held_leaves(caller)
        except Exception as exc:  # noqa: BLE001 - the call runs unwatched, and says so
            warn_once(f"autograd-viz grads: cannot read this backward call ({exc!r}); not checked")
            plan = None
        handles = plan.hook() if plan is not None else []
        self._depth += 1
        try:
            out = original(tensors, *args, **kwargs)
        finally:
            self._depth -= 1
            for handle in handles:
                handle.remove()
            cuts, self._cuts = self._cuts, []
        if plan is not None:
            try:
                self._add(explain_engine(plan, held, cuts, out, index, where))
            except Exception as exc:  # noqa: BLE001 - watching goes on, and says so
                warn_once(f"autograd-viz grads: could not explain a backward call ({exc!r})")
        return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, engine.Tensor):
        return [value]
    return list(value)


def _listed(value: Any) -> list[Any] | None:
    return None if value is None else _as_list(value)


def _held_leaves(frame: FrameType | None, frames: int = 8) -> dict[int, tuple[str, Any]]:
    """The leaves the calling code holds (Note [Leaves on our engine]), by ``id``."""
    found: dict[int, tuple[str, Any]] = {}

    def note(label: str, value: Any) -> None:
        leaf = isinstance(value, engine.Tensor) and value.grad_fn is None
        if leaf and id(value) not in found and (value.requires_grad or value.name is not None):
            found[id(value)] = (value.name or label, value)

    for depth, user in enumerate(_user_frames(frame)):
        if depth >= frames:
            break
        for scope in (user.f_locals, user.f_globals):
            for variable, value in list(scope.items()):
                note(variable, value)
                if isinstance(value, list | tuple):
                    for i, item in enumerate(value[:1024]):
                        note(f"{variable}[{i}]", item)
                elif isinstance(value, dict):
                    for key, item in list(value.items())[:1024]:
                        note(f"{variable}[{key!r}]", item)
    return found


def explain_engine(
    plan: CallPlan,
    held: dict[int, tuple[str, Any]],
    cuts: list[_Cut],
    out: Any,
    index: int,
    where: Where | None,
) -> CallGrads:
    """What the call gave each leaf the calling code holds and each leaf on its graph."""
    call = CallGrads(index, plan.kind, where)
    leaves = dict(held)
    for leaf, _ in plan.leaf_nodes():
        leaves.setdefault(id(leaf), (leaf.name or f"leaf{tuple(leaf.shape)}", leaf))
    call.parameters = len(leaves)
    inputs = None if plan.inputs is None else {id(t): j for j, t in enumerate(plan.inputs)}
    grads = _as_list(out) if plan.kind == "grad" else None
    claimed: dict[int, _Cut] | None = None
    flow = Flow()
    api = "engine.grad(...)" if plan.kind == "grad" else "backward(inputs=...)"
    for name, t in leaves.values():
        module = name.rpartition(".")[0] or None
        shape = tuple(t.shape)

        def found(reason: str, why: str, at: Where | None = None) -> None:
            call.findings.append(Finding(name, module, shape, reason, why, at))  # noqa: B023

        if settled_before_the_call(found, t.requires_grad, id(t), inputs, api, where):
            continue
        got, nonzero, acc, norm2 = gradient_of(
            plan, id(t), grads, inputs, lambda g: bool(g.data.any())
        )
        if norm2 is not None:
            flow.add(module or name, norm2, float(_squared_norm(t)))
        if settled_by_its_gradient(plan, found, got, nonzero, acc):
            continue
        if claimed is None:
            claimed = _claim(plan, cuts)
        cut = claimed.get(id(t))
        if cut is not None:
            of = f" ({cut.made_in})" if cut.made_in else ""
            found(CUT, f"cut by {cut.kind}{of} on the way to the loss", cut.where)
            continue
        found(
            NOT_ON_GRAPH,
            "never used with grad in this forward, used only under no_grad, or what it made "
            "never reaches the loss",
        )
    call.flow = flow.rows()
    return call


def _claim(plan: CallPlan, cuts: list[_Cut]) -> dict[int, _Cut]:
    """The latest cut each leaf off the graph is under (walks stop at the call's graph)."""
    seen = set(plan.index)
    claimed: dict[int, _Cut] = {}
    for cut in reversed(cuts):
        if cut.leaf is not None:
            claimed.setdefault(cut.leaf, cut)
            continue
        stack = [cut.node]
        while stack:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            variable = getattr(node, "variable", None)
            if variable is not None:
                claimed.setdefault(id(variable), cut)
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return claimed
