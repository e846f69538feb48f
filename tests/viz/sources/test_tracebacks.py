"""Taking our frames out of a program's traceback (Note [A traceback as without us] in
``autograd_viz/sources/tracebacks.py``), on frames whose code says where it lives.

The functions here are compiled under a file name in the ``autograd_viz`` package
(ours) or outside it (the program's), so each traceback holds a known pattern of
frames; the trim must leave the program's frames, in order, and the exceptions
untouched.
"""

from __future__ import annotations

import os
import textwrap
import traceback
from types import FunctionType
from typing import Any

import pytest

import autograd_viz
from autograd_viz.sources.arming import every_source
from autograd_viz.sources.tracebacks import (
    TRAMPOLINE,
    RaisedOnPurpose,
    trim_traceback,
    without_our_frames,
)

OURS = os.path.join(os.path.dirname(os.path.abspath(autograd_viz.__file__)), "watching.py")
PROGRAM = os.path.abspath("program.py")


def compiled(filename: str, source: str, namespace: dict[str, Any]) -> None:
    """Define ``source``'s functions in ``namespace``, their frames in ``filename``."""
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)


class Stop(RuntimeError, RaisedOnPurpose):
    """An error our tools raise on purpose."""


def functions() -> dict[str, Any]:
    """The program's functions and ours, calling each other through one namespace."""
    ns: dict[str, Any] = {"Stop": Stop}
    compiled(
        PROGRAM,
        """
        def outer(how):
            return through_ours(inner, how)

        def inner(how):
            if how == "program":
                raise ValueError("the program's error")
            return ours_raises(how)

        def handed(how, again=False):
            if not again:
                return mode(handed, how)  # as Tensor.backward hands itself to a mode
            raise KeyError(how)

        def calls_handed(how):
            return handed(how)

        def caused(how):
            try:
                outer("program")
            except ValueError as exc:
                raise TypeError("a new error") from exc
        """,
        ns,
    )
    compiled(
        OURS,
        """
        def through_ours(f, how):
            return f(how)

        def ours_raises(how):
            if how == "on purpose":
                raise Stop("stopped at a finding")
            raise AssertionError("a fault of ours")

        def mode(f, how):
            return placed(f, (how,), {"again": True})
        """,
        ns,
    )
    # The trampoline placed at the program's line, as the modes place it.
    code = TRAMPOLINE.replace(co_filename=PROGRAM, co_firstlineno=12, co_name="handed")
    ns["placed"] = FunctionType(code, ns)
    return ns


def frames(exc: BaseException) -> list[tuple[str, str]]:
    """("ours" or "program", function) of each frame of ``exc``'s traceback in those files."""
    where = {OURS: "ours", PROGRAM: "program"}
    return [
        (where[f.filename], f.name)
        for f in traceback.extract_tb(exc.__traceback__)
        if f.filename in where
    ]


def raised(call: Any) -> BaseException:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - what the program raised, to look at
        return exc
    raise AssertionError("nothing raised")


def test_the_frames_the_exception_passed_through_go() -> None:
    ns = functions()
    exc = raised(lambda: ns["outer"]("program"))
    assert frames(exc) == [("program", "outer"), ("ours", "through_ours"), ("program", "inner")]
    trim_traceback(exc)
    assert frames(exc) == [("program", "outer"), ("program", "inner")]
    assert type(exc) is ValueError and exc.args == ("the program's error",)


def test_where_a_fault_of_ours_was_raised_stays() -> None:
    ns = functions()
    exc = raised(lambda: ns["outer"]("fault"))
    trim_traceback(exc)
    assert frames(exc) == [("program", "outer"), ("program", "inner"), ("ours", "ours_raises")]


def test_an_error_raised_on_purpose_ends_at_the_programs_frame() -> None:
    ns = functions()
    exc = raised(lambda: ns["outer"]("on purpose"))
    trim_traceback(exc)
    assert frames(exc) == [("program", "outer"), ("program", "inner")]
    assert type(exc) is Stop


def test_a_function_that_handed_itself_to_a_mode_is_shown_once() -> None:
    ns = functions()
    exc = raised(lambda: ns["calls_handed"]("x"))
    before = frames(exc)
    assert ("program", "handed") in before and ("ours", "mode") in before
    trim_traceback(exc)
    assert frames(exc) == [("program", "calls_handed"), ("program", "handed")]
    assert [f.lineno for f in traceback.extract_tb(exc.__traceback__)][-1] == 13  # its raise


def test_the_chain_is_trimmed_and_kept() -> None:
    ns = functions()
    exc = raised(lambda: ns["caused"]("x"))
    cause = exc.__cause__
    assert isinstance(cause, ValueError)
    trim_traceback(exc)
    assert exc.__cause__ is cause and exc.__context__ is cause
    assert frames(exc) == [("program", "caused")]
    assert [f.name for f in traceback.extract_tb(cause.__traceback__)] == [
        "caused",
        "outer",
        "inner",
    ]


def test_an_exception_groups_members_are_trimmed() -> None:
    ns = functions()
    member = raised(lambda: ns["outer"]("program"))
    group = BaseExceptionGroup("several", [member])
    trim_traceback(group)
    assert group.exceptions[0] is member
    assert frames(member) == [("program", "outer"), ("program", "inner")]


def test_a_traceback_of_ours_alone_is_left_whole() -> None:
    ns = functions()
    exc = raised(lambda: ns["ours_raises"]("on purpose"))
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != OURS:
        tb = tb.tb_next
    assert tb is not None
    assert without_our_frames(tb, on_purpose=True) is tb
    assert tb.tb_next is None
    assert without_our_frames(None) is None


def test_trimming_twice_changes_nothing_more() -> None:
    ns = functions()
    exc = raised(lambda: ns["calls_handed"]("x"))
    trim_traceback(exc)
    once = frames(exc)
    trim_traceback(exc)
    assert frames(exc) == once


def test_a_generator_context_manager_keeps_the_trimmed_traceback() -> None:
    """contextlib puts back the traceback it was handed: the trim relinks it in place."""
    ns = functions()

    def block() -> None:
        with every_source():
            ns["outer"]("program")

    exc = raised(block)
    assert [f.name for f in traceback.extract_tb(exc.__traceback__)][1:] == [
        "block",
        "outer",
        "inner",
    ]


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_are_trimmed_and_pass(kind: type[BaseException]) -> None:
    ns = functions()
    ns["ValueError"] = kind  # the program's raise now raises this

    def block() -> None:
        with every_source():
            ns["outer"]("program")

    exc = raised(block)
    assert type(exc) is kind
    assert [f.name for f in traceback.extract_tb(exc.__traceback__)][1:] == [
        "block",
        "outer",
        "inner",
    ]


def test_torch_frames_that_ours_called_stay() -> None:
    """Our wrapper of a compiled region calls torch's ``eval_frame.py`` as the program would
    have: that frame stays; the mode plumbing that called into ours goes."""
    torch = pytest.importorskip("torch")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    ns = functions()
    compiled(
        os.path.join(torch_dir, "_dynamo", "eval_frame.py"),
        """
        def compile_wrapper(f, how):
            return f(how)
        """,
        ns,
    )
    compiled(
        os.path.join(torch_dir, "overrides.py"),
        """
        def handle_torch_function(f, how):
            return through_ours(f, how)
        """,
        ns,
    )
    compiled(
        PROGRAM,
        """
        import functools

        def calls_compiled(how):
            return through_ours(functools.partial(compile_wrapper, inner), how)

        def calls_a_mode(how):
            return handle_torch_function(inner, how)
        """,
        ns,
    )
    exc = raised(lambda: ns["calls_compiled"]("program"))
    trim_traceback(exc)
    assert [f.name for f in traceback.extract_tb(exc.__traceback__)][2:] == [
        "calls_compiled",
        "compile_wrapper",
        "inner",
    ]
    exc = raised(lambda: ns["calls_a_mode"]("program"))
    trim_traceback(exc)
    assert [f.name for f in traceback.extract_tb(exc.__traceback__)][2:] == [
        "calls_a_mode",
        "inner",
    ]
