"""What op a backward node is the backward of, from its name, as PyTorch names them.

Pure string work, importing nothing of the engine: anomaly mode's messages and
the NaN report of a trace (which reads no engine) name ops the same way.
"""

from __future__ import annotations

import re

_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")
_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def op_name(node_name: str) -> str:
    """The op a node is the backward of, from PyTorch's naming: ``LogSoftmaxBackward0`` →
    ``log_softmax``."""
    base = _BACKWARD_SUFFIX.sub("", node_name) or node_name
    return _WORD_START.sub("_", base).lower()


__all__ = ["op_name"]
