"""Which module calls a node belongs to, as every view shows it.

A node's :attr:`~autograd_viz.trace.NodeInfo.scope` is what the source saw
when the node was made. One case needs reading beyond it, the same way in
every view (the module tree of ``dot`` and the TUI, the timeline's module
slices): a parameter's ``AccumulateGrad`` is made by the call that used the
parameter, and the module its name points to need not have been called. A
``torch.compile``d model's parameters are all made in the model's one call
(Note [Parameters of a compiled model] in ``autograd_viz/draw/model/tree.py``);
a parameter read outside its module's call (``torch.stack([m.weight for m in
self.heads])`` in the parent, a tied ``F.linear(x, self.wte.weight)``, a
hook) is made in the call that read it (Note [A parameter is named by its
model] in ``autograd_viz/sources/pytorch/module_names.py``). Both are shown in the
module their name points to, below the calls the source saw.
"""

from __future__ import annotations

from autograd_viz.trace.records import NodeInfo, Scope


def owner_scope(info: NodeInfo) -> Scope:
    """The module calls ``info`` is shown in: its scope, and for a parameter, the modules
    its name points to below it (:func:`parameter_chain`)."""
    leaf = info.leaf
    if leaf is None or not leaf.name:
        return info.scope
    return parameter_chain(info.scope, leaf.name)


def parameter_chain(chain: Scope, name: str) -> Scope:
    """``chain`` followed by the calls of the modules between its innermost call and the
    module that holds the parameter called ``name``, each call 0 (see :func:`owner_scope`);
    ``chain`` itself when the name points to no module below its innermost call.

    A chain of one call is the model's: the name's path is under it, its own path
    given only where two models made one graph (``block.0.weight`` under ``block``). A
    longer chain's innermost path starts the name's path when it holds the parameter.
    """
    if not chain:
        return chain
    path, dot, _attribute = name.rpartition(".")
    last = chain[-1][0]
    if not dot or path == last:
        return chain
    if len(chain) == 1:
        # Inner paths start with the model's own where two models made one graph (block.0).
        start = last.count(".") + 1 if last and path.startswith(last + ".") else 0
    elif path.startswith(last + "."):
        start = last.count(".") + 1
    else:
        return chain
    parts = path.split(".")
    return chain + tuple((".".join(parts[: i + 1]), 0) for i in range(start, len(parts)))


__all__ = ["owner_scope", "parameter_chain"]
