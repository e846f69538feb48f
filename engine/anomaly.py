"""Anomaly mode: forward tracebacks in node metadata and checks for non-finite values.

As in ``torch.autograd``, the mode is process-wide: nodes created on any thread
while it is on record the stack of the forward call that created them, and
every backward output is checked for NaN. With its defaults it behaves exactly
as PyTorch's. Beyond PyTorch it can also

* flag ±Inf as well as NaN (``check_inf``),
* check each differentiable op's forward output as it is created
  (``check_forward``), naming the op that first produced a non-finite value,
* report every finding as an ``anomaly`` event and let the work go on
  (``mode="collect"``) instead of raising at the first one.

Note [Born non-finite]
~~~~~~~~~~~~~~~~~~~~~~
A NaN spreads: every op downstream of the first one produces NaN too. The
forward check therefore raises only for an output that is *born* non-finite:
one holding a checked value (NaN, or Inf with ``check_inf``) when none of the
op's inputs held one. That op created the value; everything after it merely
passed it on. Which inputs held any NaN or Inf is recorded either way (the
``nonfinite_inputs`` of the event), so ``log(0) * 0`` with ``check_inf=False``
reports the NaN as born in the multiplication and shows that its input 0 was
already infinite.
"""

from __future__ import annotations

import os
import threading
import traceback
import warnings
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from engine._context import SCOPE_KEY, TLS
from engine.activity import ACTIVITY
from engine.events import HUB, LazySummary
from engine.grad_mode import _DecoratorContextManager
from engine.naming import op_name

if TYPE_CHECKING:
    from engine.graph import Node
    from engine.tensor import Tensor

__all__ = [
    "MODES",
    "STATE",
    "AnomalySettings",
    "anomaly_settings",
    "check_forward_output",
    "collecting_unheard",
    "detect_anomaly",
    "forward_stack",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "non_finite_value",
    "note_forward_inputs",
    "op_name",
    "set_detect_anomaly",
    "warn_forward_traceback",
]

MODES = ("raise", "collect")
"""What anomaly mode does with a finding: raise a ``RuntimeError``, or emit an event and go on."""


class AnomalySettings(NamedTuple):
    """Everything anomaly mode is set to, as saved and restored by its context managers."""

    enabled: bool
    """Whether anomaly mode is on."""
    check_nan: bool
    """Flag NaN values."""
    check_inf: bool
    """Flag +Inf and -Inf values."""
    check_forward: bool
    """Check each differentiable op's output as it is created, not only backward outputs."""
    mode: str
    """``"raise"`` or ``"collect"``; see :data:`MODES`."""


_OFF = AnomalySettings(False, True, False, False, "raise")


class _AnomalyState:
    """The process-wide settings, as plain attributes: the hot paths read one of them.

    ``enabled`` is checked first on the backward path and ``check_forward`` first
    when an op creates a node, so with the defaults each costs one attribute read.
    """

    __slots__ = (
        "check_forward",
        "check_inf",
        "check_nan",
        "enabled",
        "mode",
        "node_metadata",
        "open_scopes",
    )
    enabled: bool
    check_nan: bool
    check_inf: bool
    check_forward: bool
    mode: str
    node_metadata: bool
    """Whether a new node gets a metadata dict (:func:`new_metadata`): anomaly mode is on, or
    a scope is open (:mod:`engine.scopes`). The one attribute node creation reads."""
    open_scopes: int
    """How many :func:`engine.scopes.scope` blocks are open, on all threads."""

    def __init__(self) -> None:
        self.open_scopes = 0
        self.set(_OFF)

    def get(self) -> AnomalySettings:
        return AnomalySettings(*(getattr(self, name) for name in AnomalySettings._fields))

    def set(self, settings: AnomalySettings) -> None:
        with NODE_METADATA_LOCK:
            for name, value in zip(AnomalySettings._fields, settings, strict=True):
                setattr(self, name, value)
            self.node_metadata = self.enabled or self.open_scopes > 0


NODE_METADATA_LOCK = threading.Lock()
"""Held while ``node_metadata`` is worked out again (anomaly mode set, a scope entered or
left, on any thread), so that no change is lost between two threads."""


STATE = _AnomalyState()

_ENABLE_WARNING = (
    "Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
    "enabled for debugging."
)


def is_anomaly_enabled() -> bool:
    """Whether anomaly mode is on."""
    return STATE.enabled


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly mode checks backward outputs for NaN."""
    return STATE.check_nan


def anomaly_settings() -> AnomalySettings:
    """The current settings of anomaly mode."""
    return STATE.get()


def _checked(
    enabled: Any, check_nan: Any, check_inf: Any, check_forward: Any, mode: Any
) -> AnomalySettings:
    """The settings, after checking each argument's type and value.

    Raises:
        TypeError: a flag that is not ``True`` or ``False``, or a mode that is not a string.
        ValueError: a mode other than ``"raise"`` and ``"collect"``.
    """
    for name, value in (
        ("enabled", enabled),
        ("check_nan", check_nan),
        ("check_inf", check_inf),
        ("check_forward", check_forward),
    ):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    if not isinstance(mode, str):
        raise TypeError(f"mode must be 'raise' or 'collect', got {type(mode).__name__}")
    if mode not in MODES:
        raise ValueError(
            f"unknown anomaly mode {mode!r}; use 'raise' (stop at the first non-finite value) "
            f"or 'collect' (emit an anomaly event for each and go on)"
        )
    return AnomalySettings(enabled, check_nan, check_inf, check_forward, mode)


class detect_anomaly(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Turn anomaly mode on inside a ``with`` block or a decorated function.

    With it on, each node stores the traceback of the forward call that
    created it in ``node.metadata["traceback_"]``; an error in backward prints
    that traceback; a backward function that returns NaN raises
    ``RuntimeError: Function 'XBackward0' returned nan values in its 0th output.``

    Args:
        check_nan: flag NaN values (default ``True``).
        check_inf: also flag +Inf and -Inf (default ``False``, as PyTorch).
        check_forward: also check each differentiable op's output when it is
            created; an output born non-finite raises
            ``Function 'LogBackward0' produced inf values in its 0th forward
            output (op 'log').`` (see Note [Born non-finite]).
        mode: ``"raise"`` (default) stops at the first finding; ``"collect"``
            emits an ``anomaly`` event for every finding and lets forward and
            backward complete. Collecting costs nothing, and finds nothing,
            while no event listener is subscribed.

    Raises:
        TypeError: a flag that is not a bool, or a mode that is not a string.
        ValueError: an unknown ``mode``.
    """

    def __init__(
        self,
        check_nan: bool = True,
        *,
        check_inf: bool = False,
        check_forward: bool = False,
        mode: str = "raise",
    ) -> None:
        self.settings = _checked(True, check_nan, check_inf, check_forward, mode)
        """What anomaly mode is set to inside the block."""
        self.prev = _OFF
        warnings.warn(_ENABLE_WARNING, UserWarning, stacklevel=2)

    @property
    def check_nan(self) -> bool:
        """Whether NaN values are flagged inside the block."""
        return self.settings.check_nan

    def clone(self) -> detect_anomaly:
        clone = self.__class__.__new__(self.__class__)
        clone.settings = self.settings
        clone.prev = _OFF
        return clone

    def __enter__(self) -> None:
        self.prev = STATE.get()
        STATE.set(self.settings)

    def __exit__(self, *exc: object) -> None:
        STATE.set(self.prev)


class set_detect_anomaly(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Set anomaly mode on or off; immediately as a call, restored on exit as a context manager.

    ``set_detect_anomaly(True, mode="collect")`` turns it on in collect mode.
    PyTorch names the first argument ``mode`` as well; ``set_detect_anomaly(mode=True)``
    still works, as a bool ``mode`` given alone is taken for it.

    Args:
        enabled: turn anomaly mode on (``True``) or off (``False``).
        check_nan: flag NaN values.
        check_inf: also flag +Inf and -Inf.
        check_forward: also check each differentiable op's output when it is created.
        mode: ``"raise"`` or ``"collect"``; see :class:`detect_anomaly`.

    Raises:
        TypeError: a flag that is not a bool, or a mode that is not a string.
        ValueError: an unknown ``mode``.
    """

    def __init__(
        self,
        enabled: bool | None = None,
        /,
        check_nan: bool = True,
        *,
        check_inf: bool = False,
        check_forward: bool = False,
        mode: str | bool = "raise",
    ) -> None:
        if enabled is None and isinstance(mode, bool):
            enabled, mode = mode, "raise"  # PyTorch's keyword: set_detect_anomaly(mode=True)
        if enabled is None:
            raise TypeError(
                "set_detect_anomaly() needs whether to turn anomaly mode on as its first "
                "argument, such as set_detect_anomaly(True)"
            )
        self.settings = _checked(enabled, check_nan, check_inf, check_forward, mode)
        """What anomaly mode is set to."""
        self.prev = STATE.get()
        STATE.set(self.settings)

    def clone(self) -> set_detect_anomaly:
        enabled, check_nan, check_inf, check_forward, mode = self.settings
        return self.__class__(
            enabled, check_nan, check_inf=check_inf, check_forward=check_forward, mode=mode
        )

    def __enter__(self) -> None:
        STATE.set(self.settings)

    def __exit__(self, *exc: object) -> None:
        STATE.set(self.prev)


# -- findings --------------------------------------------------------------------------


def non_finite_value(t: Tensor) -> str | None:
    """``"nan"`` or ``"inf"`` if ``t`` holds a value the current settings flag, else ``None``.

    NaN is named first when both are there and both are checked.
    """
    data = t.data
    if data.dtype.kind not in "fc":
        return None
    xp = t.device.xp
    if STATE.check_inf:
        if bool(xp.isfinite(data).all()):
            return None
        if STATE.check_nan and bool(xp.isnan(data).any()):
            return "nan"
        return "inf" if bool(xp.isinf(data).any()) else None
    if STATE.check_nan and bool(xp.isnan(data).any()):
        return "nan"
    return None


def collecting_unheard() -> bool:
    """Collect mode with nobody listening: a finding would go nowhere, so skip the checks."""
    return STATE.mode == "collect" and not HUB.active


class _ForwardInputs(NamedTuple):
    """What an op's inputs held, noted when its node was made (see Note [Born non-finite])."""

    nonfinite: tuple[int, ...]
    """Indices of the inputs holding any NaN or Inf."""
    flagged: bool
    """Whether an input held a value the settings flag; then the op's output was not born bad."""
    summaries: list[LazySummary | None] | None
    """The inputs, for the event; ``None`` when nobody listened."""


_UNKNOWN_INPUTS = _ForwardInputs((), False, None)
_forward_inputs: weakref.WeakKeyDictionary[Node, _ForwardInputs] = weakref.WeakKeyDictionary()


def note_forward_inputs(node: Node, inputs: Sequence[Tensor | None]) -> None:
    """Note which of an op's inputs are non-finite, for :func:`check_forward_output`."""
    if collecting_unheard():
        return
    nonfinite = []
    flagged = False
    for i, t in enumerate(inputs):
        if t is None or t.data.dtype.kind not in "fc":
            continue
        xp = t.device.xp
        if bool(xp.isfinite(t.data).all()):
            continue
        nonfinite.append(i)
        flagged = flagged or non_finite_value(t) is not None
    summaries = None
    if HUB.active:
        summaries = [None if t is None else LazySummary(t.data, str(t.device)) for t in inputs]
    _forward_inputs[node] = _ForwardInputs(tuple(nonfinite), flagged, summaries)


def check_forward_output(node: Node, out: Tensor) -> None:
    """Anomaly mode's forward check of one output of ``node``, just attached to it.

    Raises:
        RuntimeError: in raise mode, when the output is born non-finite
            (see Note [Born non-finite]).
    """
    if collecting_unheard():
        return
    value = non_finite_value(out)
    if value is None:
        return
    inputs = _forward_inputs.get(node, _UNKNOWN_INPUTS)
    born = not inputs.flagged
    raises = born and STATE.mode == "raise"
    op = op_name(node.name())
    if HUB.active:
        _emit_forward(node, out, value, op, inputs, born, raises)
    if raises:
        raise RuntimeError(
            f"Function '{node.name()}' produced {value} values in its {out._output_nr}th "
            f"forward output (op '{op}')."
        )


def _emit_forward(
    node: Node,
    out: Tensor,
    value: str,
    op: str,
    inputs: _ForwardInputs,
    born: bool,
    raises: bool,
) -> None:
    # A forward event belongs to no graph task. On a user thread it is an engine step all
    # the same: a debugger may pause the thread here (see Note [Quiescence]).
    outside = TLS.worker_device is None
    if outside:
        ACTIVITY.enter()
    try:
        HUB.emit(
            "anomaly",
            "cpu" if outside else str(TLS.worker_device),
            0,
            node,
            phase="forward",
            op=op,
            output_index=out._output_nr,
            value=value,
            born=born,
            raised=raises,
            tensor=LazySummary(out.data, str(out.device)),
            inputs=inputs.summaries,
            nonfinite_inputs=list(inputs.nonfinite),
            traceback=node._metadata.get("traceback_") if node._metadata else None,
        )
    finally:
        if outside:
            ACTIVITY.leave()



# -- forward tracebacks ----------------------------------------------------------------

_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def forward_stack() -> list[str]:
    """The current Python stack, formatted, without the engine's own frames."""
    frames = traceback.extract_stack()
    user = [f for f in frames if not os.path.abspath(f.filename).startswith(_ENGINE_DIR)]
    return traceback.format_list(user or frames)


def new_metadata() -> dict[str, Any] | None:
    """A new node's metadata: in anomaly mode the forward stack and the node that made it; in
    a scope (:mod:`engine.scopes`) the scopes open on this thread; ``None`` when neither.

    Note [Induced by]
    ~~~~~~~~~~~~~~~~~
    A node made while another node's backward runs (``create_graph=True``, a
    double backward) remembers that node as its ``parent_``, as PyTorch's
    AnomalyMetadata does. An error later in the made node then warns, after
    its own forward stack, with the stack of each ancestor: "Previous
    calculation was induced by ExpBackward0. Traceback of forward call that
    induced the previous calculation: ...". The engine keeps the running node
    in ``TLS.current_node`` only while anomaly mode is on.
    """
    metadata: dict[str, Any] = {}
    if STATE.enabled:
        metadata["traceback_"] = forward_stack()
        parent = TLS.current_node
        if parent is not None:
            metadata["parent_"] = parent
    scope = TLS.scope
    if scope:
        metadata[SCOPE_KEY] = scope
    return metadata or None


def warn_forward_traceback(node: Any) -> None:
    """Print PyTorch's anomaly warnings: the forward traceback of ``node``, then its parents'."""
    stack = node.metadata.get("traceback_") if node._metadata else None
    if stack is None:
        warnings.warn(
            f"Error detected in {node.name()}. No forward pass information available. Enable "
            f"detect anomaly during forward pass for more information.",
            UserWarning,
            stacklevel=2,
        )
        return
    warnings.warn(
        f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
        + "".join(stack),
        UserWarning,
        stacklevel=2,
    )
    seen = {id(node)}
    parent = node._metadata.get("parent_")
    while parent is not None and id(parent) not in seen:  # See Note [Induced by]
        seen.add(id(parent))
        metadata = parent._metadata or {}
        parent_stack = metadata.get("traceback_")
        if parent_stack is None:
            text = (
                f"\n\nPrevious calculation was induced by {parent.name()}. No forward pass "
                "information available. Enable detect anomaly during forward pass for more "
                "information."
            )
        else:
            text = (
                f"\n\nPrevious calculation was induced by {parent.name()}. Traceback of forward "
                "call that induced the previous calculation:\n" + "".join(parent_stack)
            )
        warnings.warn(text, UserWarning, stacklevel=2)
        parent = metadata.get("parent_")
