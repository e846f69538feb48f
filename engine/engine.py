"""The execution engine: GraphTask, NodeTask, ReadyQueue, InputBuffer and threads.

This follows PyTorch's ``torch/csrc/autograd/engine.cpp`` (see ``seeds/``):

* The thread that calls ``backward()`` runs the CPU work of its graph task.
* Each non-CPU device (``sim:N``, ``cuda:N``) has one worker thread and one
  ready queue, shared by every graph task.
* A node runs on the device of its input buffer (its first non-CPU gradient),
  so gradients hop between threads as the graph crosses devices.
* Reentrant backward (``backward()`` inside a backward function) runs on the
  same thread, nested; past ``MAX_RECURSION_DEPTH`` it moves to a thread pool.
* The first error wins: it completes the graph task's future, the rest of the
  graph task is skipped, and the caller re-raises the original exception.

Every step emits an event when a listener is subscribed (``events.HUB``).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from engine import _context, anomaly, devices, grad_mode
from engine.devices import CPU, Device
from engine.events import HUB, LazySummary
from engine.graph import AccumulateGrad, Edge, GraphRoot, Node
from engine.tensor import Tensor

MAX_RECURSION_DEPTH = 60
"""Reentrant backward calls nested on one thread before handing over to the pool."""

TLS = _context.TLS
_graph_task_ids = itertools.count(1)


def _summary(t: Tensor | None) -> LazySummary | None:
    return None if t is None else LazySummary(t.data, str(t.device))


# ---------------------------------------------------------------------------
# Small data structures
# ---------------------------------------------------------------------------
class InputBuffer:
    """The gradients gathered for one node, one slot per node input."""

    __slots__ = ("buffer",)

    def __init__(self, size: int) -> None:
        self.buffer: list[Tensor | None] = [None] * size

    def add(self, pos: int, var: Tensor | None) -> str | None:
        """Accumulate ``var`` into slot ``pos``; returns ``"created"`` or ``"added"``."""
        if var is None:
            return None
        old = self.buffer[pos]
        if old is None:
            self.buffer[pos] = var
            return "created"
        self.buffer[pos] = old + var
        return "added"

    def device(self) -> Device:
        """The first non-CPU device among the gradients, else ``cpu`` (as in PyTorch)."""
        for var in self.buffer:
            if var is not None and var.device is not CPU:
                return var.device
        return CPU


class ExecInfo:
    """Per-node pruning state for ``inputs=`` and ``grad()`` (GraphTask::ExecInfo)."""

    __slots__ = ("captures", "needed")

    def __init__(self) -> None:
        self.needed = False
        self.captures: list[tuple[int, int]] | None = None  # (input_idx, output_idx)

    def should_execute(self) -> bool:
        return self.needed or self.captures is not None


class GraphTask:
    """The state of one ``backward()`` / ``grad()`` call.

    Note [Locks]
    ~~~~~~~~~~~~
    ``lock`` guards ``dependencies``, ``not_ready``, ``captured_vars`` and the
    future. ``outstanding_tasks`` has its own leaf lock because queues bump it
    while the graph task lock may be held by the pushing thread; no other lock
    is ever taken while holding it, so the two cannot deadlock.
    """

    __slots__ = (
        "_count_lock",
        "captured_vars",
        "cpu_ready_queue",
        "dependencies",
        "done",
        "error",
        "exec_info",
        "future_completed",
        "grad_mode",
        "has_error",
        "id",
        "keep_graph",
        "leaf_devices",
        "lock",
        "not_ready",
        "outstanding_tasks",
        "owner",
        "parent_id",
        "reentrant_depth",
    )

    def __init__(
        self,
        keep_graph: bool,
        create_graph: bool,
        reentrant_depth: int,
        cpu_ready_queue: ReadyQueue,
    ) -> None:
        self.id = next(_graph_task_ids)
        self.keep_graph = keep_graph
        self.grad_mode = create_graph
        self.reentrant_depth = reentrant_depth
        self.cpu_ready_queue = cpu_ready_queue
        self.owner: Device | None = None
        self.outstanding_tasks = 0
        self._count_lock = threading.Lock()
        self.lock = threading.Lock()
        self.dependencies: dict[Node, int] = {}
        self.not_ready: dict[Node, InputBuffer] = {}
        self.exec_info: dict[Node, ExecInfo] = {}
        self.captured_vars: list[Tensor | None] = []
        self.has_error = False
        self.future_completed = False
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.leaf_devices: set[Device] = set()
        parent = TLS.graph_task
        self.parent_id = 0 if parent is None else parent.id

    def completed(self) -> bool:
        return self.outstanding_tasks == 0

    def init_to_execute(
        self, graph_root: Node, outputs: Sequence[Edge], accumulate_grad: bool, min_topo_nr: int
    ) -> None:
        """Mark the nodes on a path from the root to ``outputs`` as needed (iterative DFS)."""
        exec_info = self.exec_info
        exec_info[graph_root] = ExecInfo()
        exec_info[graph_root].needed = True
        for output_idx, edge in enumerate(outputs):
            info = exec_info.get(edge.function)
            if info is None:
                info = exec_info[edge.function] = ExecInfo()
            if accumulate_grad:
                info.needed = True
            else:
                if info.captures is None:
                    info.captures = []
                info.captures.append((edge.input_nr, output_idx))
        self.captured_vars = [None] * len(outputs)

        def should_execute(fn: Node) -> bool:
            info = exec_info.get(fn)
            return info is not None and info.should_execute()

        def mark_needed(fn: Node) -> None:
            info = exec_info.get(fn)
            if info is None:
                info = exec_info[fn] = ExecInfo()
            info.needed = True

        seen: set[Node] = set()
        stack: list[tuple[Node, Any]] = [(graph_root, iter(graph_root.next_edges))]
        while stack:
            fn, children = stack[-1]
            child: Node | None = None
            for edge in children:
                if edge is None:
                    continue
                if edge.function in seen:
                    if should_execute(edge.function):
                        mark_needed(fn)
                    continue
                seen.add(edge.function)
                if edge.function.topological_nr < min_topo_nr:
                    continue
                child = edge.function
                break
            if child is not None:
                stack.append((child, iter(child.next_edges)))
            else:
                stack.pop()
                if should_execute(fn) and stack:
                    mark_needed(stack[-1][0])


class NodeTask:
    """One node ready to run with its gathered inputs (fn ``None``: a wake-up task)."""

    __slots__ = ("base", "fn", "inputs", "is_shutdown")

    def __init__(
        self,
        base: GraphTask | None,
        fn: Node | None,
        inputs: InputBuffer | None,
        is_shutdown: bool = False,
    ) -> None:
        self.base = base
        self.fn = fn
        self.inputs = inputs
        self.is_shutdown = is_shutdown


class ReadyQueue:
    """A priority queue of NodeTasks with a condition to wait on.

    Order (PyTorch's CompareNodeTaskTime): shutdown tasks first, then wake-up
    (empty) tasks, then the deeper reentrant depth, then the higher
    sequence_nr; ties in arrival order.
    """

    __slots__ = ("_arrival", "_cond", "_heap", "device")

    def __init__(self, device: Device = CPU) -> None:
        self._heap: list[tuple[int, int, int, int, int, NodeTask]] = []
        self._cond = threading.Condition(threading.Lock())
        self._arrival = itertools.count()
        self.device = device

    def push(self, task: NodeTask, increment_outstanding: bool = True) -> None:
        if increment_outstanding and task.base is not None:
            base = task.base
            with base._count_lock:
                base.outstanding_tasks += 1
        if task.is_shutdown:
            key = (0, 0, 0, 0)
        elif task.fn is None:
            key = (1, 0, 0, 0)
        else:
            depth = task.base.reentrant_depth if task.base is not None else 0
            key = (1, 1, -depth, -task.fn.sequence_nr)
        with self._cond:
            heapq.heappush(self._heap, (*key, next(self._arrival), task))
            self._cond.notify()

    def pop(self) -> NodeTask:
        with self._cond:
            while not self._heap:
                self._cond.wait()
            return heapq.heappop(self._heap)[-1]

    def snapshot(self) -> list[NodeTask]:
        """The queued tasks in the order they will run (for debuggers)."""
        with self._cond:
            return [entry[-1] for entry in sorted(self._heap, key=lambda e: e[:-1])]

    def __len__(self) -> int:
        return len(self._heap)


# ---------------------------------------------------------------------------
# Validation shared by roots and node outputs
# ---------------------------------------------------------------------------
def validate_outputs(
    edges: Sequence[Edge | None],
    grads: list[Tensor | None],
    format_error: Callable[[str], str],
) -> list[Tensor | None]:
    """Check (and conform) the gradients flowing along ``edges``, as PyTorch does.

    Gradients whose shape broadcasts to the expected one are summed down to it
    (so every op's backward gets broadcasting right for free); dtypes are cast;
    0-dim gradients move to the expected device.

    Raises:
        RuntimeError: wrong number of gradients, an incompatible shape, or a
            gradient on the wrong device.
    """
    if len(grads) != len(edges):
        raise RuntimeError(
            format_error(
                f"invalid number of gradients - expected {len(edges)}, but got {len(grads)}"
            )
        )
    for i, given in enumerate(grads):
        edge = edges[i]
        grad = given
        if edge is None or grad is None:
            continue
        if not isinstance(grad, Tensor):
            raise TypeError(
                format_error(
                    f"invalid gradient at index {i} - expected a Tensor or None, but got "
                    f"{type(grad).__name__}"
                )
            )
        meta = edge.function._input_metadata[edge.input_nr]
        shape = grad.data.shape
        if shape != meta.shape:
            if not _expandable_to(meta.shape, shape):
                raise RuntimeError(
                    format_error(
                        f"invalid gradient at index {i} - got {list(shape)} but expected shape "
                        f"compatible with {list(meta.shape)}"
                    )
                )
            grad = grad.sum_to_size(meta.shape)
        if grad.data.dtype != meta.dtype:
            grad = grad.to(meta.dtype)
        if grad.device is not meta.device:
            if grad.data.ndim == 0:
                grad = grad.to(meta.device)
            else:
                raise RuntimeError(
                    format_error(
                        f"invalid device for value at index {i} - expected device {meta.device} "
                        f"but got {grad.device}"
                    )
                )
        grads[i] = grad
    return grads


def _expandable_to(shape: tuple[int, ...], desired: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``desired`` (so a gradient can be summed back)."""
    if len(shape) > len(desired):
        return False
    for have, want in zip(reversed(shape), reversed(desired), strict=False):
        if have not in (want, 1):
            return False
    return True


# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------
class Engine:
    """Runs backward graphs. One process-wide instance: :func:`get_default_engine`."""

    def __init__(self) -> None:
        self._device_queues: dict[Device, ReadyQueue] = {}
        self._device_threads: dict[Device, threading.Thread] = {}
        self._start_lock = threading.Lock()
        self._pool_lock = threading.Condition(threading.Lock())
        self._pool_queue: list[GraphTask] = []
        self._pool_idle = 0
        self._pool_threads: list[threading.Thread] = []

    # -- entry point -------------------------------------------------------
    def execute(
        self,
        roots: Sequence[Edge],
        inputs: list[Tensor | None],
        keep_graph: bool,
        create_graph: bool,
        accumulate_grad: bool,
        outputs: Sequence[Edge] = (),
    ) -> list[Tensor | None]:
        """Run backward from ``roots`` seeded with ``inputs``; return captured ``outputs``."""
        validate_outputs(roots, inputs, lambda msg: msg)
        reentrant = TLS.worker_device is not None
        cpu_queue = TLS.local_ready_queue if reentrant else ReadyQueue()
        graph_task = GraphTask(
            keep_graph, create_graph, TLS.total_depth + 1 if reentrant else 0, cpu_queue
        )
        skip_dummy_node = len(roots) == 1
        graph_root = roots[0].function if skip_dummy_node else GraphRoot(roots, inputs)
        min_topo_nr = min((e.function.topological_nr for e in outputs), default=0)
        compute_dependencies(graph_root, graph_task, min_topo_nr)
        if outputs:
            graph_task.init_to_execute(graph_root, outputs, accumulate_grad, min_topo_nr)
        input_buffer = InputBuffer(graph_root.num_inputs if skip_dummy_node else 0)
        if skip_dummy_node:
            input_buffer.add(roots[0].input_nr, inputs[0])
        if HUB.active:
            self._emit_graph_task_start(graph_task, graph_root, roots, inputs, outputs)
        self.execute_with_graph_task(graph_task, graph_root, input_buffer)
        if graph_task.error is not None:
            raise graph_task.error
        return graph_task.captured_vars

    def execute_with_graph_task(
        self, graph_task: GraphTask, graph_root: Node, input_buffer: InputBuffer
    ) -> None:
        queue = self.ready_queue(graph_task.cpu_ready_queue, input_buffer.device())
        if TLS.worker_device is None:
            # A fresh call from a user thread: this thread becomes the CPU worker.
            TLS.worker_device = CPU
            TLS.local_ready_queue = graph_task.cpu_ready_queue
            graph_task.owner = CPU
            try:
                self._push(queue, NodeTask(graph_task, graph_root, input_buffer), "root")
                self.thread_main(graph_task)
            finally:
                TLS.worker_device = None
                TLS.local_ready_queue = None
            return
        # Reentrant backward from inside a running node; see Note [Reentrant backward].
        graph_task.owner = TLS.worker_device
        if HUB.active:
            HUB.emit(
                "reentrant_enter",
                str(TLS.worker_device),
                graph_task.id,
                parent_graph_task=graph_task.parent_id,
                depth=graph_task.reentrant_depth,
                current_depth=TLS.current_depth,
                on_pool=TLS.current_depth >= MAX_RECURSION_DEPTH,
            )
        self._push(queue, NodeTask(graph_task, graph_root, input_buffer), "root")
        if TLS.current_depth >= MAX_RECURSION_DEPTH:
            self.add_thread_pool_task(graph_task)
            graph_task.done.wait()
        else:
            TLS.total_depth += 1
            TLS.current_depth += 1
            outer_task = TLS.graph_task
            try:
                self.thread_main(graph_task)
            finally:
                TLS.current_depth -= 1
                TLS.total_depth -= 1
                TLS.graph_task = outer_task
        if HUB.active:
            HUB.emit(
                "reentrant_exit",
                str(TLS.worker_device),
                graph_task.id,
                parent_graph_task=graph_task.parent_id,
                depth=graph_task.reentrant_depth,
                ok=graph_task.error is None,
            )

    # Note [Reentrant backward]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~
    # A backward function that calls backward() blocks the engine thread it
    # runs on. That thread cannot just wait: the new graph task may need it
    # (its CPU work goes to this thread's queue). So it runs thread_main for
    # the new graph task, nested, popping from the same queue; tasks of the
    # deeper graph task come first (reentrant depth orders the queue). Past
    # MAX_RECURSION_DEPTH nested calls the stack would grow without bound, so
    # the graph task goes to a pool thread that adopts this thread's device
    # and queue while this thread waits on the graph task's future.

    # -- the loop ----------------------------------------------------------
    def thread_main(self, graph_task: GraphTask | None) -> None:
        """Pop and run tasks until ``graph_task`` completes (forever for device threads)."""
        queue: ReadyQueue = TLS.local_ready_queue
        while graph_task is None or not graph_task.future_completed:
            task = queue.pop()
            if task.is_shutdown:
                break
            local = task.base
            assert local is not None
            if task.fn is not None and not local.has_error:
                self._run_task(local, task.fn, task.inputs)
            del task
            with local._count_lock:
                local.outstanding_tasks -= 1
                done = local.outstanding_tasks == 0
            if done:
                self.mark_as_completed(local)
                if TLS.worker_device is not local.owner:
                    # See Note [Owner wake-up]
                    owner_queue = self.ready_queue(local.cpu_ready_queue, local.owner)
                    self._push(owner_queue, NodeTask(local, None, None), "wake-up")

    # Note [Owner wake-up]
    # ~~~~~~~~~~~~~~~~~~~~
    # The thread that runs the last task of a graph task may not be its owner
    # (the thread that called backward and waits in thread_main). The owner
    # may be asleep in pop() on an empty queue, so the finishing thread pushes
    # an empty task to the owner's queue; popping it, the owner sees the
    # future completed and returns.

    def _run_task(self, graph_task: GraphTask, fn: Node, inputs: Any) -> None:
        outer_task = TLS.graph_task
        TLS.graph_task = graph_task
        prev_mode = grad_mode._state.enabled
        grad_mode._state.enabled = graph_task.grad_mode
        try:
            self.evaluate_function(graph_task, fn, inputs, graph_task.cpu_ready_queue)
        except BaseException as exc:  # noqa: BLE001 - carried to the caller, see set_exception
            self.thread_on_exception(graph_task, fn, exc)
        finally:
            grad_mode._state.enabled = prev_mode
            TLS.graph_task = outer_task

    def evaluate_function(
        self, graph_task: GraphTask, fn: Node, inputs: InputBuffer, cpu_ready_queue: ReadyQueue
    ) -> None:
        """Run one node and pass its outputs on, releasing the nodes that become ready."""
        active = HUB.active
        exec_info = graph_task.exec_info
        if exec_info:
            fn_info = exec_info[fn]
            grads = inputs.buffer
            if not fn_info.needed:
                grads = self.call_tensor_pre_hooks(graph_task, fn, grads)
            if fn_info.captures is not None:
                self._capture(graph_task, fn, fn_info.captures, grads)
            if not fn_info.needed:
                return
        outputs = self.call_function(graph_task, fn, inputs)
        if not graph_task.keep_graph:
            fn.release_variables()
            if active and fn._saved:
                HUB.emit(
                    "release_variables",
                    str(TLS.worker_device),
                    graph_task.id,
                    fn,
                    count=len(fn._saved),
                )
        if not outputs:
            if isinstance(fn, AccumulateGrad) and fn.variable.device is not CPU:
                graph_task.leaf_devices.add(fn.variable.device)
            return
        if anomaly.STATE.enabled and anomaly.STATE.check_nan:
            self._check_nan(graph_task, fn, outputs)
        with graph_task.lock:
            for i, output in enumerate(outputs):
                edge = fn._next_edges[i]
                if edge is None:
                    continue
                self._pass_gradient(graph_task, fn, edge, output, cpu_ready_queue, active)

    def _pass_gradient(
        self,
        graph_task: GraphTask,
        fn: Node,
        edge: Edge,
        output: Tensor | None,
        cpu_ready_queue: ReadyQueue,
        active: bool,
    ) -> None:
        """Decrement ``edge``'s node dependencies and route ``output`` to its buffer (lock held)."""
        nxt = edge.function
        dependencies = graph_task.dependencies
        count = dependencies.get(nxt)
        if count is None:
            raise RuntimeError(f"dependency not found for {nxt.name()}")
        count -= 1
        is_ready = count == 0
        if is_ready:
            del dependencies[nxt]
        else:
            dependencies[nxt] = count
        if active:
            HUB.emit(
                "dependency_decrement",
                str(TLS.worker_device),
                graph_task.id,
                nxt,
                from_node=fn._id,
                from_name=fn.name(),
                input_nr=edge.input_nr,
                remaining=count,
            )
        not_ready = graph_task.not_ready
        buffer = not_ready.get(nxt)
        if buffer is None:
            exec_info = graph_task.exec_info
            if exec_info:
                info = exec_info.get(nxt)
                if info is None or not info.should_execute():
                    if active:
                        HUB.emit(
                            "skip",
                            str(TLS.worker_device),
                            graph_task.id,
                            nxt,
                            from_node=fn._id,
                            input_nr=edge.input_nr,
                            reason="not needed for the requested inputs",
                        )
                    return
            buffer = InputBuffer(len(nxt._input_metadata))
        action = buffer.add(edge.input_nr, output)
        if active and action is not None:
            assert output is not None
            HUB.emit(
                "accumulate",
                str(TLS.worker_device),
                graph_task.id,
                nxt,
                target="buffer",
                slot=edge.input_nr,
                action=action,
                from_node=fn._id,
                grad=_summary(output),
                total=_summary(buffer.buffer[edge.input_nr]),
            )
        if is_ready:
            if not_ready.get(nxt) is not None:
                del not_ready[nxt]
            queue = self.ready_queue(cpu_ready_queue, buffer.device())
            self._push(queue, NodeTask(graph_task, nxt, buffer), "ready")
        else:
            not_ready[nxt] = buffer

    def call_function(self, graph_task: GraphTask, fn: Node, inputs: InputBuffer) -> list[Any]:
        """Hooks, ``apply``, output validation and post hooks of one node."""
        active = HUB.active
        grads: list[Any] = inputs.buffer
        if fn._tensor_pre_hooks or fn._retains_grad_hooks or isinstance(fn, AccumulateGrad):
            grads = self.call_tensor_pre_hooks(graph_task, fn, grads)
        if fn._pre_hooks:
            grads = self._call_pre_hooks(graph_task, fn, grads)
        if active:
            HUB.emit(
                "node_start",
                str(TLS.worker_device),
                graph_task.id,
                fn,
                inputs=[_summary(g) for g in grads],
            )
        if fn.skips_undefined_grads and all(g is None for g in grads):
            outputs: list[Any] = [None] * len(fn._next_edges)
        else:
            outputs = list(fn.apply(grads))
        outputs = validate_outputs(
            fn._next_edges, outputs, lambda msg: f"Function {fn.name()} returned an {msg}"
        )
        if fn._post_hooks:
            outputs = self._call_post_hooks(graph_task, fn, outputs, grads)
        if active:
            HUB.emit(
                "node_end",
                str(TLS.worker_device),
                graph_task.id,
                fn,
                outputs=[_summary(g) for g in outputs],
            )
        return outputs

    def call_tensor_pre_hooks(self, graph_task: GraphTask, fn: Node, grads: list[Any]) -> list[Any]:
        """Tensor hooks (``Tensor.register_hook``) then ``retain_grad`` of the node's inputs."""
        grads = list(grads)
        for i in range(len(grads)):
            hooks = fn.tensor_pre_hooks(i)
            if hooks:
                for hook in list(hooks.values()):
                    if grads[i] is None:
                        break
                    result = hook(grads[i])
                    if HUB.active:
                        HUB.emit(
                            "hook",
                            str(TLS.worker_device),
                            graph_task.id,
                            fn,
                            hook="tensor_pre",
                            slot=i,
                            replaced=result is not None,
                            hook_name=getattr(hook, "__qualname__", repr(hook)),
                        )
                    if result is not None:
                        grads[i] = _check_hook_result(result, grads[i], "hook")
        retains = fn._retains_grad_hooks
        if retains:
            for i, ref in list(retains.items()):
                tensor = ref()
                if tensor is None or grads[i] is None:
                    continue
                grad = grads[i]
                if tensor._grad is None:
                    tensor._grad = grad.detach_copy_for_grad()
                else:
                    tensor._grad = tensor._grad + grad
                if HUB.active:
                    HUB.emit(
                        "hook",
                        str(TLS.worker_device),
                        graph_task.id,
                        fn,
                        hook="retain_grad",
                        slot=i,
                        replaced=False,
                        hook_name="retain_grad",
                    )
        return grads

    def _call_pre_hooks(self, graph_task: GraphTask, fn: Node, grads: list[Any]) -> list[Any]:
        assert fn._pre_hooks is not None
        for hook in list(fn._pre_hooks.values()):
            result = hook(tuple(grads))
            if HUB.active:
                HUB.emit(
                    "hook",
                    str(TLS.worker_device),
                    graph_task.id,
                    fn,
                    hook="pre",
                    replaced=result is not None,
                    hook_name=getattr(hook, "__qualname__", repr(hook)),
                )
            if result is not None:
                grads = _check_hook_results(result, grads, "prehook")
        return grads

    def _call_post_hooks(
        self, graph_task: GraphTask, fn: Node, outputs: list[Any], grads: list[Any]
    ) -> list[Any]:
        assert fn._post_hooks is not None
        for hook in list(fn._post_hooks.values()):
            result = hook(tuple(outputs), tuple(grads))
            if HUB.active:
                HUB.emit(
                    "hook",
                    str(TLS.worker_device),
                    graph_task.id,
                    fn,
                    hook="post",
                    replaced=result is not None,
                    hook_name=getattr(hook, "__qualname__", repr(hook)),
                )
            if result is not None:
                outputs = _check_hook_results(result, outputs, "hook")
        return outputs

    def _capture(
        self, graph_task: GraphTask, fn: Node, captures: list[tuple[int, int]], grads: list[Any]
    ) -> None:
        with graph_task.lock:
            for input_idx, output_idx in captures:
                grad = grads[input_idx]
                graph_task.captured_vars[output_idx] = grad
                if HUB.active:
                    HUB.emit(
                        "capture",
                        str(TLS.worker_device),
                        graph_task.id,
                        fn,
                        slot=input_idx,
                        output_index=output_idx,
                        grad=_summary(grad),
                    )

    def _check_nan(self, graph_task: GraphTask, fn: Node, outputs: list[Any]) -> None:
        for i, output in enumerate(outputs):
            if output is None:
                continue
            xp = output.device.xp
            if xp.issubdtype(output.data.dtype, xp.inexact) and bool(xp.isnan(output.data).any()):
                if HUB.active:
                    HUB.emit(
                        "anomaly",
                        str(TLS.worker_device),
                        graph_task.id,
                        fn,
                        output_index=i,
                        value="nan",
                        grad=_summary(output),
                        traceback=fn.metadata.get("traceback_"),
                    )
                raise RuntimeError(
                    f"Function '{fn.name()}' returned nan values in its {i}th output."
                )

    # -- completion and errors -------------------------------------------------
    def mark_as_completed(self, graph_task: GraphTask) -> None:
        """Complete the future once: run post-processing and wake anyone waiting."""
        with graph_task.lock:
            if graph_task.future_completed:
                return
            try:
                for device in graph_task.leaf_devices:
                    devices.synchronize(device)
            except BaseException as exc:  # noqa: BLE001
                graph_task.error = exc
                graph_task.has_error = True
            graph_task.future_completed = True
        try:
            self._emit_graph_task_end(graph_task)
        finally:
            graph_task.done.set()

    def thread_on_exception(
        self, graph_task: GraphTask, fn: Node | None, exc: BaseException
    ) -> None:
        """Record the first error of ``graph_task`` and complete its future with it."""
        with graph_task.lock:
            first = not graph_task.has_error
            graph_task.has_error = True
            complete = first and not graph_task.future_completed
            if complete:
                graph_task.error = exc
                graph_task.future_completed = True
        try:
            if HUB.active:
                traceback = (
                    fn.metadata.get("traceback_") if fn is not None and fn._metadata else None
                )
                HUB.emit(
                    "error",
                    str(TLS.worker_device),
                    graph_task.id,
                    fn,
                    exc_type=type(exc).__name__,
                    message=str(exc),
                    first=first,
                    traceback=traceback,
                )
            if first and anomaly.STATE.enabled and fn is not None:
                anomaly.warn_forward_traceback(fn)
            if complete:
                self._emit_graph_task_end(graph_task)
        except BaseException:  # noqa: BLE001
            pass  # the graph task already carries its error; a listener cancelling changes nothing
        finally:
            if complete:
                graph_task.done.set()
                if TLS.worker_device is not graph_task.owner:
                    # See Note [Owner wake-up]
                    owner_queue = self.ready_queue(graph_task.cpu_ready_queue, graph_task.owner)
                    owner_queue.push(NodeTask(graph_task, None, None))

    # -- queues and threads --------------------------------------------------
    def ready_queue(self, cpu_ready_queue: ReadyQueue, device: Device | None) -> ReadyQueue:
        """The CPU queue of the graph task, or the shared queue of ``device``."""
        if device is None or device is CPU:
            return cpu_ready_queue
        queue = self._device_queues.get(device)
        if queue is None:
            queue = self._start_device_thread(device)
        return queue

    def _start_device_thread(self, device: Device) -> ReadyQueue:
        with self._start_lock:
            queue = self._device_queues.get(device)
            if queue is not None:
                return queue
            queue = ReadyQueue(device)
            thread = threading.Thread(
                target=self._device_thread_main,
                args=(device, queue),
                name=f"autograd-{device}",
                daemon=True,
            )
            self._device_threads[device] = thread
            self._device_queues[device] = queue
            thread.start()
            return queue

    def _device_thread_main(self, device: Device, queue: ReadyQueue) -> None:
        TLS.worker_device = device
        TLS.local_ready_queue = queue
        if device.type == "cuda":
            device.xp.cuda.Device(device.index).use()
        while True:
            try:
                self.thread_main(None)
                return  # a shutdown task
            except BaseException:  # noqa: BLE001
                # Only a listener cancelling at a step outside a node gets here (errors in
                # nodes are carried to their graph task); a device thread must keep serving.
                continue

    def _push(self, queue: ReadyQueue, task: NodeTask, reason: str) -> None:
        # The event comes first so that listeners see enqueue before the node starts on
        # another thread; the push happens even if a listener cancels (no task is lost).
        try:
            if HUB.active and task.base is not None:
                HUB.emit(
                    "enqueue",
                    str(TLS.worker_device or CPU),
                    task.base.id,
                    task.fn,
                    queue=str(queue.device),
                    queue_owner=f"graph_task {task.base.id}" if queue.device is CPU else "device",
                    reason=reason,
                    queue_length=len(queue) + 1,
                )
        finally:
            queue.push(task)

    def add_thread_pool_task(self, graph_task: GraphTask) -> None:
        """Hand a too-deep reentrant graph task to a pool thread (created when none is idle)."""
        with self._pool_lock:
            create = self._pool_idle <= len(self._pool_queue)
            self._pool_queue.append(graph_task)
            if create:
                thread = threading.Thread(
                    target=self._pool_thread_main,
                    name=f"autograd-pool-{len(self._pool_threads)}",
                    daemon=True,
                )
                self._pool_threads.append(thread)
                thread.start()
            self._pool_lock.notify()

    def _pool_thread_main(self) -> None:
        while True:
            with self._pool_lock:
                self._pool_idle += 1
                while not self._pool_queue:
                    self._pool_lock.wait()
                self._pool_idle -= 1
                graph_task = self._pool_queue.pop(0)
            if graph_task is _POOL_SHUTDOWN:
                return
            assert graph_task.owner is not None
            TLS.worker_device = graph_task.owner
            TLS.local_ready_queue = self.ready_queue(graph_task.cpu_ready_queue, graph_task.owner)
            TLS.total_depth = graph_task.reentrant_depth
            TLS.current_depth = 0
            self.thread_main(graph_task)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every device and pool thread and wait for them (tests, clean exit).

        The engine restarts threads on demand afterwards.
        """
        with self._start_lock:
            threads = list(self._device_threads.values())
            for queue in self._device_queues.values():
                queue.push(
                    NodeTask(None, None, None, is_shutdown=True), increment_outstanding=False
                )
            self._device_queues.clear()
            self._device_threads.clear()
        with self._pool_lock:
            pool = list(self._pool_threads)
            self._pool_queue.extend([_POOL_SHUTDOWN] * len(pool))
            self._pool_threads.clear()
            self._pool_lock.notify_all()
        for thread in threads + pool:
            thread.join(timeout)

    def worker_threads(self) -> list[threading.Thread]:
        """The live device and pool threads."""
        return [t for t in [*self._device_threads.values(), *self._pool_threads] if t.is_alive()]

    # -- events ------------------------------------------------------------
    def _emit_graph_task_start(
        self,
        graph_task: GraphTask,
        graph_root: Node,
        roots: Sequence[Edge],
        inputs: Sequence[Tensor | None],
        outputs: Sequence[Edge],
    ) -> None:
        import weakref

        needed = None
        if graph_task.exec_info:
            needed = sorted(n._id for n, info in graph_task.exec_info.items() if info.needed)
        captures = None
        if graph_task.exec_info:
            captures = sorted(
                (n._id, inp, out)
                for n, info in graph_task.exec_info.items()
                if info.captures
                for inp, out in info.captures
            )
        HUB.emit(
            "graph_task_start",
            str(TLS.worker_device or CPU),
            graph_task.id,
            graph_root,
            graph_root=weakref.ref(graph_root),
            roots=[(e.function._id, e.function.name(), e.input_nr) for e in roots],
            root_grads=[_summary(g) for g in inputs],
            dependencies={n._id: c for n, c in graph_task.dependencies.items()},
            needed=needed,
            captures=captures,
            outputs=[(e.function._id, e.input_nr) for e in outputs],
            keep_graph=graph_task.keep_graph,
            create_graph=graph_task.grad_mode,
            reentrant_depth=graph_task.reentrant_depth,
            parent_graph_task=graph_task.parent_id,
        )

    def _emit_graph_task_end(self, graph_task: GraphTask) -> None:
        if not HUB.active:
            return
        err = graph_task.error
        HUB.emit(
            "graph_task_end",
            str(TLS.worker_device or CPU),
            graph_task.id,
            status="ok" if err is None else "error",
            exc_type=None if err is None else type(err).__name__,
            message=None if err is None else str(err),
            captured=[_summary(g) for g in graph_task.captured_vars],
        )


_POOL_SHUTDOWN: Any = object()


def compute_dependencies(root: Node, task: GraphTask, min_topo_nr: int) -> None:
    """Count, for every node reachable from ``root``, the edges arriving at it."""
    dependencies = task.dependencies
    seen = {root}
    stack = [root]
    while stack:
        fn = stack.pop()
        if fn.topological_nr < min_topo_nr:
            continue
        for edge in fn._next_edges:
            if edge is None:
                continue
            nxt = edge.function
            dependencies[nxt] = dependencies.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)


def _check_hook_result(result: Any, grad: Tensor, kind: str) -> Tensor:
    if not isinstance(result, Tensor):
        raise TypeError(
            f"{kind} returned an object of type {type(result).__name__}; expected a Tensor or None"
        )
    if result.shape != grad.shape:
        raise RuntimeError(
            f"{kind} changed the shape of the gradient from {list(grad.shape)} to "
            f"{list(result.shape)}; a hook must return a gradient of the same shape"
        )
    return result


def _check_hook_results(result: Any, grads: list[Any], kind: str) -> list[Any]:
    if isinstance(result, Tensor):
        result = (result,)
    result = list(result)
    if len(result) != len(grads):
        raise RuntimeError(
            f"{kind} returned {len(result)} gradients; expected {len(grads)} (one per gradient "
            f"it was given)"
        )
    return result


_default_engine = Engine()


def get_default_engine() -> Engine:
    """The process-wide engine."""
    return _default_engine
