"""Which module calls a node belongs to, as every view shows it.

A node's :attr:`~autograd_viz.trace.NodeInfo.scope` is what the source saw
when the node was made. One case needs reading beyond it, the same way in
every view (the module tree of ``dot`` and the TUI, the timeline's module
slices): a parameter of a ``torch.compile``d model, whose ``AccumulateGrad``
is made in the model's one call, belongs to its module's call, read from its
name (Note [Parameters of a compiled model] in ``autograd_viz/draw/modules.py``).
"""

from __future__ import annotations

from autograd_viz.trace.records import NodeInfo, Scope


def owner_scope(info: NodeInfo) -> Scope:
    """The module calls ``info`` is shown in: its scope, or for a parameter made in the
    outermost call alone, its module's calls read from its name (Note [Parameters of a
    compiled model] in ``autograd_viz/draw/modules.py``)."""
    chain = info.scope
    leaf = info.leaf
    if leaf is None or len(chain) != 1 or not leaf.name:
        return chain
    return parameter_chain(chain, leaf.name)


def parameter_chain(chain: Scope, name: str) -> Scope:
    """``chain`` (the outermost call alone) followed by the calls of the module that owns
    the parameter called ``name``, each call 0 (see :func:`owner_scope`)."""
    path, dot, _attribute = name.rpartition(".")
    top = chain[0][0]
    if not dot or path == top:
        return chain
    parts = path.split(".")
    # Inner paths start with the model's own where two models made one graph (block.0).
    start = top.count(".") + 1 if top and path.startswith(top + ".") else 0
    return chain + tuple((".".join(parts[: i + 1]), 0) for i in range(start, len(parts)))


__all__ = ["owner_scope", "parameter_chain"]
