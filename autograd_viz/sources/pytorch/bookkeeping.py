"""PyTorch's bookkeeping between two nodes, replayed from the graph.

What ``engine.cpp`` does between two nodes is invisible from Python but
deterministic: a node's outputs decrement its successors' dependency
counts, are summed into their input buffers, and a successor whose count
reaches zero is pushed onto the ready queue. :class:`Bookkeeping` replays
that from the graph for one graph task and emits it as our engine's events
(``dependency_decrement``, ``accumulate`` into a buffer, ``skip``,
``capture``, ``enqueue``), each with ``"derived": True``, and checks every
prediction (Note [Checking what is derived]).

Note [Checking what is derived]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch pops the ready queue in ``ReadyQueue``'s order: deeper reentrant
calls first, then higher ``sequence_nr`` (``AccumulateGrad`` first), ties
in ``std::priority_queue``'s heap order, which :mod:`heapq` reproduces when
equal keys compare equal. The counts, the buffers, the pruning and the
queue's order are the engine's own scheduler (:mod:`engine.scheduler`), run
over PyTorch's graph (``TorchNode`` gives its nodes the scheduler's
protocol): nothing of it is written here again. The model queue is the calling thread's, shared by
the graph tasks nested on it, as PyTorch's is; it is popped at every
observed node start, and the task it predicts must be the node that starts.
Tasks whose pop PyTorch does not show (the ``GraphRoot`` of several roots, a
root or a ``grad()`` input that is popped but not run) are played as they
come off the model queue. An input-buffer sum that several edges make is
kept as a copy and compared bit for bit with what the node receives; a
``grad()`` result with what the call returns. Any difference becomes a
``derived_mismatch`` event and a :class:`DerivedMismatchWarning`, never a
silent lie.
"""

from __future__ import annotations

import heapq
import threading
import warnings
from typing import Any, TypeAlias

import numpy as np
import torch

from autograd_viz.sources.once import program_stacklevel
from autograd_viz.sources.pytorch.emitter import Emitter
from autograd_viz.sources.pytorch.graph import GraphPlan
from autograd_viz.sources.pytorch.hooks import TENSOR_PRE
from autograd_viz.sources.pytorch.host_view import host_view
from autograd_viz.sources.pytorch.node import TorchNode
from autograd_viz.sources.pytorch.summary import LARGE
from engine.emitting import accumulate_payload, decrement_payload, skip_payload
from engine.scheduler import ExactQueueEntry, QueueEntry, arrive, ready_entry

DERIVED_MISMATCH = "derived_mismatch"
"""The event kind of a derived prediction PyTorch contradicted."""

COPY_LIMIT = 1 << 24
"""Elements up to which an input-buffer sum of several edges is copied to check and show it."""


class DerivedMismatchWarning(RuntimeWarning):
    """What PyTorch did differs from what replaying its bookkeeping predicted."""


_Task: TypeAlias = tuple["Bookkeeping", TorchNode]
"""A task of the model ready queue: the graph task's bookkeeping and the node."""

_Entry: TypeAlias = QueueEntry | ExactQueueEntry
"""A model queue entry: the engine's priority carrying a :data:`_Task` (``.task``)."""


class _ThreadQueue(threading.local):
    def __init__(self) -> None:
        self.queue: list[_Entry] = []


_QUEUES = _ThreadQueue()
"""Each thread's model of its PyTorch ready queue."""


def forget_leftovers() -> None:
    """Drop the model tasks that graph tasks which failed left in this thread's queue.

    A failed graph task leaves its queued tasks in PyTorch's thread-local ready
    queue, and a later call on that thread pops and discards them when they
    come first. The model cannot know whether an unwatched call did so in
    between, so a watched call starts without them; if they still sit in
    PyTorch's heap and change how ties pop, the order check says so.
    """
    queue = _QUEUES.queue
    if any(entry.task[0].finished for entry in queue):
        queue[:] = [entry for entry in queue if not entry.task[0].finished]
        heapq.heapify(queue)


class Bookkeeping:
    """PyTorch's dependency counts, input buffers and ready queue for one graph task.

    Args:
        plan: the graph task's graph and PyTorch's numbers for it.
        graph_task: our id of the graph task.
        depth: its reentrant depth (the ready queue's first key).
        emit: how its events are emitted.
        copies: follow sums by copy and check them; ``False`` for tensors
            whose values cannot be read (fake, meta, functorch wrappers).
    """

    def __init__(
        self,
        plan: GraphPlan,
        graph_task: int,
        depth: int,
        emit: Emitter,
        copies: bool = True,
        queue: list[Any] | None = None,
    ) -> None:
        self.plan = plan
        self.graph_task = graph_task
        self.depth = depth
        self.finished = False
        """Set when the graph task ends: its tasks left in the queue are leftovers."""
        self.mismatches = 0
        """How many derived predictions PyTorch contradicted."""
        self._emit = emit
        self._remaining = dict(plan.dependencies)
        self._not_ready: dict[TorchNode, list[Any]] = {}
        self._copy_slots = {edge for edge, count in plan.fan_in.items() if count > 1}
        for node, captures in plan.captures.items():
            self._copy_slots.update((node, slot) for slot, _ in captures)
        self.hooked: dict[TorchNode, set[int]] = {}
        """Input slots whose tensor hooks run between the buffer and the node (hooks.py)."""
        for node in plan.nodes:
            for hook in node.hooks:
                if hook.kind == TENSOR_PRE and hook.slot is not None:
                    self.hooked.setdefault(node, set()).add(hook.slot)
                    self._copy_slots.add((node, hook.slot))
        if not copies:
            self._copy_slots.clear()
        self.followed = {node for node, _ in self._copy_slots}
        """Nodes with a buffer slot followed by copy (:meth:`keep_copy`)."""
        self._copies: dict[tuple[TorchNode, int], torch.Tensor] = {}
        self._sums_only = {
            key
            for key in self._copy_slots
            if key[1] not in self.hooked.get(key[0], ())
            and all(slot != key[1] for slot, _ in plan.captures.get(key[0], ()))
        }
        """Slots followed only for their sum, whose first gradient is kept as it is (Note
        [Following a sum without copying its first gradient])."""
        self._firsts: dict[tuple[TorchNode, int], int] = {}
        """Slots whose copy is still their first gradient itself, with its version then."""
        self._kept_sums: set[int] = set()
        """Our sums made in kept memory (Note [Sums in kept memory]), by id, until let go."""
        self.captured: dict[int, torch.Tensor | None] = {}
        """Each ``grad()`` result as the model summed it, by output index."""
        self._owner = f"graph_task {graph_task}"
        # The calling thread's, where every step of the task runs; a derivation after the call
        # (call_derive.py) gives its own model queue.
        self._queue = _QUEUES.queue if queue is None else queue

    def check_results(self, results: list[Any]) -> None:
        """Compare the ``grad()`` results PyTorch returned with the captured sums."""
        for index, copy in self.captured.items():
            got = results[index] if index < len(results) else None
            if not _same_values(copy, got):
                self.mismatch(
                    "capture",
                    None,
                    None,
                    f"grad() result {index} differs from the sum of the gradients "
                    "the graph delivered to it",
                )

    def release(self) -> None:
        """Drop every copy (the graph task is over)."""
        self.finished = True
        if self._kept_sums:
            for copy in (*self._copies.values(), *self.captured.values()):
                self._let_go(copy)
        self._copies.clear()
        self._firsts.clear()
        self.captured.clear()

    def run_graph_root(self, grads: list[Any], summaries: list[Any]) -> None:
        """PyTorch's ``GraphRoot`` of several roots runs, unseen: it hands out their gradients."""
        root = self.plan.root
        self._emit("node_start", root, {"inputs": (), "derived": True})
        self._emit("node_end", root, {"outputs": summaries, "derived": True})
        self.pass_outputs(root, grads, summaries)

    def pass_outputs(self, node: TorchNode, outputs: Any, summaries: list[Any]) -> None:
        """``Engine::evaluate_function``'s routing of a node's outputs, derived."""
        remaining = self._remaining
        not_ready = self._not_ready
        exec_info = self.plan.exec_info
        copy_slots = self._copy_slots
        emit = self._emit
        # Rows checked for once per node, not per event (Emitter.row).
        put = emit.row if emit.building() else emit
        node_id = node._id
        from_name = node._name
        count_out = len(outputs)
        for i, edge in enumerate(node._next_edges):
            if edge is None:
                continue
            nxt = edge.function
            slot = edge.input_nr
            try:  # Note [Arriving at a node] in engine/scheduler.py
                count, buffer = arrive(remaining, not_ready, exec_info, nxt, nxt.num_inputs)
            except KeyError:
                self.mismatch("dependencies", nxt, node, f"no dependency left for {nxt.name()}")
                continue
            # The engine's payloads, marked derived (Note [One payload for every source]).
            data = decrement_payload(node_id, from_name, slot, count)
            data["derived"] = True
            put("dependency_decrement", nxt, data)
            if buffer is None:
                data = skip_payload(node_id, slot)
                data["derived"] = True
                put("skip", nxt, data)
                continue
            output = outputs[i] if i < count_out else None
            if output is not None and slot < len(buffer):
                created = buffer[slot] is None
                buffer[slot] = True  # the model buffer knows which slots hold a gradient
                total = None
                if (nxt, slot) in copy_slots:
                    self.keep_copy(nxt, slot, output)
                    total = self._copies.get((nxt, slot))
                grad = summaries[i]
                summed = grad if created else None
                if total is not None and not created:  # a sum of our own, never written in place
                    summed = emit.summary(total, hold=True)
                data = accumulate_payload(slot, created, node_id, grad, summed)
                data["derived"] = True
                put("accumulate", nxt, data)
            if not count:
                self.push(nxt, "ready", put)

    def keep_copy(self, node: TorchNode, slot: int, grad: torch.Tensor) -> None:
        """Follow a buffer slot that several edges fill, or that ``grad()`` captures, by copy.

        See Note [Following a sum without copying its first gradient].
        """
        key = (node, slot)
        if key not in self._copy_slots:
            return
        # Detached, the copies and their sums record no graph (no_grad() costs more).
        arriving = grad.detach()
        in_rows = self._emit.max_values is not None  # summaries made at once
        old = self._copies.get(key)
        if old is not None:
            first = self._firsts.pop(key, None)
            if first is not None and old._version != first:
                # Written in place since it arrived: the buffer no longer holds what arrived.
                del self._copies[key]
                self._copy_slots.discard(key)
                self.mismatch(
                    "buffer",
                    node,
                    node,
                    f"input {slot} of {node.name()} (node {node._id}) was written in place "
                    "after a gradient arrived there and before the next one (by a node or "
                    "hook that changed a tensor it shares): its sum is not checked",
                )
            elif first is None and in_rows and old.numel() >= LARGE:
                old.add_(arriving)  # a sum of our own, summarized already
            else:  # PyTorch's InputBuffer adds in this order
                total = _sum_in_kept_memory(old, arriving) if in_rows else None
                if total is None:
                    total = old + arriving
                else:
                    self._kept_sums.add(id(total))
                self._copies[key] = total
        elif grad.numel() <= COPY_LIMIT:
            if key in self._sums_only:
                self._copies[key] = arriving
                self._firsts[key] = arriving._version
            else:
                self._copies[key] = arriving.clone()
        else:
            self._copy_slots.discard(key)

    def _let_go(self, copy: torch.Tensor | None) -> None:
        """A copy is done with: a sum made in kept memory goes back to it."""
        if copy is not None and id(copy) in self._kept_sums:
            self._kept_sums.discard(id(copy))
            _give_back(copy)

    # Note [Following a sum without copying its first gradient]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A slot several edges fill is followed by our own sum of what arrives, to
    # show the buffer's total and to check it against what the node receives.
    # Its first gradient need not be copied: PyTorch keeps it in the buffer as
    # it is until the next one arrives, and the next one is announced by the
    # post hook of the node that made it, which runs before PyTorch adds it. So
    # the first is kept as it is (a detached alias, which holds no graph), the
    # second makes our sum, ``first + second`` as InputBuffer adds them, and the
    # alias goes before PyTorch adds in place into the first (an alias of a
    # storage keeps PyTorch from doing so, and the alias is gone by then). Its
    # version counter, which every view and alias shares, vouches that nothing
    # wrote it meanwhile; if something did, the slot is no longer followed
    # (no total, no check) rather than checked against values that are gone.
    # A later arrival adds into our own sum in place where the sum's earlier
    # summary was made at once (a large tensor in rows); elsewhere a new sum is
    # made, since a summary may be made from the old one later. A slot a hook of
    # the user's or ``grad()`` reads is still copied: a hook may write it in place.
    # On a GPT-2 whose embedding and output weights are one tensor (a 50257×256
    # sum on its AccumulateGrad), a copy, a new sum and ``torch.equal`` cost 60 ms
    # a step here, mostly the page faults of fresh 51 MB allocations. A large sum
    # of our own is made in memory kept from call to call while the bridge is
    # armed (Note [Sums in kept memory]).

    def push(self, node: TorchNode, reason: str, put: Any = None) -> None:
        """A task for ``node`` goes onto the thread's ready queue (``put``: how its event is
        emitted, the emitter by default)."""
        queue = self._queue
        heapq.heappush(queue, ready_entry(self.depth, node.sequence_nr, (self, node)))
        device = node.device
        if device == "cpu":
            queue_name, owner = "cpu", self._owner
        else:
            queue_name, owner = device, "device"
        (put or self._emit)(
            "enqueue",
            node,
            {
                "queue": queue_name,
                "queue_owner": owner,
                "reason": reason,
                "queue_length": len(queue),
                "derived": True,
            },
        )

    def advance(self, node: TorchNode) -> None:
        """Pop the model queue up to ``node``, which PyTorch starts now."""
        queue = self._queue
        while queue:
            entry = heapq.heappop(queue)
            owner, popped = entry.task
            if owner is not self:
                if owner.finished:
                    continue  # a failed graph task's leftover: PyTorch discards it too
                heapq.heappush(queue, entry)
                break
            if popped is node:
                return
            if node.fn is not None and self.runs(popped):
                self.mismatch(
                    "order",
                    popped,
                    node,
                    f"{node.name()} (node {node._id}) started where PyTorch's order "
                    f"predicted {popped.name()} (node {popped._id})",
                )
                heapq.heappush(queue, entry)
                self._unqueue(node)
                return
            self.run_unseen(popped)
        self.mismatch(
            "order", None, node, f"{node.name()} (node {node._id}) started but was never enqueued"
        )

    def peek(self) -> TorchNode | None:
        """The node PyTorch runs next for this graph task, as the model queue predicts it.

        ``None`` when another graph task's task comes first, or the next task only
        captures. What a node watched by its post hook alone is, while it runs
        (Note [One hook per node] in ``watch.py``).
        """
        queue = self._queue
        if not queue:
            return None
        owner, node = queue[0].task
        if owner is not self or not self.runs(node):
            return None
        return node

    def runs(self, node: TorchNode) -> bool:
        """Whether PyTorch runs ``node`` when it pops it (else it only captures, or skips)."""
        return not self.plan.pruned or node in self.plan.needed

    def _unqueue(self, node: TorchNode) -> None:
        queue = self._queue
        kept = [e for e in queue if not (e.task[0] is self and e.task[1] is node)]
        if len(kept) != len(queue):
            queue[:] = kept
            heapq.heapify(queue)

    def run_unseen(self, node: TorchNode) -> None:
        """A task PyTorch pops without running the node: a ``grad()`` input's capture."""
        for slot, index in self.plan.captures.get(node, ()):
            self.capture(node, slot, index)

    def capture(self, node: TorchNode, slot: int, index: int) -> None:
        """A ``grad()`` result is taken from ``node``'s buffer (``evaluate_function``)."""
        copy = self._copies.pop((node, slot), None)
        if (node, slot) in self._copy_slots:
            self.captured[index] = copy
        self._emit(
            "capture",
            node,
            {
                "slot": slot,
                "output_index": index,
                "grad": self._emit.summary(copy),
                "derived": True,
            },
        )

    def drain(self) -> None:
        """The call returned: play the model tasks left, which PyTorch popped unseen."""
        queue = self._queue
        while queue and queue[0].task[0] is self:
            node = heapq.heappop(queue).task[1]
            if self.runs(node):
                self.mismatch(
                    "order",
                    node,
                    None,
                    f"{node.name()} (node {node._id}) was predicted to run but never did",
                )
            else:
                self.run_unseen(node)

    def check_buffer(
        self,
        node: TorchNode,
        grads: tuple[torch.Tensor | None, ...],
        before: dict[int, tuple[torch.Tensor | None, bool]],
    ) -> dict[int, torch.Tensor]:
        """Compare what ``node`` receives with the sums the model followed by copy.

        Args:
            node: the node starting.
            grads: what it receives.
            before: filled with ``(sum, changed)`` for each slot whose tensor
                hooks ran in between (:attr:`hooked`): a difference there is
                the hooks', shown on their ``hook`` events, not a mismatch.

        Returns:
            The copies that equal what ``node`` receives, bit for bit and in
            the same layout, by input slot: their summaries (made for the
            buffer's ``total``) are the inputs' summaries.
        """
        same = {}
        hooked = self.hooked.get(node, ())
        firsts = self._firsts
        for slot, grad in enumerate(grads):
            copy = self._copies.pop((node, slot), None)
            if firsts:
                firsts.pop((node, slot), None)
            if slot in hooked:
                before[slot] = (copy, not _same_values(copy, grad))
            if copy is None:
                continue
            # Summarized from here on, before any later sum of this call is made: its memory
            # may serve again (Note [Sums in kept memory]).
            self._let_go(copy)
            if slot in hooked:
                if not before[slot][1] and grad.stride() == copy.stride():  # type: ignore[union-attr]
                    same[slot] = copy
            elif not _same_values(copy, grad):
                self.mismatch(
                    "buffer",
                    node,
                    node,
                    f"input {slot} of {node.name()} (node {node._id}) differs from the sum of "
                    "the gradients delivered to it (a hook that autograd-viz cannot see, "
                    "registered in C++, may have replaced it)",
                )
            elif grad.stride() == copy.stride():  # type: ignore[union-attr]
                same[slot] = copy
        return same

    def mismatch(
        self, check: str, expected: TorchNode | None, observed: TorchNode | None, message: str
    ) -> None:
        """Report a prediction PyTorch contradicted: an event and a warning."""
        self.mismatches += 1
        warnings.warn(
            f"autograd-viz: {message}", DerivedMismatchWarning, stacklevel=program_stacklevel()
        )
        self._emit(
            DERIVED_MISMATCH,
            observed,
            {
                "check": check,
                "expected": None if expected is None else (expected._id, expected.name()),
                "observed": None if observed is None else (observed._id, observed.name()),
                "message": message,
                "derived": True,
            },
        )


# Note [Sums in kept memory]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# PyTorch's CPU allocator hands a tensor of more than 32 MB fresh pages from
# the system each time, and touching them costs more than adding into them:
# our sum of a BERT's or a GPT-2's tied embedding gradients (31 and 51 MB)
# took 15 and 25 ms a step, nine tenths of it page faults. So a large sum of
# our own (a million elements or more, on the CPU, while rows are built: its
# summaries are made at once) is written into memory of its shape and strides
# that an earlier sum on the same thread used, kept while the bridge is armed
# (``forget_sums`` when it is disarmed) and at most eight blocks; each thread
# has its own, so a sum in use is never written by a call of another thread;
# the same values, bit for bit
# (``torch.add`` with ``out=``), in the same layout. A sum goes back to the
# memory kept when the node that receives it starts (after its comparison and
# summaries) or when the call ends; its summaries never read it again: a
# summary looked up by memory or by object checks the version counter, which
# writing into it moves.

KEPT_SUM_MIN = 1 << 20
"""Elements from which our own sums are made in memory kept from call to call."""
_KEPT_SUMS_MAX = 8
_free_sums: dict[tuple[Any, ...], list[torch.Tensor]] = {}
_free_lock = threading.Lock()


def _sum_in_kept_memory(old: torch.Tensor, arriving: torch.Tensor) -> torch.Tensor | None:
    """``old + arriving`` in memory kept from an earlier sum; ``None``: not a sum kept so."""
    if (
        old.numel() < KEPT_SUM_MIN
        or type(old) is not torch.Tensor
        or not old.is_cpu
        or arriving.dtype is not old.dtype
        or arriving.shape != old.shape
        or not (old.is_contiguous() or (old.dim() == 2 and old.t().is_contiguous()))
    ):
        return None
    key = _kept_key(old)
    with _free_lock:
        free = _free_sums.get(key)
        kept = free.pop() if free else None
    if kept is None:
        kept = torch.empty_strided(old.shape, old.stride(), dtype=old.dtype)
    return torch.add(old, arriving, out=kept)


def _kept_key(t: torch.Tensor) -> tuple[Any, ...]:
    """Which kept memory can hold ``t``: this thread's, of its shape, strides and dtype."""
    return (threading.get_ident(), t.shape, t.stride(), t.dtype)


def _give_back(total: torch.Tensor) -> None:
    key = _kept_key(total)
    with _free_lock:
        if sum(len(free) for free in _free_sums.values()) >= _KEPT_SUMS_MAX:
            _free_sums.clear()
        _free_sums.setdefault(key, []).append(total)


def forget_sums() -> None:
    """Let go of the memory kept for sums (Note [Sums in kept memory]): the bridge is disarmed."""
    with _free_lock:
        _free_sums.clear()


def _same_values(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bit-for-bit equality (a NaN equals the same NaN)."""
    if a is None or b is None:
        return a is None and b is None
    b = b.detach()  # ``a`` is a detached copy: nothing here records a graph
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_floating_point():
        as_int = _SAME_SIZE_INTS.get(a.element_size())
        if as_int is not None:
            a, b = a.view(as_int), b.view(as_int)
    if a.is_cpu and a.numel() >= LARGE:
        # NumPy compares a large CPU block in half the time of torch.equal (one thread).
        try:
            return bool(np.array_equal(host_view(a), host_view(b)))
        except RuntimeError:  # a negative or conjugate view: torch's way
            pass
    return bool(torch.equal(a, b))


_SAME_SIZE_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
