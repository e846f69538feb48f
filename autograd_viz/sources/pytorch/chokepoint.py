"""Arming: routing every PyTorch backward call through the watcher.

Note [The chokepoint]
~~~~~~~~~~~~~~~~~~~~~
``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad``
all call ``torch.autograd.graph._engine_run_backward``, by the name
``torch.autograd`` imported it under, so both names are replaced (as
``torch/compiler/__init__.py`` does itself). The replacement reads
``engine.events.HUB.active`` first: with nobody listening it calls straight
through, and PyTorch runs exactly as unwatched. Not caught: direct
``Variable._execution_engine.run_backward`` calls, backward started from
C++, compiled autograd (let through with one warning).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.autograd
import torch.autograd.graph

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch import call_level, compiled, hooks, module_calls
from autograd_viz.sources.pytorch import watch as _watch
from autograd_viz.sources.pytorch.bookkeeping import forget_leftovers, forget_sums
from autograd_viz.sources.pytorch.graph import plan_graph_task, release
from autograd_viz.sources.pytorch.leaf_names import LeafNamer
from autograd_viz.sources.refcount import Refcount
from autograd_viz.sources.tracebacks import trim_traceback
from engine.activity import ACTIVITY
from engine.calls import CALLS
from engine.events import HUB

_ARGUMENTS = (
    "grad_tensors",
    "keep_graph",
    "create_graph",
    "inputs",
    "allow_unreachable",
    "accumulate_grad",
)
"""``run_backward``'s parameters after the root tensors, in order."""

_CALLING_THREAD = frozenset({"cpu", "meta"})
"""Devices whose nodes PyTorch runs on the thread that called backward."""

# Note [Device threads]
# ~~~~~~~~~~~~~~~~~~~~~
# PyTorch runs the nodes of a CUDA (or other accelerator) tensor on one
# engine thread per device, shared by every graph task, and the order
# between the calling thread's queue and the device queues depends on
# timing. The bridge follows a graph task on the thread that called
# backward (its hooks recognise their graph task there, and its model of the
# ready queue is that thread's), so while it watches a call with device
# nodes it turns PyTorch's multithreading off for that call (documented by
# PyTorch): every node then runs on the calling thread from one ready
# queue, in the order the model replays, and a live session can step it.
# The gradients are the same; what is lost is the overlap of CPU and GPU
# work during that one backward. One warning says so. With nobody
# listening, PyTorch keeps its threads.

hooks.install()  # before the program registers any (Note [Seeing the user's hooks])

_original: Callable[..., Any] | None = None
_patched: Callable[..., Any] | None = None


class TorchWatch:
    """The handle :func:`watch_torch` returns; :meth:`close` it (or leave a ``with``) to stop.

    Handles are counted: PyTorch is watched while any handle is open.
    """

    def __init__(self, release: Callable[[], None] | None) -> None:
        self.watching = release is not None
        """Whether this PyTorch's backward calls can be watched at all."""
        self._release = release  # a handle that armed nothing releases nothing

    def close(self) -> None:
        """Stop watching (once all open handles are closed); safe to call twice."""
        if self._release is not None:
            self._release()

    def __enter__(self) -> TorchWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if isinstance(exc[1], BaseException):  # Note [A traceback as without us]
            trim_traceback(exc[1])


def watch_torch() -> TorchWatch:
    """Turn every PyTorch backward call into a graph task of our event hub.

    While armed, each ``Tensor.backward``, ``torch.autograd.backward`` and
    ``torch.autograd.grad`` call made while somebody listens
    (``engine.events.HUB.active``: ``autograd_viz.record()``, a
    ``LiveSession``, ``engine.events.listen``) emits the same events our
    engine emits; with nobody listening, PyTorch runs untouched.

    Example:
        >>> with watch_torch(), autograd_viz.record() as trace:
        ...     loss.backward()

    Returns:
        A handle; ``close()`` it or use it in a ``with`` block. On a PyTorch
        without the chokepoint it warns once and watches nothing.
    """
    return TorchWatch(_torch.hold())


def _arm() -> bool:
    global _original, _patched
    original = getattr(torch.autograd.graph, "_engine_run_backward", None)
    if not callable(original):
        warn_once(
            f"autograd-viz: PyTorch {torch.__version__} has no "
            "torch.autograd.graph._engine_run_backward; its backward calls cannot be watched"
        )
        return False

    @functools.wraps(original)
    def watched_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if CALLS.watchers:  # before HUB.active: a watcher may listen for this call only
            return _run_counted(original, t_outputs, args, kwargs)
        if not HUB.active:
            return original(t_outputs, *args, **kwargs)
        return _run_watched(original, t_outputs, args, kwargs)

    _original, _patched = original, watched_run_backward
    compiled.install()  # Note [Compiled regions]
    compiled.hide_global_hooks_warning(True)
    module_calls.arm()
    torch.autograd.graph._engine_run_backward = watched_run_backward
    if getattr(torch.autograd, "_engine_run_backward", None) is original:
        torch.autograd._engine_run_backward = watched_run_backward
    return True


def _run_counted(original: Callable[..., Any], t_outputs: Any, args: Any, kwargs: Any) -> Any:
    """A backward call told to :data:`engine.calls.CALLS` (Note [Backward calls]).

    Only a call from outside any backward counts: a reentrant one (a
    checkpoint's) belongs to the call it runs in, and one traced into a graph
    while Dynamo or AOTAutograd compiles is none of the program's (Note
    [Backward calls that are traced]).
    """
    if _traced(t_outputs):
        return original(t_outputs, *args, **kwargs)
    counted = CALLS.start() if torch._C._current_graph_task_id() == -1 else None
    try:
        if not HUB.active or not wanted():  # Note [Calls no listener wants]
            return original(t_outputs, *args, **kwargs)
        return _run_watched(original, t_outputs, args, kwargs)
    finally:
        if counted is not None:
            CALLS.end(counted)


# Note [Calls no listener wants]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A recorder that keeps some calls but must listen between them (``nan
# --every``: the forward checks' findings are events in every call) would
# have every call it leaves out watched node by node and its events dropped:
# a hook pair per node, for nothing. So a listener may say which calls it
# wants: ``wants_call()``, asked on the thread that makes the call once the
# watchers of ``CALLS`` have been told of it (a reentrant call is asked
# inside the call it belongs to, and gets the same answer). A listener that
# only reacts to the others' events (the backward NaN checks) says
# ``follows_calls``: it wants what they want. A call that some listener
# declines and none wants runs as unwatched, at the cost of its gate; a
# listener with neither attribute (a live session, a plain recorder) wants
# every call, and so does a hub of followers alone.


def wanted() -> bool:
    """Whether a listener wants this thread's backward call watched (Note [Calls no listener
    wants])."""
    declined = False
    for listener in HUB.listeners:
        wants = getattr(listener, "wants_call", None)
        if wants is None:
            if not getattr(listener, "follows_calls", False):
                return True
        elif wants():
            return True
        else:
            declined = True
    return not declined


def _disarm() -> None:
    global _original, _patched
    if _original is None:
        return
    module_calls.disarm()
    forget_sums()
    compiled.hide_global_hooks_warning(False)
    # Put PyTorch's function back only where ours still is (another patch may sit on top).
    for module in (torch.autograd.graph, torch.autograd):
        if getattr(module, "_engine_run_backward", None) is _patched:
            module._engine_run_backward = _original  # type: ignore[attr-defined]
    _original = _patched = None


_torch = Refcount(_arm, _disarm)  # Note [Armed while held]


def _unwatchable(bound: dict[str, Any]) -> str | None:
    """Why this call cannot be watched, or ``None``."""
    compiled = sys.modules.get("torch._dynamo.compiled_autograd")
    if compiled is not None and getattr(compiled, "compiled_autograd_enabled", False):
        return "compiled autograd runs this backward"
    functorch = getattr(torch._C, "_functorch", None)
    if functorch is not None:
        for grad in bound["grad_tensors"] or ():
            if isinstance(grad, torch.Tensor) and (
                functorch.is_batchedtensor(grad) or functorch.is_legacy_batchedtensor(grad)
            ):
                return "a batched grad() (is_grads_batched=True) runs under vmap"
    return None


# Note [Backward calls that are traced]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torch.compile's AOTAutograd (the aot_eager and inductor backends), make_fx and
# torch.export trace a backward into a graph: the call runs on fake tensors
# under a proxy mode, computes nothing, and is not a backward of the program
# (the compiled code runs later, as CompiledFunctionBackward). It is let
# through unwatched and unsaid: recording it would add a graph task that never
# ran. A backward the program itself runs on fake or meta tensors, or inside a
# torch.func transform, is recorded without values (Note [Tensors without
# values] in summary.py), the latter with one line.


def _traced(t_outputs: Any) -> bool:
    """Whether this backward call is being traced into a graph, not run."""
    return torch._C._get_dispatch_mode(_PROXY) is not None


_PROXY = torch._C._TorchDispatchModeKey.PROXY
_is_functorch_wrapper = torch._C._functorch.is_functorch_wrapped_tensor


def _plain_values(t_outputs: Any) -> bool:
    """Whether the roots are plain tensors with values: else no gradient is copied or compared."""
    plain = True
    for t in t_outputs:
        if not isinstance(t, torch.Tensor):
            continue
        if _is_functorch_wrapper(t):
            warn_once(
                "autograd-viz: a backward call inside a torch.func transform (grad, vjp, "
                "jacrev) is recorded without values: its tensors are functorch wrappers"
            )
            return False
        if type(t) is not torch.Tensor or t.is_nested or t.device.type == "meta":
            plain = False
    return plain


def _edge(item: Any) -> tuple[Any, int] | None:
    """The ``(node, input_nr)`` a root stands for, as PyTorch's ``gradient_edge`` finds it."""
    if isinstance(item, torch.autograd.graph.GradientEdge):
        return item.node, item.output_nr
    if not isinstance(item, torch.Tensor) or not item.requires_grad:
        return None
    edge = torch.autograd.graph.get_gradient_edge(item)
    return edge.node, edge.output_nr


def _input_edge(item: Any) -> Any:
    if isinstance(item, torch.autograd.graph.GradientEdge):
        return item.node, item.output_nr
    if item.grad_fn is not None:
        return item.grad_fn, item.output_nr
    return item  # a leaf: its AccumulateGrad is looked up in the graph


def _run_watched(original: Callable[..., Any], t_outputs: Any, args: Any, kwargs: Any) -> Any:
    forget_leftovers()
    bound = dict(zip(_ARGUMENTS, args, strict=False))
    bound.update(kwargs)
    bound.setdefault("inputs", ())
    bound.setdefault("accumulate_grad", True)
    if _traced(t_outputs):
        return original(t_outputs, *args, **kwargs)  # Note [Backward calls that are traced]
    why = _unwatchable(bound)
    roots = [_edge(t) for t in t_outputs]
    if why is not None or any(r is None or r[0] is None for r in roots):
        if why is not None:
            warn_once(f"autograd-viz: cannot watch a backward call: {why}")
        return original(t_outputs, *args, **kwargs)  # PyTorch reports a bad root itself
    if call_level.observes_calls():  # Note [Observation levels] in autograd_viz/trace/records.py
        return call_level.run_call_level(
            original,
            t_outputs,
            args,
            kwargs,
            roots,  # type: ignore[arg-type]
            [_input_edge(i) for i in bound["inputs"] or ()],
            bound,
            LeafNamer(sys._getframe(2)),
        )
    plain = _plain_values(t_outputs)
    try:
        plan = plan_graph_task(
            roots,  # type: ignore[arg-type]
            [_input_edge(i) for i in bound["inputs"] or ()],
            bool(bound["accumulate_grad"]),
            LeafNamer(sys._getframe(2)),
            reuse=True,  # Note [Plans made again] in graph.py
        )
    except Exception as exc:  # noqa: BLE001 - never break the user's backward for a view
        warn_once(f"autograd-viz: cannot read this backward graph ({exc!r}); not watching it")
        return original(t_outputs, *args, **kwargs)
    # See Note [Device threads]
    single_thread = torch._C._is_multithreading_enabled() and any(
        node.device not in _CALLING_THREAD for node in plan.nodes
    )
    if single_thread:
        warn_once(
            "autograd-viz: this backward's device nodes run on the calling thread while it "
            "is watched (torch.autograd.set_multithreading_enabled(False)): the same "
            "results, in an order that can be followed, without CPU/GPU overlap"
        )
    keep_graph = bool(bound.get("keep_graph"))
    create_graph = bool(bound.get("create_graph"))
    watch = _watch.GraphTaskWatch(plan, keep_graph, create_graph, copies=plain)
    ACTIVITY.enter()
    try:
        watch.guarded(watch.start, list(bound["grad_tensors"]), threading.current_thread().name)
        if single_thread:
            with torch.autograd.set_multithreading_enabled(False):
                result = original(t_outputs, *args, **kwargs)
        else:
            result = original(t_outputs, *args, **kwargs)
    except BaseException as exc:
        watch.fail(exc)
        raise
    else:
        watch.guarded(watch.finish, result)
    finally:
        watch.close()  # every hook goes, whatever happened
        release(plan)
        ACTIVITY.leave()
    return result


# Note [Stepping PyTorch]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A live session releases one event at a time, and before each release waits
# until every thread working for an engine is paused or blocked (Note
# [Quiescence] in engine/activity.py). The thread that calls PyTorch's
# backward works for PyTorch's engine for the whole call, so it is counted
# inside (ACTIVITY.enter/leave); paused in a hook, it counts as blocked.
# With device nodes, multithreading is off for the call (Note [Device
# threads]), so no thread of PyTorch's runs a node the session cannot see.
