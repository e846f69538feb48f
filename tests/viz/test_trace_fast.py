"""The fast readers of trace files read what the checked readers read, and leave the rest to them.

Note [Fast readers] in ``autograd_viz/trace/fast.py``: a fast reader returns
what the checked reader would, or ``None``; never a value for a record the
checked reader rejects, and never a different value. Checked here on every
record of real traces, on each field of each common record replaced by odd
values, and on whole mutated files, which must load to the same trace or fail
with the same message with the fast readers on and off.
"""

from __future__ import annotations

import copy
import json
import random
import re
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
    """Every record read field by field, as before the fast readers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast, "summary", lambda value: None)
        patch.setattr(fast, "event_data", lambda kind, data: None)
        patch.setattr(fast, "node", lambda item: None)
        patch.setattr(fast, "plain_event", lambda item: False)
        patch.setattr(file, "_decode", file._DECODER.decode)
        yield


def _outcome(read: Callable[[Any], Any], value: Any) -> str | None:
    """``repr`` of what ``read`` returns for a copy of ``value`` (strict: 1 is not 1.0),
    or ``None`` when it raises SchemaError."""
    try:
        return repr(read(copy.deepcopy(value)))
    except s.SchemaError:
        return None


def _agree(fast_read: Callable[[Any], Any], checked_read: Callable[[Any], Any], value: Any) -> bool:
    """Assert the fast reader returns the checked reader's value or ``None`` (and then leaves
    its argument alone); returns whether it read the value."""
    with _checked_only():
        expected = _outcome(checked_read, value)
    mine = copy.deepcopy(value)
    got = fast_read(mine)
    if got is None:
        assert json.dumps(mine) == json.dumps(value), "a fast reader changed what it gave up on"
        return False
    assert expected is not None, f"the fast reader accepted what the checked one rejects: {value}"
    assert repr(got) == expected, value
    return True


def _records(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").split("\n")[:-1]]


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return seed_files()


def _readers(record: dict[str, Any]) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
    """The fast and the checked reader of a node record or of an event's data."""
    if record.get("type") == "node":
        return fast.node, file._read_node_checked
    kind = record.get("kind")
    if record.get("type") == "event" and kind in fast.EVENT_DATA:
        return (
            lambda data: fast.event_data(kind, data),
            lambda data: file._read_event_data_checked(kind, data),
        )
    return None


_NON_FINITE = re.compile(r'"-?(nan|inf)"')


def _what(record: dict[str, Any]) -> Any:
    return record if record["type"] == "node" else record["data"]


def test_real_records_are_read_fast_and_the_same(files: dict[str, bytes]) -> None:
    read: dict[str, int] = {}
    for data in files.values():
        for record in _records(data):
            readers = _readers(record)
            if record["type"] == "event":
                assert fast.plain_event(record)
            if readers is None:
                continue
            # Every real one reads fast, but for a NaN or an Inf: those travel as strings.
            assert _agree(*readers, _what(record)) or _NON_FINITE.search(json.dumps(record))
            name = record.get("kind", "node")
            read[name] = read.get(name, 0) + 1
    assert set(read) == {*fast.EVENT_DATA, "node"}, read


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
    """A record of each kind with a fast reader (nodes with and without a leaf and a scope)."""
    seen: set[Any] = set()
    for data in files.values():
        for record in _records(data):
            key = record.get("kind") or (record["type"], "leaf" in record, "scope" in record)
            if _readers(record) is not None and key not in seen:
                seen.add(key)
                yield record, key


def test_odd_fields_are_read_the_same_or_left_to_the_checked_reader(
    files: dict[str, bytes],
) -> None:
    kinds = set()
    for record, key in _one_of_each(files):
        kinds.add(key)
        fast_read, checked_read = _readers(record) or (None, None)
        assert fast_read is not None and checked_read is not None
        for variant in _variants(_what(record)):
            _agree(fast_read, checked_read, variant)
    nodes = {("node", leaf, scope) for leaf in (True, False) for scope in (True, False)}
    assert {*nodes, *fast.EVENT_DATA} <= kinds


def test_odd_summaries_are_read_the_same_or_left_to_the_checked_reader() -> None:
    summary = {
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
    assert _agree(fast.summary, s._read_summary_checked, summary)
    for variant in _variants(summary):
        _agree(fast.summary, s._read_summary_checked, variant)
    for values in ([1, 2.0], [1e308, 1e308], [True, 1.0], ["nan", 1.0]):
        _agree(fast.summary, s._read_summary_checked, {**summary, "values": values})


def test_a_summary_whose_values_are_null_is_rejected_fast_or_not(tmp_path: Path) -> None:
    # The checked reader never took "values": null; the first fast reader did.
    summary = {"shape": [1], "dtype": "float32", "device": "cpu", "values": None}
    assert fast.summary(summary) is None
    with pytest.raises(s.SchemaError, match="values: expected a list, got null"):
        s.read_summary(summary)


def _loaded(path: Path) -> str:
    try:
        trace = Trace.load(path)
    except TraceFormatError as exc:
        return f"rejected: {exc}"
    return repr((trace.header, trace.graph_tasks, trace.events))


def test_mutated_files_load_the_same_or_fail_the_same_with_fast_readers_off(
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
def test_a_pytorch_trace_reads_fast_and_the_same(torch: Any, tmp_path: Path) -> None:
    from autograd_viz.sources.recorder import record

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
        readers = _readers(record_)
        if readers is not None:
            assert _agree(*readers, _what(record_)), record_
            derived += record_.get("data", {}).get("derived", False)
    assert derived > 10  # the bridge's derived events read fast too
    loaded = _loaded(path)
    with _checked_only():
        assert _loaded(path) == loaded
    assert Trace.load(path) == trace
