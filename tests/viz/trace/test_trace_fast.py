"""Compiled readers of trace files read what the schema's readers read, and fail as they fail.

Note [One reader] in ``autograd_viz/trace/schema.py``: a compiled reader runs
a record's usual case in one go and hands anything else to the reader it was
compiled from; it returns what that reader returns and raises what it raises,
and changes its argument only when it read it. Checked here on every record
of real traces, on each field of each common record replaced by odd values,
and on whole mutated files, which must load to the same trace or fail with
the same message with the compiled readers on and off.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from autograd_viz.trace import Trace, TraceFormatError, fast, file
from autograd_viz.trace import schema as s
from tests.fuzz.fuzzer import mutate, seed_files
from tests.viz.json_paths import get, paths, replaced

_ODD: list[Any] = [
    None, True, False, 0, 1, -1, 7, 1.0, 0.5, -0.0, 1e308, 2**64, 2**64 + 1, -(2**64),
    -(2**64) - 1, "", "x", "nan", "inf", "-inf", "root", "leaf", "created", "needed",
    [], [1], [1, 2], [[1, 2]], [None], {}, {"a": 1},
]  # fmt: skip
"""Values put in place of every field: other types, bounds, other fields' choices."""


@contextmanager
def _checked_only() -> Iterator[None]:
    """Every record read field by field, by the schema's readers themselves."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(file, "_RECORDS", {"node": s.NODE.read, "event": s.EVENT.read})
        data = {kind: reader.read for kind, reader in s.EVENT_DATA_READERS.items()}
        patch.setattr(file, "_EVENT_DATA", data)
        patch.setattr(file, "_decode", file._DECODER.decode)
        yield


def _outcome(read: Callable[[Any], Any], value: Any) -> str:
    """``repr`` of what ``read`` returns for ``value`` (strict: 1 is not 1.0), or its error."""
    try:
        return repr(read(value))
    except s.SchemaError as exc:
        return f"SchemaError: {exc}"


def _agree(reader: s.Reader, value: Any) -> bool:
    """Assert the compiled ``reader`` reads ``value`` as ``reader`` does, or fails with its
    message, and changes it only when it read it; returns whether it read it in one go."""
    read = _compiled(reader)
    expected = _outcome(reader, copy.deepcopy(value))
    mine = copy.deepcopy(value)
    handed: list[Any] = []

    def hand_over(given: Any) -> Any:
        handed.append(given)
        return reader(given)

    namespace = read.__globals__
    original, namespace["_read"] = namespace["_read"], hand_over
    try:
        got = _outcome(read, mine)
    finally:
        namespace["_read"] = original
    assert got == expected, value
    if handed:
        assert handed == [mine] and json.dumps(mine) == json.dumps(value), (
            "a compiled reader changed what it handed over"
        )
    return not handed


_COMPILED: dict[int, Callable[[Any], Any]] = {}


def _compiled(reader: s.Reader) -> Callable[[Any], Any]:
    """``reader`` compiled once, as the loader compiles it."""
    key = id(reader)
    if key not in _COMPILED:
        _COMPILED[key] = fast.compiled(reader, "read")
    return _COMPILED[key]


def _records(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return seed_files()


def _reader(record: dict[str, Any]) -> s.Reader | None:
    """The reader of a node record or of an event's data."""
    if record.get("type") == "node":
        return s.NODE
    if record.get("type") == "event":
        return s.EVENT_DATA_READERS.get(record.get("kind"))  # type: ignore[arg-type]
    return None


def _what(record: dict[str, Any]) -> Any:
    return record if record["type"] == "node" else record["data"]


def test_real_records_are_read_in_one_go_and_the_same(files: dict[str, bytes]) -> None:
    read: dict[str, int] = {}
    for data in files.values():
        for record in _records(data):
            if record["type"] == "event":
                assert _agree(s.EVENT, record)
            reader = _reader(record)
            if reader is None:
                continue
            # Every real one reads in one go, a NaN or an Inf too (they travel as strings).
            assert _agree(reader, _what(record)), record
            name = record.get("kind", "node")
            read[name] = read.get(name, 0) + 1
    common = {"enqueue", "dependency_decrement", "release_variables", "node_start", "node_end"}
    assert {*common, "accumulate", "node"} <= set(read), read


def _variants(value: Any) -> Iterator[Any]:
    """``value`` with one field replaced by each odd value, removed, or one field added."""
    for path in paths(value):
        if not path:
            continue
        for odd in _ODD:
            yield replaced(value, path, odd)
        parent = get(value, path[:-1])
        if isinstance(parent, dict):
            yield replaced(value, path[:-1], {k: v for k, v in parent.items() if k != path[-1]})
            for name in ("colour", "derived"):
                for odd in (True, None, 1):
                    yield replaced(value, path[:-1], {**parent, name: odd})
        else:
            yield replaced(value, path[:-1], [*parent, parent[path[-1]]])


def _one_of_each(files: dict[str, bytes]) -> Iterator[tuple[dict[str, Any], Any]]:
    """A record of each kind (nodes with and without a leaf and a scope)."""
    seen: set[Any] = set()
    for data in files.values():
        for record in _records(data):
            scoped = "scope" in record or "scope_ref" in record
            key = record.get("kind") or (record["type"], "leaf" in record, scoped)
            if _reader(record) is not None and key not in seen:
                seen.add(key)
                yield record, key


def test_odd_fields_are_read_the_same_or_fail_the_same(files: dict[str, bytes]) -> None:
    kinds = set()
    for record, key in _one_of_each(files):
        kinds.add(key)
        reader = _reader(record)
        assert reader is not None
        for variant in _variants(_what(record)):
            _agree(reader, variant)
        if record["type"] == "event":
            for variant in _variants({**record, "data": None}):
                _agree(s.EVENT, variant)
    nodes = {("node", leaf, scope) for leaf in (True, False) for scope in (True, False)}
    common = {"enqueue", "dependency_decrement", "release_variables", "node_start", "node_end"}
    assert {*nodes, *common, "accumulate"} <= kinds


_SUMMARY = {
    "shape": [2, 1],
    "dtype": "float32",
    "device": "cpu",
    "min": -1.5,
    "max": 2.0,
    "mean": 0.25,
    "norm": 2.5,
    "nan_count": 0,
    "inf_count": 0,
    "values": [-1.5, 2.0],
}


def test_odd_summaries_are_read_the_same_or_fail_the_same() -> None:
    assert _agree(s.summary, _SUMMARY)
    for variant in _variants(_SUMMARY):
        _agree(s.summary, variant)
    # A NaN or an Inf, or an integer, is read where it stands, and the summary in one go;
    # what the reader refuses, or a count of values that does not fit, goes to the reader.
    for values, in_one_go in (
        ([1, 2.0], True),
        ([1e308, 1e308], True),
        (["nan", "-inf"], True),
        ([True, 1.0], False),
        (["nan", None], False),
        ([-1.5], False),
    ):
        assert _agree(s.summary, {**_SUMMARY, "values": values}) is in_one_go, values
    for stat in ("nan", "inf", "-inf", 3):
        assert _agree(s.summary, {**_SUMMARY, "min": stat, "norm": stat})
    assert not _agree(s.summary, {**_SUMMARY, "min": "NaN"})


def test_a_summary_whose_values_are_null_is_rejected() -> None:
    # The field-by-field reader never took "values": null; the first fast reader did.
    summary = {"shape": [1], "dtype": "float32", "device": "cpu", "values": None}
    with pytest.raises(s.SchemaError, match="values: expected a list, got null"):
        _compiled(s.summary)(summary)


def test_a_compiled_reader_reads_an_object_within_the_value_into_a_copy() -> None:
    # A record read as a dict is the value itself, its fields replaced once all is read;
    # an object within it is copied, so that a value handed over stays as it was.
    inner = s.record({"pair": s.tuple_of(s.read_int, s.read_str)})
    outer = s.record({"inner": inner, "n": s.read_count})
    value = {"inner": {"pair": [1, "a"]}, "n": 3}
    assert _agree(outer, value)
    read = _compiled(outer)(value)
    assert read is value and read == {"inner": {"pair": (1, "a")}, "n": 3}
    bad = {"inner": {"pair": [1, "a"]}, "n": -3}
    assert not _agree(outer, bad)
    with pytest.raises(s.SchemaError, match="n: expected a non-negative integer, got -3"):
        _compiled(outer)(bad)
    assert bad["inner"] == {"pair": [1, "a"]}


def _loaded(path: Path) -> str:
    try:
        trace = Trace.load(path)
    except TraceFormatError as exc:
        return f"rejected: {exc}"
    return repr((trace.header, trace.graph_tasks, trace.events))


def test_mutated_files_load_the_same_or_fail_the_same_with_compiled_readers_off(
    files: dict[str, bytes], tmp_path: Path
) -> None:
    rng = random.Random(20261124)
    path = tmp_path / "t.jsonl"
    outcomes = set()
    for i in range(400):
        data = list(files.values())[i % len(files)]
        for _ in range(rng.randint(0, 2)):
            data, _ = mutate(rng, data)
        path.write_bytes(data)
        with_fast = _loaded(path)
        with _checked_only():
            assert _loaded(path) == with_fast
        outcomes.add(with_fast.startswith("rejected"))
    assert outcomes == {True, False}


@pytest.mark.parametrize(
    "line",
    [
        '{"a": 1}\n',
        ' {"a": 1}\n',
        '{"a": 1} \n',
        '{"a": 1}\t\r\n',
        '{"a": 1}x\n',
        '{"a": 1}{"b": 2}\n',
        '{"a": \n',
        '{"a": NaN}\n',
        '{"a": [' * 3000 + "\n",
        "[1]\n",
        "\n",
        '"text"\n',
    ],
)
def test_a_line_decodes_as_json_decode_reads_it(line: str) -> None:
    def decoded(decode: Callable[[str], Any]) -> str:
        try:
            return repr(decode(line))
        except (ValueError, RecursionError) as exc:
            return f"{type(exc).__name__}: {file._problem(exc)}"

    assert decoded(file._decode) == decoded(file._DECODER.decode)


@pytest.mark.oracle
def test_a_pytorch_trace_reads_in_one_go_and_the_same(torch: Any, tmp_path: Path) -> None:
    from autograd_viz.trace.recording import record

    cell = torch.nn.GRUCell(4, 4)
    h = torch.zeros(2, 4)
    for x in torch.randn(3, 2, 4):
        h = cell(x, h)
    with record() as trace:
        h.sum().backward()
    path = tmp_path / "gru.jsonl"
    trace.save(path)
    derived = 0
    for record_ in _records(path.read_bytes()):
        reader = _reader(record_)
        if reader is not None:
            assert _agree(reader, _what(record_)), record_
            derived += record_.get("data", {}).get("derived", False)
    assert derived > 10  # the bridge's derived events read fast too
    loaded = _loaded(path)
    with _checked_only():
        assert _loaded(path) == loaded
    assert Trace.load(path) == trace
