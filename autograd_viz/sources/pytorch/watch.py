"""Watching one PyTorch backward call (a graph task) and emitting our engine's events.

Observed through hooks on every node that runs: ``node_start`` (a
pre-hook), ``node_end`` (a post hook), the accumulation into a leaf's
``.grad`` (``AccumulateGrad``'s post hook), errors and the call's end.
What PyTorch does unseen between two nodes is replayed by
:class:`~autograd_viz.sources.pytorch.bookkeeping.Bookkeeping` and marked as
derived.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch

from autograd_viz.sources.deferred import settle_waiting
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.bookkeeping import Bookkeeping
from autograd_viz.sources.pytorch.emitter import Emitter, nones
from autograd_viz.sources.pytorch.graph import GraphPlan
from autograd_viz.sources.pytorch.held import holds_inputs, holds_outputs
from autograd_viz.sources.pytorch.hooks import (
    MODULE_FULL_BACKWARD,
    MODULE_FULL_BACKWARD_PRE,
    POST_ACCUMULATE_GRAD,
    TENSOR_PRE,
    UserHook,
    keyed_hooks,
    remove_keyed,
)
from autograd_viz.sources.pytorch.node import TorchNode
from autograd_viz.sources.pytorch.summary import vouch
from autograd_viz.trace.summary import TensorSummary
from engine.events import HUB
from engine.graph_task import new_graph_task_id

# Note [Whose hook fires]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# A node can be in several graph tasks at once: a parameter's AccumulateGrad
# is a leaf of the graph that calls a reentrant checkpoint and of the graph
# the checkpoint runs inside it, and of the graphs of other threads that
# share the model. Each watch hooks it, and every hook fires whenever the
# node runs. PyTorch runs a graph task's nodes on the thread that called
# backward (Note [Device threads]), nested graph tasks innermost first, so
# the graph task running a node is the innermost one watched on the thread
# where the hook fires; the other watches' hooks let it pass. A hook that
# fires while nobody listens turns its watch off for the rest of the call:
# the replayed bookkeeping missed a step and would only report mismatches.

# Note [One hook per node]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# A post hook receives a node's inputs as well as its outputs (PyTorch's
# ``call_function`` keeps the inputs for it), so a node whose start nobody
# needs to see as it happens is watched by its post hook alone: half the
# hooks to register, call and remove, PyTorch's cost of calling into Python
# the most of it. That is so when every listener takes its events in batches
# (recorders, Note [Batched events]): no live session waits at the node's
# start. The post hook then emits the node's start and its end together, the
# start timed when the watch's previous hook returned (so a node's span also
# holds the engine's work just before it), and pops the model queue there
# (Note [Checking what is derived]). Both hooks are kept where the start
# itself must be seen: an ``AccumulateGrad`` (whether the leaf had a
# ``.grad`` before), a node with the user's hooks (what they changed), a
# custom Function (the user's code, which may start a reentrant backward or
# raise). A plain node that raises has no start seen: the node running is
# the one the model queue predicts (:meth:`GraphTaskWatch.running_node`),
# and the error's node start is derived (:meth:`GraphTaskWatch._emit_unseen_start`).
# The choice is made when the call starts: a listener that subscribes during
# it (Note [Batched events]) gets a plain node's start after the node ran,
# until the call ends. The post hook is the node's ``TorchNode`` itself
# (``__call__``), not a closure: a closure is four objects the cyclic
# collector follows (the function, its cells and their tuple), and whatever
# is alive when a young collection runs moves to the oldest generation,
# whose collections walk every object of the process; on a GRUCell ×20 that
# was a fifth of what a recorded call handed the collector (``python -m
# benchmarks.torch_bridge --collector``). The node's ``watch`` is cleared
# when the call ends, so no cycle keeps the plan for the collector.


class _ThreadStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[GraphTaskWatch] = []


_LOCAL = _ThreadStack()
"""The watched graph tasks each thread is running, outermost first."""


def current_watch() -> GraphTaskWatch | None:
    """The innermost watched graph task this thread is running, if any."""
    stack = _LOCAL.stack
    return stack[-1] if stack else None


class GraphTaskWatch:
    """One watched backward call: its hooks, its model of PyTorch's bookkeeping, its events.

    Args:
        plan: the graph and PyTorch's bookkeeping for it.
        keep_graph: ``retain_graph``.
        create_graph: ``create_graph``.
        copies: follow input-buffer sums by copy and check them (plain tensors
            only: Note [Tensors without values] in ``summary.py``).
    """

    def __init__(
        self, plan: GraphPlan, keep_graph: bool, create_graph: bool, copies: bool = True
    ) -> None:
        parent = current_watch()
        self.id = new_graph_task_id()
        """Our graph task id (from our engine's counter: ids never collide)."""
        self.plan = plan
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        if parent is not None:
            self.parent: int | None = parent.id
            self.depth: int = parent.depth + 1
        else:  # a call from inside an unwatched graph task is reentrant too
            self.parent = None
            self.depth = 0 if torch._C._current_graph_task_id() == -1 else 1
        self._parent_watch = parent
        self.emit = Emitter(self.id)
        """How this graph task's events are emitted."""
        # Below the tier "all" no sum is followed by copy: its values would not be kept.
        copies = copies and self.emit.keep_all
        self.derived = Bookkeeping(plan, self.id, self.depth, self.emit, copies)
        """The replay of PyTorch's bookkeeping between nodes."""
        self._running: list[TorchNode] = []
        self._had_grad: dict[TorchNode, bool] = {}
        self._handles: list[Any] = []
        self._module_inputs: dict[TorchNode, list[Any]] = {}
        self._module_summaries: dict[TorchNode, Any] = {}
        self._live = True
        self._one_hook = self.emit.max_values is not None
        """Plain nodes are watched by their post hook alone (Note [One hook per node])."""
        self._last = 0
        """When this watch's last hook returned (a node start seen by its post hook)."""
        self._root_inputs: dict[int, Any] = {}
        """The root's input slot and the root gradient's summary, with one root."""

    # -- the call --------------------------------------------------------------------
    def start(self, root_grads: list[torch.Tensor | None], thread: str) -> None:
        """Hook every node that runs, emit ``graph_task_start`` and seed the root."""
        if self._parent_watch is not None:
            self._parent_watch.emit.flush()  # its events come first (Note [Batched events])
        _LOCAL.stack.append(self)
        plan = self.plan
        in_task = plan.dependencies.keys() | {plan.root}
        with keyed_hooks(self):  # Note [Keyed hooks] in hooks.py
            for node in plan.nodes:
                if node.fn is not None and node in plan.needed and node in in_task:
                    self._hook(node)
        summaries = self.emit.summaries_if(self.emit.keep_leaves, root_grads)
        if HUB.active:
            HUB.emit_data(
                "graph_task_start", "cpu", self.id, plan.root, self._start_data(summaries, thread)
            )
            if self.depth:
                self.emit(
                    "reentrant_enter",
                    None,
                    {
                        "parent_graph_task": self.parent,
                        "depth": self.depth,
                        "current_depth": len(_LOCAL.stack) - 1,
                        "on_pool": False,
                    },
                )
        root, derived = plan.root, self.derived
        if root.fn is not None and root_grads[0] is not None:
            # One root: PyTorch seeds its input buffer with the root gradient.
            derived.keep_copy(root, plan.roots[0][1], root_grads[0])
            self._root_inputs = {plan.roots[0][1]: summaries[0]}
        derived.push(root, "root")
        if root.fn is None:  # PyTorch's GraphRoot is popped first, unseen
            derived.advance(root)
            if derived.runs(root):
                derived.run_graph_root(root_grads, summaries)
        self._last = self.emit.clock()

    def finish(self, result: Any) -> None:
        """The call returned: play what is left in the model queue and emit the end."""
        if not HUB.active:
            return
        results = list(result) if result is not None else []
        if self._live:  # else the replay missed steps: checking it would only cry wolf
            self.derived.drain()
            self.derived.check_results(results)
        self.emit(
            "graph_task_end",
            None,
            {
                "status": "ok",
                "exc_type": None,
                "message": None,
                "captured": self.emit.summaries_if(self.emit.keep_leaves, results),
            },
        )
        if self.depth:
            self._emit_exit(ok=True)

    def running_node(self) -> TorchNode | None:
        """The node running on this graph task's thread now (inside its hooks), if any.

        A node watched by its post hook alone is the one the model queue
        predicts (Note [One hook per node]).
        """
        if self._running:
            return self._running[-1]
        return self.derived.peek() if self._one_hook else None

    def fail(self, exc: BaseException) -> None:
        """The call raised: the node that was running failed, and so did the graph task."""
        node = self.running_node()
        unseen = not self._running and node is not None  # Note [One hook per node]
        self.derived.finished = True
        if not HUB.active:
            return
        stack = None
        if node is not None and node.fn is not None:
            raw = node.fn.metadata.get("traceback_")
            stack = None if raw is None else tuple([str(line) for line in raw])
        try:
            if unseen:
                self._emit_unseen_start(node)  # type: ignore[arg-type]
            self.emit(
                "error",
                node,
                {
                    "exc_type": type(exc).__name__,
                    "message": str(exc),
                    "first": True,
                    "traceback": stack,
                },
            )
            self.emit(
                "graph_task_end",
                None,
                {
                    "status": "error",
                    "exc_type": type(exc).__name__,
                    "message": str(exc),
                    "captured": (None,) * sum(len(c) for c in self.plan.captures.values()),
                },
            )
            if self.depth:
                self._emit_exit(ok=False)
        except BaseException:  # noqa: BLE001
            pass  # the call already fails with its own error; a listener cancelling changes nothing

    def close(self) -> None:
        """Remove every hook (also after errors and with ``retain_graph``) and forget the state."""
        try:
            for handle in self._handles:
                remove_keyed(handle, self)
        finally:
            self._handles.clear()
            for node in self.plan.nodes:
                node.watch = None  # no cycle through the nodes: the plan goes with the call
            with contextlib.suppress(Exception):  # as fail(): the call has its own outcome
                self.emit.flush()  # the rows built, the end included, go to the recorders
            self.derived.release()
            stack = _LOCAL.stack
            if stack and stack[-1] is self:
                stack.pop()
            # The summaries listeners deferred during the call are settled at once
            # (Note [Deferred summaries]); a block that fails is summarized a tensor at a time
            # (Note [Held gradients]).
            with contextlib.suppress(Exception):
                settle_waiting()

    def guarded(self, step: Callable[..., None], *args: Any) -> None:
        """Run one step of the watch; a failure of the watch itself never fails the backward.

        An exception a listener means for the engine (``_engine_propagate``,
        such as a live session's cancel) and ``KeyboardInterrupt`` go on into
        PyTorch, which fails the call with them. Anything else stops this
        watch, with one warning, and PyTorch goes on unwatched.
        """
        try:
            step(*args)
        except Exception as exc:  # noqa: BLE001 - _stop raises what is meant for PyTorch
            self._stop(exc)

    def _stop(self, exc: Exception) -> None:
        """A step of the watch failed: stop watching, or fail the backward (:meth:`guarded`)."""
        if getattr(exc, "_engine_propagate", False):
            raise exc
        self._live = False
        warn_once(f"autograd-viz: stopped watching a backward call after {exc!r}")

    # -- observed ----------------------------------------------------------------------
    def _hook(self, node: TorchNode) -> None:
        watch = self

        def observe(step: Callable[[TorchNode, Any], None]) -> Callable[..., None]:
            # See Note [Whose hook fires]; the step is guarded() inline (a hook runs per node).
            def hook(values: tuple[Any, ...], *_: Any) -> None:
                stack = _LOCAL.stack
                if watch._live and stack and stack[-1] is watch:
                    if HUB.active:
                        try:
                            step(node, values)
                        except Exception as exc:  # noqa: BLE001 - as in guarded()
                            watch._stop(exc)
                    else:
                        watch._live = False

            return hook

        fn = node.fn
        if (
            self._one_hook
            and node.variable is None
            and not node.hooks
            and not isinstance(fn, _CUSTOM)
        ):
            # See Note [One hook per node]: the post hook gets the outputs, then the inputs.
            node.watch = self
            self._handles.append(fn.register_hook(node))
            return
        # A pre-hook gets the node's inputs; a post hook its outputs, then its inputs.
        self._handles.append(fn.register_prehook(observe(self._node_start)))
        self._handles.append(fn.register_hook(observe(self._node_end)))

    def ran(self, node: TorchNode, outputs: tuple[Any, ...], inputs: tuple[Any, ...]) -> None:
        """A plain node's post hook (Note [One hook per node]); see Note [Whose hook fires]."""
        stack = _LOCAL.stack
        if self._live and stack and stack[-1] is self:
            if HUB.active:
                try:
                    self._node_ran(node, inputs, outputs)
                except Exception as exc:  # noqa: BLE001 - as in guarded()
                    self._stop(exc)
            else:
                self._live = False

    def _node_start(self, node: TorchNode, grads: tuple[torch.Tensor | None, ...]) -> None:
        self._running.append(node)
        derived = self.derived
        derived.advance(node)
        inputs = grads
        before: dict[int, tuple[torch.Tensor | None, bool]] = {}
        same: dict[int, torch.Tensor] = {}
        if node in derived.followed:
            for slot, index in self.plan.captures.get(node, ()):
                derived.capture(node, slot, index)
            same = derived.check_buffer(node, grads, before)
            if same:  # summarized already, as the buffer's total: the same summary
                inputs = tuple([same.get(slot, grad) for slot, grad in enumerate(grads)])
        variable = node.variable
        if variable is not None:
            self._had_grad[node] = variable.grad is not None
        emit = self.emit
        if HUB.active:
            keep = emit.keeps(node)
            summaries = emit.summaries_if(
                keep, inputs, holds_inputs(node, self.plan.fan_in) if keep else ()
            )
            if same and keep and emit.max_values is not None:
                for slot in same:  # compared bit for bit: what PyTorch summed, summarized
                    vouch(grads[slot], summaries[slot], emit.max_values)
            if node.hooks:
                self._tensor_hooks(node, grads, summaries, before)
            emit("node_start", node, {"inputs": summaries})

    def _node_ran(
        self,
        node: TorchNode,
        grads: tuple[torch.Tensor | None, ...],
        outputs: tuple[Any, ...],
    ) -> None:
        """A plain node ran, seen by its post hook alone (Note [One hook per node])."""
        derived = self.derived
        derived.advance(node)
        inputs = grads
        if node in derived.followed:
            for slot, index in self.plan.captures.get(node, ()):
                derived.capture(node, slot, index)
            same = derived.check_buffer(node, grads, {})
            if same:  # summarized already, as the buffer's total: the same summary
                inputs = tuple([same.get(slot, grad) for slot, grad in enumerate(grads)])
        emit = self.emit
        if emit.keep_all:
            fan_in = self.plan.fan_in
            started = emit.summaries(inputs, holds_inputs(node, fan_in))
            ended = emit.summaries(outputs, holds_outputs(node, fan_in))
        else:
            started = nones(len(inputs))
            ended = nones(len(outputs))
        emit.at("node_start", node, {"inputs": started}, self._last)
        emit("node_end", node, {"outputs": ended})
        if _is_anomaly_enabled() and _anomaly_rejects(outputs):
            self._running.append(node)  # see _node_end
            return
        derived.pass_outputs(node, outputs, ended)
        self._last = emit.clock()

    def _emit_unseen_start(self, node: TorchNode) -> None:
        """The start of a node that failed before its post hook (Note [One hook per node]).

        Its inputs are what the derived events delivered to its buffer (the
        summaries of the gradients, or of their sums, each followed by copy and
        compared bit for bit), the root gradient at the root; a slot whose
        events were handed on already is described by the graph, without values.
        """
        slots = node.inputs or ()
        if not self.emit.keep_all:
            inputs: Any = nones(len(slots))
        else:
            delivered: dict[int, Any] = dict(self._root_inputs) if node is self.plan.root else {}
            emit = self.emit
            for row, data in zip(reversed(emit.rows), reversed(emit.data), strict=True):
                if row[0] == "accumulate" and row[6] == node._id:
                    delivered.setdefault(data["slot"], data.get("total", data["grad"]))
            inputs = tuple(
                [delivered.get(i) or TensorSummary(*slot) for i, slot in enumerate(slots)]
            )
        self.emit.at("node_start", node, {"inputs": inputs, "derived": True}, self._last)

    def _node_end(self, node: TorchNode, outputs: tuple[Any, ...]) -> None:
        running = self._running
        if running and running[-1] is node:
            running.pop()
        emit = self.emit
        variable = node.variable
        if variable is not None:
            grad = variable.grad
            if grad is not None and HUB.active:
                emit(
                    "accumulate",
                    node,
                    {
                        "target": "leaf",
                        "leaf_name": node.leaf_name,
                        "action": "added" if self._had_grad.pop(node, False) else "created",
                        "grad": emit.summary(grad) if emit.keep_leaves else None,
                    },
                )
            del grad  # hold no gradient past the event (AccumulateGrad steals it next time)
        keep = emit.keeps(node)
        summaries = emit.summaries_if(
            keep, outputs, holds_outputs(node, self.plan.fan_in) if keep else ()
        )
        if HUB.active:
            if node.hooks:
                self._later_hooks(node, outputs, summaries)
            emit("node_end", node, {"outputs": summaries})
        if _is_anomaly_enabled() and _anomaly_rejects(outputs):
            # PyTorch checks a node's outputs after its post hooks and raises: nothing
            # is routed, and the error that follows names this node.
            running.append(node)
            return
        self.derived.pass_outputs(node, outputs, summaries)
        self._last = emit.clock()

    # -- the user's hooks (Note [Seeing the user's hooks] in hooks.py) ---------------------
    def _tensor_hooks(
        self,
        node: TorchNode,
        grads: tuple[torch.Tensor | None, ...],
        summaries: Any,
        before: dict[int, tuple[torch.Tensor | None, bool]],
    ) -> None:
        """A slot's tensor hooks ran before the node: each listed, the slot before and after."""
        for hook in node.hooks:
            if hook.kind == TENSOR_PRE and hook.slot is not None and hook.slot < len(grads):
                copy, changed = before.get(hook.slot, (None, False))
                before_summary = self.emit.summary(copy) if self.emit.keeps(node) else None
                self._emit_hook(node, hook, changed, before_summary, summaries[hook.slot])
        if any(h.kind in _MODULE_KINDS for h in node.hooks):
            self._module_inputs[node] = [None if g is None else weakref.ref(g) for g in grads]
            self._module_summaries[node] = summaries

    def _later_hooks(self, node: TorchNode, outputs: tuple[Any, ...], summaries: Any) -> None:
        """A leaf's post-accumulate-grad hooks, a module's backward hooks: listed, with values."""
        inputs = self._module_inputs.pop(node, None)
        before = self._module_summaries.pop(node, None)
        for hook in node.hooks:
            if hook.kind == POST_ACCUMULATE_GRAD:
                grad = (
                    node.variable.grad
                    if node.variable is not None and self.emit.keep_leaves
                    else None
                )
                self._emit_hook(node, hook, False, None, self.emit.summary(grad))
                del grad
            elif hook.kind in _MODULE_KINDS:
                # The node passes its inputs on as they are: a new object is a hook's.
                changed = inputs is not None and any(
                    (ref() if ref is not None else None) is not out
                    for ref, out in zip(inputs, outputs, strict=False)
                )
                self._emit_hook(
                    node,
                    hook,
                    changed,
                    before[0] if before and len(before) == 1 else None,
                    summaries[0] if len(summaries) == 1 else None,
                )

    def _emit_hook(
        self, node: TorchNode, hook: UserHook, replaced: bool, before: Any, after: Any
    ) -> None:
        data: dict[str, Any] = {"hook": hook.kind, "replaced": replaced, "hook_name": hook.name}
        if hook.slot is not None:
            data["slot"] = hook.slot
        if hook.location is not None:
            data["location"] = hook.location
        if before is not None:
            data["before"] = before
        if after is not None:
            data["after"] = after
        self.emit("hook", node, data)

    # -- emitting ----------------------------------------------------------------------
    def _start_data(self, summaries: list[Any], thread: str) -> dict[str, Any]:
        plan = self.plan
        pruned = plan.pruned
        return {
            "graph_snapshot": self._snapshot_builder(thread),
            "source": f"torch {torch.__version__}",
            "roots": [(n._id, n.name(), nr) for n, nr in plan.roots],
            "root_grads": summaries,
            "outputs": [(n._id, nr) for n, nr in plan.outputs],
            "keep_graph": self.keep_graph,
            "create_graph": self.create_graph,
            "reentrant_depth": self.depth,
            "parent_graph_task": self.parent or 0,
            "dependencies": {n._id: c for n, c in plan.dependencies.items()},
            "needed": sorted(n._id for n in plan.needed) if pruned else None,
            "captures": sorted(
                (n._id, slot, index) for n, caps in plan.captures.items() for slot, index in caps
            )
            if pruned
            else None,
        }

    def _snapshot_builder(self, thread: str) -> Any:
        plan, gid, parent, depth = self.plan, self.id, self.parent, self.depth
        keep, create = self.keep_graph, self.create_graph

        def snapshot(max_values: int | None, values: str = "all") -> Any:
            try:
                return plan.snapshot(
                    gid, parent, depth, keep, create, thread, max_values, values == "all"
                )
            except Exception as exc:  # noqa: BLE001 - the listener must not fail on it
                warn_once(
                    f"autograd-viz: the graph of a backward call could not be read whole "
                    f"({exc!r}); it is recorded without saved tensors and values"
                )
                return plan.snapshot(gid, parent, depth, keep, create, thread, None)

        return snapshot

    def _emit_exit(self, ok: bool) -> None:
        self.emit(
            "reentrant_exit",
            None,
            {"parent_graph_task": self.parent, "depth": self.depth, "ok": ok},
        )


_MODULE_KINDS = frozenset({MODULE_FULL_BACKWARD_PRE, MODULE_FULL_BACKWARD})
_CUSTOM = torch.autograd.function.BackwardCFunction


_is_anomaly_enabled = torch.is_anomaly_enabled


def _anomaly_rejects(outputs: tuple[Any, ...]) -> bool:
    """Whether anomaly mode will fail the node for a NaN in its outputs (``evaluate_function``)."""
    if not (torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()):
        return False
    with torch.no_grad():
        return any(
            isinstance(o, torch.Tensor) and o.is_floating_point() and bool(o.detach().isnan().any())
            for o in outputs
        )
