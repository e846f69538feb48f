"""The execution engine: the loop every engine thread runs, and the threads.

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

import threading
from collections.abc import Sequence
from typing import Any

from engine import _context, anomaly, devices, grad_mode
from engine.activity import ACTIVITY
from engine.calls import CALLS
from engine.completion import DONE, complete, push, task_done, thread_on_exception
from engine.devices import CPU
from engine.emitting import (
    accumulate_payload,
    any_defined,
    decrement_payload,
    emit,
    emit_enqueue,
    emit_graph_task_start,
    emit_reentrant_enter,
    emit_reentrant_exit,
    skip_payload,
    summaries_of,
    summary_of,
)
from engine.events import HUB, LazySummary
from engine.graph import Edge, GraphRoot, Node
from engine.graph_task import (
    IN_PLACE_MIN,
    SHUTDOWN_TASK,
    ExactNodeTask,
    GraphTask,
    InputBuffer,
    NodeTask,
    ReadyQueue,
    accumulate_into,
    add_into,
    buffer_device,
    node_task,
)
from engine.node_steps import call_function, call_tensor_pre_hooks, capture, check_values
from engine.scheduler import arrive, compute_dependencies, init_to_execute
from engine.tensor import Tensor, make_tensor
from engine.validation import (
    conform_output,
    validate_outputs,
)
from engine.workers import WorkerThreads

__all__ = ["MAX_RECURSION_DEPTH", "Engine", "get_default_engine"]

MAX_RECURSION_DEPTH = 60
"""Reentrant backward calls nested on one thread before handing over to the pool."""

TLS = _context.TLS


class Engine:
    """Runs backward graphs. One process-wide instance: :func:`get_default_engine`.

    It owns its threads (:class:`~engine.workers.WorkerThreads`: one per
    non-CPU device, and the reentrant pool), which run :meth:`thread_main`.
    What happens around a node (hooks, captures, checks), how a graph task
    ends and how events are built are plain functions of the graph task, in
    :mod:`engine.node_steps`, :mod:`engine.completion` and
    :mod:`engine.emitting`; the scheduling itself is :mod:`engine.scheduler`'s.
    """

    def __init__(self) -> None:
        self.workers = WorkerThreads(self.thread_main)
        """The device threads and the reentrant pool."""

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every device and pool thread and wait for them (tests, clean exit).

        The engine restarts threads on demand afterwards.
        """
        self.workers.shutdown(timeout)

    def worker_threads(self) -> list[threading.Thread]:
        """The live device and pool threads."""
        return self.workers.worker_threads()

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
        if TLS.worker_device is not None:
            return self._execute(roots, inputs, keep_graph, create_graph, accumulate_grad, outputs)
        ACTIVITY.enter()  # a user thread joins the engine; see Note [Quiescence]
        counted = CALLS.start() if CALLS.watchers else None  # See Note [Backward calls]
        try:
            return self._execute(roots, inputs, keep_graph, create_graph, accumulate_grad, outputs)
        finally:
            if counted is not None:
                CALLS.end(counted)
            ACTIVITY.leave()

    def _execute(
        self,
        roots: Sequence[Edge],
        inputs: list[Tensor | None],
        keep_graph: bool,
        create_graph: bool,
        accumulate_grad: bool,
        outputs: Sequence[Edge],
    ) -> list[Tensor | None]:
        inputs = list(validate_outputs(roots, inputs, None))
        reentrant = TLS.worker_device is not None
        cpu_queue = TLS.local_ready_queue if reentrant else ReadyQueue()
        graph_task = GraphTask(
            keep_graph, create_graph, TLS.total_depth + 1 if reentrant else 0, cpu_queue
        )
        skip_dummy_node = len(roots) == 1
        graph_root = roots[0].function if skip_dummy_node else GraphRoot(roots, inputs)
        min_topo_nr = min((e.function.topological_nr for e in outputs), default=0)
        graph_task.dependencies = compute_dependencies(graph_root, min_topo_nr)
        if outputs:
            graph_task.exec_info = init_to_execute(
                graph_root, outputs, accumulate_grad, min_topo_nr
            )
            graph_task.captured_vars = [None] * len(outputs)
        input_buffer: InputBuffer = [None] * (graph_root.num_inputs if skip_dummy_node else 0)
        if skip_dummy_node:
            accumulate_into(input_buffer, roots[0].input_nr, inputs[0])
        if HUB.active:
            emit_graph_task_start(graph_task, graph_root, roots, inputs, outputs)
        self.execute_with_graph_task(graph_task, graph_root, input_buffer)
        if graph_task.error is not None:
            raise graph_task.error
        return graph_task.captured_vars

    def execute_with_graph_task(
        self, graph_task: GraphTask, graph_root: Node, input_buffer: InputBuffer
    ) -> None:
        queue = self.workers.ready_queue(graph_task.cpu_ready_queue, buffer_device(input_buffer))
        if TLS.worker_device is None:
            # A fresh call from a user thread: this thread becomes the CPU worker.
            TLS.worker_device = CPU
            TLS.local_ready_queue = graph_task.cpu_ready_queue
            graph_task.owner = CPU
            try:
                push(queue, node_task(graph_task, graph_root, input_buffer), "root")
                self.thread_main(graph_task)
            finally:
                TLS.worker_device = None
                TLS.local_ready_queue = None
            return
        # Reentrant backward from inside a running node; see Note [Reentrant backward].
        graph_task.owner = TLS.worker_device
        if HUB.active:
            emit_reentrant_enter(
                graph_task, TLS.current_depth, TLS.current_depth >= MAX_RECURSION_DEPTH
            )
        push(queue, node_task(graph_task, graph_root, input_buffer), "root")
        if TLS.current_depth >= MAX_RECURSION_DEPTH:
            graph_task.shared = True  # See Note [Graph tasks one thread runs]
            self.workers.add_thread_pool_task(graph_task)
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
            emit_reentrant_exit(graph_task)

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
        state = grad_mode._state
        outer_task, outer_mode = TLS.graph_task, state.enabled
        current = outer_task
        task: Any = None  # a NodeTask
        try:
            while graph_task is None or not graph_task.future_completed:
                if task is None:
                    task = queue.pop()
                if task is SHUTDOWN_TASK:
                    break
                local, fn, inputs = task.graph_task, task.fn, task.inputs
                assert local is not None
                if fn is None or inputs is None or local.has_error:
                    finished = task_done(local)
                else:
                    if local is not current:
                        TLS.graph_task = current = local
                    finished = self._run(local, fn, inputs, queue, graph_task)
                task = inputs = None
                if finished is DONE:
                    complete(local, self.workers)
                elif finished is not None:
                    task = finished  # popped by _run for this loop to run
            if task is not None:
                queue.push(task)  # popped just as graph_task completed elsewhere
        finally:
            TLS.graph_task = outer_task
            state.enabled = outer_mode

    def _run(
        self,
        graph_task: GraphTask,
        fn: Node,
        grads: list[Any],
        queue: ReadyQueue,
        awaited: GraphTask | None,
    ) -> Any:
        """Run ``fn``, then each node it readies for this thread next, while ``awaited`` runs.

        Nodes go through :meth:`evaluate_function`, or the plain path when it
        applies (Note [The plain path]). An error is recorded in the graph
        task (the first one completes its future). Returns ``DONE`` if the
        graph task's last task finished, a task for :meth:`thread_main` to
        run or count, or ``None``.
        """
        modes = grad_mode.thread_modes()  # Note [Grad mode as the thread's dict]
        checks = anomaly.STATE
        grad_on = graph_task.grad_mode
        release = not graph_task.keep_graph
        pruned = bool(graph_task.exec_info)
        dependencies = graph_task.dependencies
        not_ready = graph_task.not_ready
        cpu_queue = graph_task.cpu_ready_queue
        workers = self.workers
        heap = queue.heap
        locked = False  # See Note [Graph tasks one thread runs]
        next_fn: Any = None  # the node this thread runs next (a Node), with next_grads
        next_grads: Any = None
        try:
            while True:
                modes["enabled"] = grad_on
                if pruned or HUB.active or checks.enabled or fn._hooks is not None:
                    # Note [A node's hooks in one slot]; AccumulateGrad always has them.
                    after = self.evaluate_function(graph_task, fn, grads, queue)
                    grads = None  # type: ignore[assignment]
                else:
                    # The plain path: evaluate_function with what cannot apply taken out.
                    num_edges = fn._num_edges
                    if num_edges < 0:  # Note [A number's edge in the count]
                        num_edges = 2
                        routes = 1  # the number's edge: nothing goes there, no turn for it
                    else:
                        routes = num_edges
                    outputs: Sequence[Any]
                    # PyTorch's any_grad_defined check; the first slot answers it for most
                    # nodes, without an iterator.
                    if (
                        (grads and grads[0] is not None)
                        or not fn.skips_undefined_grads
                        or any_defined(grads)
                    ):
                        outputs = fn.apply(grads)
                    else:
                        outputs = [None] * num_edges
                    grads = None  # type: ignore[assignment]
                    if len(outputs) != num_edges or graph_task.shared:
                        outputs = validate_outputs(fn._next_edges, outputs, fn)
                        after = self.pass_outputs(graph_task, fn, outputs, queue)
                    else:
                        # pass_outputs written out, validating each gradient as it goes.
                        after = None
                        pushed = 0  # tasks readied for this thread's queue before next_fn
                        # Note [Gradients that keep their metadata] in engine.validation
                        kept = fn._input_metadata[0] if fn.keeps_metadata else None
                        i = 0
                        while i < routes:
                            # The edge from the node's slots (Note [Edges in the node's own
                            # slots]), without building _next_edges' tuple; no enumerate
                            # object either (Note [The plain path]).
                            if i == 0:
                                edge = fn._edge0
                            elif i == 1:
                                edge = fn._edge1
                            else:
                                edge = fn._edges[i]  # type: ignore[index]  # set past two
                            i += 1
                            if edge is None:
                                continue
                            grad = outputs[i - 1]
                            if type(edge) is Edge:
                                nxt = edge.function
                                slot = edge.input_nr
                            else:  # Note [A node is its own first edge], without the property
                                nxt = edge  # a Node here
                                slot = 0
                            metadata = nxt._input_metadata
                            if grad is not None:
                                meta = metadata[slot]
                                if meta is not kept and (
                                    type(grad) is not Tensor
                                    or grad.device is not meta[2]
                                    or grad.data.shape != meta[0]
                                    or (
                                        grad.data.dtype is not meta[1]
                                        and grad.data.dtype != meta[1]
                                    )
                                ):
                                    grad = conform_output(i - 1, grad, meta, fn)
                            # Taken out, and put back less one unless it was the last edge: one
                            # dict operation for a node one edge reaches.
                            count = dependencies.pop(nxt, None)
                            if count is None:
                                raise RuntimeError(f"dependency not found for {nxt.name()}")
                            if count > 1:
                                dependencies[nxt] = count - 1
                                buffer = not_ready.get(nxt)
                                if buffer is None:
                                    buffer = not_ready[nxt] = [None] * len(metadata)
                            else:
                                # A node one edge reaches was never waiting: no lookup for it.
                                buffer = not_ready.pop(nxt, None) if not_ready else None
                                if buffer is None:
                                    if len(metadata) == 1:
                                        # Its one input's one gradient: the buffer as it
                                        # ends up, with nothing to add to.
                                        buffer = [grad]
                                        grad = None
                                    else:
                                        buffer = [None] * len(metadata)
                            if grad is not None:
                                old = buffer[slot]
                                if old is None:
                                    buffer[slot] = grad
                                elif grad_on:
                                    buffer[slot] = old + grad  # differentiable: create_graph
                                    old = None
                                elif old.data.size <= IN_PLACE_MIN:
                                    # add_into's small case, written out: both fit the same
                                    # metadata, so the sum needs no op.
                                    buffer[slot] = make_tensor(old.data + grad.data, old.device)
                                    old = None
                                else:  # Note [Adding into a buffer in place]
                                    old = None
                                    add_into(buffer, slot, grad)
                            if count > 1:
                                continue
                            target = cpu_queue
                            # Note [A process with only a CPU] in engine.devices
                            if not devices.only_cpu:
                                if len(buffer) != 1:
                                    target = workers.ready_queue(cpu_queue, buffer_device(buffer))
                                else:  # most nodes: buffer_device without the call or iterator
                                    g = buffer[0]
                                    if g is not None and g.device is not CPU:
                                        target = workers.ready_queue(cpu_queue, g.device)
                                    g = None
                            if target is queue:
                                if next_fn is not None:  # the last one readied runs next
                                    queue.push(node_task(graph_task, next_fn, next_grads))
                                    pushed += 1
                                next_fn, next_grads = nxt, buffer
                            else:
                                if not locked:  # the hand-over: see pass_outputs
                                    graph_task.shared = True
                                    graph_task.lock.acquire()
                                    locked = True
                                graph_task.outstanding_tasks += 1
                                task = node_task(graph_task, nxt, buffer)
                                push(target, task, "ready", counted=True)
                        # Each task kept here counts one, this node's own finished one less
                        # (Note [Counting a node's tasks once]).
                        if next_fn is None or pushed:
                            graph_task.outstanding_tasks += pushed - (next_fn is None)
                            if graph_task.outstanding_tasks == 0:
                                after = DONE
                        if locked:
                            graph_task.lock.release()
                            locked = False
                    # Hold no gradient past routing: AccumulateGrad steals a gradient only
                    # its input buffer holds (Note [Stealing the first gradient]).
                    outputs = grad = None  # type: ignore[assignment]
                    if release and (fn._saved or fn.releases_more):
                        fn.release_variables()
                if after is not None:  # from the general path, or DONE
                    if after is DONE:
                        return DONE
                    # A task of this graph task for this queue: Note [Running the next node
                    # directly].
                    next_fn, next_grads = after.fn, after.inputs
                    after = None
                if awaited is not None and awaited.future_completed:
                    if next_fn is not None:
                        queue.push(node_task(graph_task, next_fn, next_grads))
                    return None
                if heap:  # See Note [Running the next node directly]
                    if next_fn is None:
                        after = queue.take()
                    else:
                        after = queue.push_pop(node_task(graph_task, next_fn, next_grads))
                        next_fn = next_grads = None
                    if after is None:
                        return None
                    if (
                        after.graph_task is not graph_task
                        or after.fn is None
                        or graph_task.has_error
                    ):
                        return after  # thread_main runs it, or counts it done
                    fn, grads = after.fn, after.inputs  # type: ignore[assignment]  # a node's
                    after = None
                elif next_fn is None:
                    return None
                elif graph_task.has_error:
                    return node_task(graph_task, next_fn, next_grads)  # thread_main counts it
                else:
                    fn, grads = next_fn, next_grads
                    next_fn = next_grads = None
        except BaseException as exc:  # noqa: BLE001 - carried to the caller
            if locked:
                graph_task.lock.release()
            thread_on_exception(graph_task, fn, exc, self.workers)
            return task_done(graph_task)

    # Note [The plain path]
    # ~~~~~~~~~~~~~~~~~~~~~
    # Most nodes have no hooks, and most backward calls have no listener, no
    # anomaly mode and no ``inputs=`` pruning. For those, _run inlines what
    # evaluate_function, call_function, validate_outputs and pass_outputs do,
    # minus every branch that cannot apply: five calls fewer per node, and
    # each gradient checked against its metadata while the receiving node is
    # at hand. Anything else (and any graph task another thread can reach)
    # goes the general way. The two paths run nodes in the same order with
    # the same results; tests run graphs both ways and compare. Its loops
    # over a node's gradients and edges make no iterator where one slot
    # answers, and route by index: an ``enumerate`` object and its tuples
    # were 5% of a chain's node.
    #
    # One difference is allowed: a gradient that fails validation may leave
    # earlier gradients of the same node already routed. The graph task has
    # failed by then and nothing of it runs again.

    # Note [Running the next node directly]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # When a node makes exactly one node ready, for this thread's own queue,
    # and that queue is empty, pushing the task and popping it straight back
    # would give the same order: the thread runs it next without the queue
    # (the enqueue event is still emitted). A push by another thread that
    # lands meanwhile is simply ordered after it, as it would be had it come
    # a moment later. Only the task counting (outstanding_tasks) sees every
    # task; a chain runs with no queue traffic at all.
    #
    # When the queue is not empty, _run still does not go back to
    # thread_main: it pushes the last task it readied and pops the first
    # (push_pop: a real push and pop, so that ties move in the heap as they
    # do in PyTorch's), or pops if it readied none, and runs what it got if that is a
    # node of the same graph task. Anything else (another graph task's node,
    # a wake-up, a graph task that failed) goes back to thread_main, which
    # runs it next: the order is the queue's either way.

    # Note [Counting a node's tasks once]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # outstanding_tasks counts every task readied and not yet finished: each
    # node readies some and finishes its own. On the plain path, a task for
    # another thread's queue is counted before it is pushed (that thread may
    # run it at once), but the tasks kept for this thread's own queue, which
    # only this thread pops, are counted with the node's own finish in one
    # update after routing: none for a node of a chain, which readies one and
    # finishes one. Until that update the count is too high, never too low,
    # so no thread sees it reach zero early; and once another thread can see
    # the graph task the update is made under its lock, as the pushes are.

    def evaluate_function(
        self, graph_task: GraphTask, fn: Node, inputs: Any, queue: ReadyQueue
    ) -> Any:
        """Run one node and pass its outputs on, releasing the nodes that become ready.

        Returns what :meth:`pass_outputs` returns.
        """
        grads: list[Any] = inputs
        exec_info = graph_task.exec_info
        if exec_info:
            fn_info = exec_info[fn]
            if not fn_info.needed:
                grads = call_tensor_pre_hooks(graph_task, fn, grads)
            if fn_info.captures is not None:
                capture(graph_task, fn, fn_info.captures, grads)
            if not fn_info.needed:
                return self.pass_outputs(graph_task, fn, (), queue)
        outputs = call_function(graph_task, fn, grads)
        summaries = None
        if HUB.active:  # here, so that pass_outputs's accumulate events share the summaries
            summaries = summaries_of(outputs)
            emit("node_end", graph_task, fn, outputs=summaries)
        if not graph_task.keep_graph and (fn._saved or fn.releases_more):
            fn.release_variables()
            if fn._saved and HUB.active:
                emit("release_variables", graph_task, fn, count=len(fn._saved))
        checks = anomaly.STATE
        if outputs and checks.enabled and (checks.check_nan or checks.check_inf):
            check_values(graph_task, fn, outputs)
        return self.pass_outputs(graph_task, fn, outputs, queue, summaries)

    def pass_outputs(
        self,
        graph_task: GraphTask,
        fn: Node,
        outputs: Sequence[Any],
        queue: ReadyQueue,
        summaries: Sequence[LazySummary | None] | None = None,
    ) -> Any:
        """Route ``fn``'s outputs to the nodes they feed and count ``fn``'s task finished.

        All under the graph task's lock (Note [Locks]): each edge's node has its
        dependency count decremented and the gradient added to its input
        buffer; a node whose count reaches zero is queued on the device of its
        buffer. Returns ``DONE`` if this was the graph task's last task, a
        task this thread should run next (Note [Running the next node
        directly]), or ``None``. ``summaries`` are the ``node_end`` event's,
        which the ``accumulate`` events reuse: no code but the engine's runs
        in between, so the outputs cannot have changed.
        """
        active = HUB.active
        edges = fn._next_edges
        cpu_queue = graph_task.cpu_ready_queue
        direct: NodeTask | ExactNodeTask | None = None
        lock = graph_task.lock
        locked = graph_task.shared  # See Note [Graph tasks one thread runs]
        if locked:
            lock.acquire()
        try:
            dependencies = graph_task.dependencies
            not_ready = graph_task.not_ready
            exec_info = graph_task.exec_info
            for i, output in enumerate(outputs):
                edge = edges[i]
                if edge is None:
                    continue
                nxt = edge.function
                try:  # See Note [Arriving at a node]
                    count, buffer = arrive(
                        dependencies, not_ready, exec_info, nxt, len(nxt._input_metadata)
                    )
                except KeyError:
                    raise RuntimeError(f"dependency not found for {nxt.name()}") from None
                if active:  # See Note [One payload for every source] in engine.emitting
                    payload = decrement_payload(fn._id, fn.name(), edge.input_nr, count)
                    emit("dependency_decrement", graph_task, nxt, **payload)
                if buffer is None:
                    if active:
                        emit("skip", graph_task, nxt, **skip_payload(fn._id, edge.input_nr))
                    continue
                if output is not None:
                    old = buffer[edge.input_nr]
                    created = old is None
                    if created:
                        buffer[edge.input_nr] = output
                    elif grad_mode._state.enabled:
                        buffer[edge.input_nr] = old + output  # differentiable: create_graph
                    else:
                        old = None
                        add_into(buffer, edge.input_nr, output)
                    if active:
                        grad = summary_of(output) if summaries is None else summaries[i]
                        total = grad if created else summary_of(buffer[edge.input_nr])
                        payload = accumulate_payload(edge.input_nr, created, fn._id, grad, total)
                        emit("accumulate", graph_task, nxt, **payload)
                if count:
                    continue
                # buffer_device() written out: the node runs on its first non-CPU gradient's device.
                target = cpu_queue
                for g in buffer:
                    if g is not None and g.device is not CPU:
                        target = self.workers.ready_queue(cpu_queue, g.device)
                        break
                task = node_task(graph_task, nxt, buffer)
                graph_task.outstanding_tasks += 1
                if target is queue and direct is None and not queue.heap:
                    direct = task
                    if active:
                        emit_enqueue(queue, task, "ready")
                    continue
                if target is not queue and not locked:
                    graph_task.shared = True  # another thread will see it from now on
                    lock.acquire()
                    locked = True
                if direct is not None and target is queue:
                    queue.push(direct)  # two ready for this queue: let its order decide
                    direct = None
                push(target, task, "ready", counted=True)
            graph_task.outstanding_tasks -= 1
            if graph_task.outstanding_tasks == 0:
                return DONE
            return direct
        finally:
            if locked:
                lock.release()

    # Note [Graph tasks one thread runs]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Most graph tasks never leave the thread that runs them: every node is
    # on that thread's device and no reentrant call went to the pool. Until a
    # task of the graph task is handed to another thread, no other thread can
    # reach its state, so pass_outputs (and the plain path in _run) skips the
    # lock. The hand-over itself (pushing to another thread's queue, or to the
    # pool) first sets ``shared``, and the lock is taken before that push;
    # from then on every thread locks. Completion and errors always lock.


_default_engine = Engine()


def get_default_engine() -> Engine:
    """The process-wide engine."""
    return _default_engine
