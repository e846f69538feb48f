"""A program's traceback as plain Python would print it, without the frames of what watched it.

Note [A traceback as without us]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
While the program runs under our tools, its calls pass through frames of
ours: the NaN checks' function and dispatch modes (with torch's mode
plumbing around them and the trampoline that places each call at the
program's line, Note [A warning keeps its line] in
``sources/pytorch/caller_line.py``), the bridge's backward chokepoint and
node hooks, the engine's event hub that hands a hook's event to a listener,
the script runner. An exception that leaves the program carries all of them
in its traceback, between the program's own frames. (A program on our engine
passes through none of ours: the engine's frames are the library it calls,
like torch's, though while somebody listens its loop runs a node through
``evaluate_function``, two frames more than unwatched.)

:func:`trim_traceback` takes them out, in place, of the exception and of
every exception of its ``__cause__``/``__context__`` chain (and of an
exception group's members). Each trampoline goes, and so does each run of
plumbing frames holding one of ours that the exception left through a frame
after it, up to the last of ours: torch's frames after it are torch's code
that ours called as the program would have (a compiled model's
``eval_frame.py`` frames, behind our wrapper of compiled regions). When the
run ended at a trampoline and the frame before it is the torch function that
handed itself to the mode (``Tensor.backward``), that frame goes too, since
the function's own call follows the trampoline. A run at the end is where
the error was raised: a fault of ours stays there, to be seen; an exception
raised there on purpose (:class:`RaisedOnPurpose`, a NaN check stopping the
program) loses it, so its traceback ends at the program's line, as an error
of PyTorch's own engine ends at ``_engine_run_backward``. Torch's other
frames stay: where a module hook of ours sends ``Module._call_impl`` down
its path with hooks, they are torch's frames for that path.

The exception itself is never touched: its type, arguments and identity
stay, and so does its chain. Only its traceback changes, relinked in place
through ``tb_next``, so that a ``contextlib.contextmanager``, which puts the
traceback it was handed back on the exception, keeps the trimmed one. The
CLI (the script runner), every context manager that arms our modes or hooks
(``every_source`` under ``record`` and ``watch_nan``, ``nan_checks``,
``watch_torch``, ``TorchNanChecker``) and a live session's target call it when the
program's exception leaves them: only then, so nothing is added to a
program that raises nothing. An exception the program catches inside the
block is caught before it leaves, and keeps the frames.

This module imports nothing of torch: torch's files count once torch is
imported.
"""

from __future__ import annotations

import itertools
import os
import sys
from types import CodeType, TracebackType


def _call(f, a, k): return f(*a, **k)  # fmt: skip


TRAMPOLINE: CodeType = _call.__code__
"""The code the NaN checks' modes call through, each copy placed at a caller's line."""

_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The ``autograd_viz`` package's directory: every frame under it is ours."""
_HUB_MODULES = ("engine.events", "engine.emitting")
"""The engine's modules that run only while somebody listens to its events: the event hub
and the building of events. Their frames are ours too (a PyTorch program never runs them)."""
_TORCH_PLUMBING = (
    "overrides.py",
    "_ops.py",
    os.path.join("utils", "_python_dispatch.py"),
    # torch._disable_dynamo's wrapper around a mode's __torch_dispatch__
    "_compile.py",
    os.path.join("_dynamo", "eval_frame.py"),
)
"""torch's files that run a function mode or a dispatch mode, relative to torch's directory."""

_plumbing: dict[str, bool] = {}
_ours: dict[str, bool] = {}


class RaisedOnPurpose:
    """Mixed into an exception our tools raise into the program on purpose (a NaN check
    stopping it, a live session cancelled): its traceback ends at the program's frame
    (Note [A traceback as without us])."""


def is_plumbing(filename: str) -> bool:
    """Whether a frame of ``filename`` is ours or torch's mode plumbing."""
    known = _plumbing.get(filename)
    if known is None:
        known = is_ours(filename) or _is_torch_plumbing(filename)
        if "torch" in sys.modules:  # else torch's files are not known yet
            _plumbing[filename] = known
    return known


def is_ours(filename: str) -> bool:
    """Whether a frame of ``filename`` is of the ``autograd_viz`` package or the engine's
    event hub."""
    known = _ours.get(filename)
    if known is None:
        path = os.path.abspath(filename)
        known = path.startswith(_OURS) or path in _files_of(_HUB_MODULES)
        if all(name in sys.modules for name in _HUB_MODULES):
            _ours[filename] = known
    return known


def _is_torch_plumbing(filename: str) -> bool:
    torch = sys.modules.get("torch")
    file = getattr(torch, "__file__", None)
    if not file:
        return False
    torch_dir = os.path.dirname(os.path.abspath(file)) + os.sep
    return os.path.abspath(filename) in {torch_dir + name for name in _TORCH_PLUMBING}


def _files_of(modules: tuple[str, ...]) -> set[str]:
    """The files of those of ``modules`` already imported (the others run no frame)."""
    files = (getattr(sys.modules.get(name), "__file__", None) for name in modules)
    return {os.path.abspath(file) for file in files if file}


def is_placed(code: CodeType) -> bool:
    """Whether ``code`` is the trampoline, placed at some caller's line."""
    return code.co_code == TRAMPOLINE.co_code and code.co_varnames == TRAMPOLINE.co_varnames


def trim_traceback(exc: BaseException) -> None:
    """Take our frames out of the traceback of ``exc`` and of its chain, in place.

    See Note [A traceback as without us]. The exceptions are not changed; each
    one of the chain is trimmed once, however it is linked.
    """
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        tb = current.__traceback__
        if tb is not None:
            current.__traceback__ = without_our_frames(
                tb, on_purpose=isinstance(current, RaisedOnPurpose)
            )
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)


def without_our_frames(
    tb: TracebackType | None, *, on_purpose: bool = False
) -> TracebackType | None:
    """``tb`` as it would be without our tools (Note [A traceback as without us]).

    Its entries are relinked in place; the first entry is kept unless it is one of ours.

    Args:
        tb: the first entry of a traceback.
        on_purpose: the exception was raised by our code on purpose: a run of our
            frames at the end goes too.

    Returns:
        The first entry kept.
    """
    entries: list[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if not entries:
        return None
    kept: list[TracebackType] = []
    run: list[TracebackType] = []  # plumbing frames since the last frame of the program's
    ours = 0  # how many of them, from the run's start, go with ours: up to the last of ours
    before_run: TracebackType | None = None  # the program's entry right before the run
    for entry in entries:
        code = entry.tb_frame.f_code
        if is_placed(code):
            if not ours:
                kept.extend(run)
            elif before_run is not None and _code_after(entry) is before_run.tb_frame.f_code:
                kept.pop()  # torch code that handed itself to the mode: it follows again
            elif on_purpose and before_run is not None and _stopped_before(entry, before_run):
                kept.pop()  # our check stopped the program before that torch code ran
            run, ours, before_run = [], 0, None
            continue
        if is_plumbing(code.co_filename):
            run.append(entry)
            if is_ours(code.co_filename):
                ours = len(run)
            continue
        kept.extend(run[ours:])  # torch's frames that ours called, as the program would
        run, ours = [], 0
        kept.append(entry)
        before_run = entry
    if on_purpose and ours and kept:
        kept.extend(run[ours:])
    else:
        kept.extend(run)  # where it was raised
    if not kept:
        return entries[0]
    for entry, after in itertools.pairwise(kept):
        entry.tb_next = after
    kept[-1].tb_next = None
    return kept[0]


def _stopped_before(trampoline: TracebackType, handed: TracebackType) -> bool:
    """Whether every frame after ``trampoline`` is ours and ``handed``, the frame before
    the mode, is torch's (``Tensor.backward`` handing itself to the mode): a check placed at
    the program's line raised before the torch function was called again."""
    torch = sys.modules.get("torch")
    file = getattr(torch, "__file__", None)
    if not file:
        return False
    torch_dir = os.path.dirname(os.path.abspath(file)) + os.sep
    if not os.path.abspath(handed.tb_frame.f_code.co_filename).startswith(torch_dir):
        return False
    entry = trampoline.tb_next
    while entry is not None:
        if not is_ours(entry.tb_frame.f_code.co_filename):
            return False
        entry = entry.tb_next
    return True


def _code_after(entry: TracebackType) -> CodeType | None:
    """The code of the frame right after ``entry``, if any."""
    following = entry.tb_next
    return None if following is None else following.tb_frame.f_code


__all__ = [
    "TRAMPOLINE",
    "RaisedOnPurpose",
    "is_ours",
    "is_placed",
    "is_plumbing",
    "trim_traceback",
    "without_our_frames",
]
