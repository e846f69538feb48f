"""What runs around a node's ``apply``: hooks, captures for ``grad()``, anomaly checks.

Plain functions of a graph task and a node. The engine loop
(:mod:`engine.engine`) calls these only when a node has hooks, a capture or
anomaly mode is on, or someone listens; a node with none of them never enters
this module (Note [The plain path]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine import anomaly
from engine._context import TLS
from engine.emitting import any_defined, emit, emit_hook, summary_of
from engine.events import HUB
from engine.validation import check_hook_result, check_hook_results, validate_outputs

if TYPE_CHECKING:
    from engine.graph import Node
    from engine.graph_task import GraphTask

__all__ = [
    "call_function",
    "call_tensor_pre_hooks",
    "capture",
    "check_values",
]


def call_function(graph_task: GraphTask, fn: Node, grads: list[Any]) -> Sequence[Any]:
    """Hooks, ``apply``, output validation and post hooks of one node."""
    active = HUB.active
    hooks = fn._hooks  # Note [A node's hooks in one slot] in engine.graph
    if (hooks is not None and (hooks.tensor_pre or hooks.retains_grad)) or (
        fn.hooks_on_variable and fn.has_tensor_hooks()
    ):
        grads = call_tensor_pre_hooks(graph_task, fn, grads)
    if hooks is not None and hooks.pre:
        grads = _call_pre_hooks(graph_task, fn, grads)
    if active:
        emit(
            "node_start",
            graph_task,
            fn,
            inputs=[summary_of(g) for g in grads],
        )
    outputs: Sequence[Any]
    # No loop variable may hold a gradient into apply (Note [Stealing the first gradient]).
    if not fn.skips_undefined_grads or any_defined(grads):
        outputs = _apply_as_current(fn, grads) if anomaly.STATE.enabled else fn.apply(grads)
    else:
        outputs = [None] * fn.num_outputs
    outputs = validate_outputs(fn._next_edges, outputs, fn)
    hooks = fn._hooks  # again: a hook that ran may have added one
    if hooks is not None and hooks.post:
        outputs = _call_post_hooks(graph_task, fn, list(outputs), grads)
    return outputs  # evaluate_function emits node_end


def call_tensor_pre_hooks(graph_task: GraphTask, fn: Node, grads: list[Any]) -> list[Any]:
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
                    emit_hook(graph_task, fn, "tensor_pre", hook, result is not None, slot=i)
                if result is not None:
                    grads[i] = check_hook_result(result, grads[i], hook)
    retains = fn._retains_grad_hooks
    if retains:
        for i, ref in list(retains.items()):
            tensor = ref()
            if tensor is None or grads[i] is None:
                continue
            grad = grads[i]
            if tensor._grad is None:
                tensor._grad = grad.clone()  # PyTorch's CloneBackward0 under create_graph
            else:
                tensor._grad = tensor._grad + grad
            if HUB.active:
                emit_hook(graph_task, fn, "retain_grad", "retain_grad", False, slot=i)
    return grads


def _call_pre_hooks(graph_task: GraphTask, fn: Node, grads: list[Any]) -> list[Any]:
    assert fn._pre_hooks is not None
    for hook in list(fn._pre_hooks.values()):
        result = hook(tuple(grads))
        if HUB.active:
            emit_hook(graph_task, fn, "pre", hook, result is not None)
        if result is not None:
            grads = check_hook_results(result, grads, hook)
    return grads


def _call_post_hooks(
    graph_task: GraphTask, fn: Node, outputs: list[Any], grads: list[Any]
) -> list[Any]:
    assert fn._post_hooks is not None
    for hook in list(fn._post_hooks.values()):
        result = hook(tuple(outputs), tuple(grads))
        if HUB.active:
            emit_hook(graph_task, fn, "post", hook, result is not None)
        if result is not None:
            outputs = check_hook_results(result, outputs, hook)
    return outputs


def capture(
    graph_task: GraphTask, fn: Node, captures: list[tuple[int, int]], grads: list[Any]
) -> None:
    with graph_task.lock:
        for input_idx, output_idx in captures:
            grad = grads[input_idx]
            graph_task.captured_vars[output_idx] = grad
            if HUB.active:
                emit(
                    "capture",
                    graph_task,
                    fn,
                    slot=input_idx,
                    output_index=output_idx,
                    grad=summary_of(grad),
                )


def check_values(graph_task: GraphTask, fn: Node, outputs: Sequence[Any]) -> None:
    """Anomaly mode: raise at the first non-finite output, or report each one."""
    if anomaly.collecting_unheard():
        return
    collect = anomaly.STATE.mode == "collect"
    for i, output in enumerate(outputs):
        if output is None:
            continue
        value = anomaly.non_finite_value(output)
        if value is None:
            continue
        if HUB.active:
            emit(
                "anomaly",
                graph_task,
                fn,
                phase="backward",
                output_index=i,
                value=value,
                raised=not collect,
                grad=summary_of(output),
                traceback=fn._metadata.get("traceback_") if fn._metadata else None,
            )
        if not collect:
            raise RuntimeError(
                f"Function '{fn.name()}' returned {value} values in its {i}th output."
            )


def _apply_as_current(fn: Node, grads: list[Any]) -> Sequence[Any]:
    """``fn.apply`` with ``fn`` as the thread's running node (Note [Induced by] in anomaly.py)."""
    before = TLS.current_node
    TLS.current_node = fn
    try:
        return fn.apply(grads)
    finally:
        TLS.current_node = before
