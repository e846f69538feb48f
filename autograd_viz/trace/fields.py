"""The one list of a trace file's free-text fields (see :mod:`autograd_viz.trace.schema`).

Every string the schema reads without checking it against a fixed set is
somebody's text, and every output shows it as text (Note [Every string is
untrusted] below).
"""

from __future__ import annotations

# Note [Every string is untrusted]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# TEXT_PATHS is the one list of a trace file's free-text fields: every string
# the schema takes without checking it against a fixed set (names, dtypes,
# devices, threads, messages, tracebacks, module paths). Each is shown by
# every output as text, escaped for it (Note [Names are text] in
# autograd_viz/trace/text.py). A path names the record and the keys to the
# field; `[]` is any item of a list, `{}` any key of a map, `.*` its value;
# `event.thread` is a field every event has, `event:error.data.message` one
# of an event kind's data. Strings checked against a fixed set (a status, an
# event kind, "nan" for a float) are not text and are not listed.
# tests/fuzz/test_every_string_field.py fails when a trace holds a string
# field that is neither listed nor checked, and puts hostile text in every
# listed field at once through every output.

TEXT_PATHS: frozenset[str] = frozenset(
    {
        "header.engine",
        "header.sources[]",
        "header.process.host",
        "header.process.backend",
        "header.process.launcher",
        "graph_task.thread",
        "graph_task.roots[][]",
        "graph_task.modules{}",
        "graph_task.modules.*",
        "graph_task.cut",
        "graph_task.scopes[][]",
        "node.name",
        "node.device",
        "node.inputs[][]",
        "node.hooks[][]",
        "node.leaf.name",
        "node.leaf.aliases[]",
        "node.leaf.dtype",
        "node.leaf.device",
        "node.saved[].dtype",
        "node.saved[].device",
        "node.traceback[]",
        "node.scope[][]",
        "event.thread",
        "event.device",
        "event.node[]",
        "event:graph_task_start.data.roots[][]",
        "event:graph_task_start.data.root_grads[].dtype",
        "event:graph_task_start.data.root_grads[].device",
        "event:graph_task_start.data.source",
        "event:graph_task_end.data.exc_type",
        "event:graph_task_end.data.message",
        "event:graph_task_end.data.captured[].dtype",
        "event:graph_task_end.data.captured[].device",
        "event:enqueue.data.queue",
        "event:enqueue.data.queue_owner",
        "event:node_start.data.inputs[].dtype",
        "event:node_start.data.inputs[].device",
        "event:node_end.data.outputs[].dtype",
        "event:node_end.data.outputs[].device",
        "event:dependency_decrement.data.from_name",
        "event:accumulate.data.grad.dtype",
        "event:accumulate.data.grad.device",
        "event:accumulate.data.total.dtype",
        "event:accumulate.data.total.device",
        "event:accumulate.data.leaf_name",
        "event:capture.data.grad.dtype",
        "event:capture.data.grad.device",
        "event:hook.data.hook",
        "event:hook.data.hook_name",
        "event:skip.data.reason",
        "event:anomaly.data.op",
        "event:anomaly.data.aten_op",
        "event:anomaly.data.module",
        "event:anomaly.data.input_ops[]",
        "event:anomaly.data.traceback[]",
        "event:anomaly.data.grad.dtype",
        "event:anomaly.data.grad.device",
        "event:anomaly.data.tensor.dtype",
        "event:anomaly.data.tensor.device",
        "event:anomaly.data.inputs[].dtype",
        "event:anomaly.data.inputs[].device",
        "event:error.data.exc_type",
        "event:error.data.message",
        "event:error.data.traceback[]",
        "event:derived_mismatch.data.check",
        "event:derived_mismatch.data.expected[]",
        "event:derived_mismatch.data.observed[]",
        "event:derived_mismatch.data.message",
        "event:comm.data.op",
        "event:comm.data.params[]",
        "event:grads.data.findings[].parameter",
        "event:grads.data.findings[].module",
        "event:grads.data.findings[].why",
        "event:grads.data.findings[].where.file",
        "event:grads.data.findings[].where.function",
        "event:grads.data.findings[].where.code",
        "event:grads.data.flow[].module",
    }
)
"""Every free-text field of a trace file (Note [Every string is untrusted])."""
