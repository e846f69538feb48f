"""``autograd_viz.watch_grads()``: why parameters got no gradient, on either engine.

Around training code::

    with autograd_viz.watch_grads() as watch:
        loss = model(x).loss
        loss.backward()
    for repeated in watch.report.missing:
        print(repeated.finding.parameter, repeated.finding.why, repeated.finding.where)

Note [Arming the gradient watch]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
As the NaN checks (Note [Arming the PyTorch checks] in ``nan/watch.py``): code
on our engine alone never imports PyTorch; the PyTorch side is armed at once
when ``torch`` is imported, else right after the watched code imports it, on
the thread that entered the block (PyTorch's function modes belong to a
thread). Our engine's side listens to its events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autograd_viz.grads.report import CallGrads, GradsReport
from autograd_viz.sources.import_hooks import armed_on_this_thread
from autograd_viz.sources.tracebacks import trim_traceback


class GradsWatch:
    """What :func:`watch_grads` saw."""

    def __init__(self, report: GradsReport) -> None:
        self.report = report
        """Every backward call's findings, merged, and each call's flow table."""

    @property
    def found(self) -> bool:
        """Whether a trainable parameter got no gradient in some backward call."""
        return self.report.found


@contextmanager
def watch_grads(
    *, keep_flow: int = 10_000, on_call: Callable[[CallGrads], object] | None = None
) -> Iterator[GradsWatch]:
    """Explain, after each backward call inside the block, every parameter that got no gradient.

    The parameters looked at are those of every module the forward ran
    (called from outside any other module: the model, its loss), plus any
    ``nn.Parameter`` used outside them; on our engine, every leaf that
    requires grad and has a name (``tensor.name``, as ``mlp.out.weight``).
    Results are bit-identical with and without the watch.

    Args:
        keep_flow: how many calls' flow tables are kept (the first ones).
        on_call: also called with each call's findings as the call returns (a
            recording puts them in its trace: Note [Gradient findings in a trace]
            in ``autograd_viz/grads/recorded.py``).

    Yields:
        A :class:`GradsWatch`; read its ``report`` inside or after the block.
    """
    report = GradsReport(keep_flow=keep_flow)

    def add(call: CallGrads) -> None:
        report.add(call)
        if on_call is not None:
            on_call(call)

    def arm() -> Callable[[], None]:
        from autograd_viz.grads.torch_calls import TorchGrads

        grads = TorchGrads(add)
        grads.arm()
        return grads.disarm

    from autograd_viz.grads.engine_calls import EngineGrads

    ours = EngineGrads(add)
    ours.arm()
    try:
        with armed_on_this_thread(arm):
            try:
                yield GradsWatch(report)
            except BaseException as exc:
                trim_traceback(exc)  # Note [A traceback as without us]
                raise
    finally:
        ours.disarm()
