"""docs/engine-api.md names every public name of the engine: a new one cannot go unlisted."""

from __future__ import annotations

from pathlib import Path

import engine
import engine.functional as F

DOC = (Path(__file__).resolve().parent.parent / "docs" / "engine-api.md").read_text(
    encoding="utf-8"
)


def test_every_name_of_engine_is_in_the_reference() -> None:
    missing = [
        n for n in engine.__all__ if f"`engine.{n}`" not in DOC and f"engine.{n}`" not in DOC
    ]
    assert missing == []


def test_every_function_of_engine_functional_is_in_the_reference() -> None:
    assert [n for n in F.__all__ if f"`F.{n}`" not in DOC] == []


def test_every_tensor_member_is_in_the_reference_as_a_member_or_an_operation() -> None:
    members = [n for n in dir(engine.Tensor) if not n.startswith("_")]
    missing = [n for n in members if f"`Tensor.{n}`" not in DOC and f"`engine.{n}`" not in DOC]
    assert missing == []
