"""The forward NaN checks: where a NaN or an Inf is born in a PyTorch program, op by op.

:mod:`~autograd_viz.nan.forward.checks` holds :class:`TorchNanChecker`, which arms its
parts on the thread that enters it: :mod:`~autograd_viz.nan.forward.module_hooks` (the module
running), :mod:`~autograd_viz.nan.forward.functions` (the torch function running and the
nodes it makes), :mod:`~autograd_viz.nan.forward.ops` (every aten op checked),
:mod:`~autograd_viz.nan.forward.births` (the forward findings, told through
:mod:`~autograd_viz.nan.forward.lineage` where their values reach),
:mod:`~autograd_viz.nan.forward.compiled` (a compiled region's edges) and
:mod:`~autograd_viz.nan.forward.backward` (anomaly mode's backward check). Each part gets
the settings (:mod:`~autograd_viz.nan.forward.settings`, at the bottom) and the callbacks
it needs, never the checker.
"""
