"""The torch functions a checked program calls: where each node came from, and births inside.

One job of :class:`~autograd_viz.nan.forward.checks.TorchNanChecker`,
driven by its ``TorchFunctionMode``: each new ``grad_fn`` is tied to the
user's ``file:line`` and the module it was made in (its ``metadata``), and a
value born non-finite inside a torch function whose node autograd has not
attached yet waits until the function returns, then goes out on that node.
A backward call runs with the checker's dispatch mode stepped aside (Note
[Born in PyTorch] in ``checks.py``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _python_dispatch

from autograd_viz.nan.forward.lineage import LOSS, backward_roots, tag_node
from autograd_viz.sources.pytorch.caller_line import call_from, caller
from autograd_viz.sources.pytorch.compiled import is_compiling
from autograd_viz.sources.pytorch.op_values import new_nodes
from autograd_viz.sources.pytorch.origins import ORIGIN_KEY, Origin, user_frames

if TYPE_CHECKING:
    from autograd_viz.nan.forward.births import Birth
    from autograd_viz.nan.forward.module_hooks import ModuleHooks

_BACKWARD_CALLS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})

# Note [One origin per place]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A training loop makes its nodes at the same few lines every step. The origin of a
# node is a function of its place (file, line, function, module running), and so is its
# formatted line (read from ``linecache``, as a traceback reads it): both are made once
# per place and reused, so tagging a node costs two dictionary writes. The nodes of each
# call get a list of their own for ``traceback_``. The places are strings only, nothing
# of the program kept alive, and the cache starts again past ``_MAX_ORIGINS`` places.

_MAX_ORIGINS = 4096
_ORIGINS: dict[tuple[str, int, str, str | None], tuple[Origin, tuple[str, ...]]] = {}


class _Calls(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.pending: list[Birth] = []
        self.lineages: list[tuple[int, frozenset[int]]] = []
        """(sequence number of a node being made, the births its op read or made)."""
        self.transformed = 0
        """How many torch functions running were called inside a ``torch.func`` transform."""


class FunctionCalls:
    """The torch functions running on each thread, the nodes they make, the births they hold.

    Args:
        modules: the module running on each thread (its name goes into each origin).
        modes: the checker's modes, its dispatch mode last once armed.
        emit: emits a birth on its node (``None`` when there is none).
        reached: told of the roots of each backward call: they reach the loss
            (Note [Lineage] in ``lineage.py``).
    """

    def __init__(
        self,
        modules: ModuleHooks,
        modes: list[Any],
        emit: Callable[[Birth, Any], None],
        reached: Callable[[str, Any], None],
    ) -> None:
        self._modules = modules
        self._modes = modes
        self._emit = emit
        self._reached = reached
        self._local = _Calls()

    def wait_for_node(self, birth: Birth) -> bool:
        """Keep ``birth`` until the torch function running returns, if one is (its node is
        known once autograd attached it); ``False`` when none runs."""
        local = self._local
        if not local.depth:
            return False
        local.pending.append(birth)
        return True

    def transformed(self) -> bool:
        """Whether a torch function running was called inside a ``torch.func`` transform
        (its aten ops see unwrapped tensors: the lineage cannot follow them)."""
        return self._local.transformed > 0

    def node_lineage(self, node_nr: int, births: frozenset[int]) -> None:
        """The node numbered ``node_nr``, once made, keeps ``births`` (Note [Lineage]);
        nothing when no torch function runs (no node to find when it returns)."""
        local = self._local
        if local.depth:
            local.lineages.append((node_nr, births))

    def call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run a torch function; tag the nodes it made and emit the births it had."""
        local = self._local
        start = torch._C._autograd._get_sequence_nr()
        local.depth += 1
        transformed = torch._C._functorch.maybe_current_level() is not None
        local.transformed += transformed
        out = None
        # Called as from the caller's line, for the warnings it raises (Note [A warning keeps
        # its line] in sources/pytorch/caller_line.py); the mode's own frame is two up.
        frame = caller(sys._getframe(2), func)
        try:
            if func in _BACKWARD_CALLS and self._modes:
                # From the caller's line: a NaN check stopping the program here ends its
                # traceback there (Note [A traceback as without us]).
                call_from(frame, self._reached, (LOSS, backward_roots(args, kwargs)), {})
                with self._outside_backward():
                    out = call_from(frame, func, args, kwargs)
            else:
                out = call_from(frame, func, args, kwargs)
        finally:
            local.depth -= 1
            local.transformed -= transformed
            pending = local.pending if local.depth == 0 else None
            lineages = local.lineages if local.depth == 0 else None
            made = torch._C._autograd._get_sequence_nr() != start
            if made or pending or lineages:
                nodes = new_nodes(out, start) if made else {}
                if made:
                    self._tag(nodes.values())
                if lineages:
                    local.lineages = []
                    for node_nr, births in lineages:
                        fn = nodes.get(node_nr)
                        if fn is not None:
                            tag_node(fn, births)
                if pending:
                    local.pending = []
                    self._emit_births(pending, nodes)
        return out

    @contextmanager
    def _outside_backward(self) -> Iterator[None]:
        """Step the dispatch mode aside while a backward call runs (Note [Born in PyTorch])."""
        if _python_dispatch._get_current_dispatch_mode() is not self._modes[-1]:
            yield  # somebody's mode sits above ours: ours checks the graph task id instead
            return
        with _python_dispatch._pop_mode_temporarily():
            yield

    def _tag(self, fns: Iterable[Any]) -> None:
        frame = next(user_frames(sys._getframe(2)), None)
        if frame is None:
            return
        code = frame.f_code
        place = (code.co_filename, frame.f_lineno, code.co_name, self._modules.current)
        known = _ORIGINS.get(place)
        if known is None:
            # One origin and one formatted line per place (Note [One origin per place]).
            if len(_ORIGINS) >= _MAX_ORIGINS:
                _ORIGINS.clear()
            origin = Origin(*place)
            known = _ORIGINS[place] = (origin, tuple(origin.formatted()))
        origin, lines = known
        stack = list(lines)
        for fn in fns:
            metadata = fn.metadata
            if ORIGIN_KEY not in metadata:
                metadata[ORIGIN_KEY] = origin
                # Where anomaly mode keeps a node's forward stack: the bridge's graph
                # snapshot (and so the TUI's inspector) shows the user's line from it.
                metadata.setdefault("traceback_", stack)

    def _emit_births(self, births: list[Birth], nodes: dict[int, Any]) -> None:
        for birth in births:
            tensor = birth.ref() if birth.ref is not None else None
            fn = tensor.grad_fn if tensor is not None else None
            if fn is None and birth.node_nr is not None:
                fn = nodes.get(birth.node_nr)
            self._emit(birth, fn)


class FunctionMode(TorchFunctionMode):
    """The checker's function mode: every torch function through :meth:`FunctionCalls.call`."""

    def __init__(self, calls: FunctionCalls) -> None:
        super().__init__()
        self.calls = calls

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if is_compiling():  # Dynamo traces the identity: the graph compiled unwatched
            return func(*args, **(kwargs or {}))
        return self.calls.call(func, args, kwargs or {})
