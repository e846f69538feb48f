"""Loading trace files: every malformed file is a TraceFormatError that names the line."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import engine
from autograd_viz.trace import Trace, TraceFormatError
from autograd_viz.trace.recording import record
from autograd_viz.trace.schema import EVENT_DATA
from engine.events import EVENT_KINDS
from tests.graphs import FailsInBackward
from tests.viz.json_paths import paths, replaced


class _Reentrant(engine.Function):
    @staticmethod
    def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
        inner = engine.tensor([1.0], requires_grad=True)
        with engine.enable_grad():
            (inner * 2.0).sum().backward()
        return grad


def _sample_trace() -> Trace:
    """Every event kind: grad() over two devices with a hook, NaN, reentrant, errors, anomalies
    in backward and in forward; the first graph made in scopes."""
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    y = engine.tensor([3.0], requires_grad=True, name="y")
    w = engine.tensor([0.0, 4.0], requires_grad=True, name="w")
    x.register_hook(lambda g: g * 1.0)
    with record(max_values=4) as trace, np.errstate(all="ignore"):
        with engine.scope("model", kind="Model"), engine.scope("double", kind="Double"):
            h = (x.to("sim:0") * 2.0).to("cpu") * x
        engine.grad((h * y).sum(), [x, h])
        (_Reentrant.apply(w.sqrt()) * x).sum().backward()
        with pytest.raises(ValueError, match="this backward always fails"):
            (FailsInBackward.apply(x) * 3.0).sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with engine.detect_anomaly(), pytest.raises(RuntimeError, match="nan"):
                (w.sqrt() * 0.0).sum().backward()
            with engine.detect_anomaly(check_forward=True, check_inf=True, mode="collect"):
                w.log() * 0.0
    return trace


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real trace file's bytes."""
    path = tmp_path_factory.mktemp("good") / "trace.jsonl"
    _sample_trace().save(path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def records(good: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in good.decode("utf-8").splitlines()]


def _write(path: Path, items: list[Any]) -> Path:
    lines = [item if isinstance(item, str) else json.dumps(item) for item in items]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _fails(path: Path, line: int, *fragments: str) -> str:
    """Load ``path``; it must fail on ``line`` with every fragment in the message."""
    with pytest.raises(TraceFormatError) as info:
        Trace.load(path)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith(f"{path}, line {line}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def _first(records: list[dict[str, Any]], **match: Any) -> int:
    """Index of the first record whose fields include ``match``."""
    return next(i for i, r in enumerate(records) if all(r.get(k) == v for k, v in match.items()))


def test_the_sample_loads(good: bytes, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(good)
    trace = Trace.load(path)
    assert len(trace.graph_tasks) == 5
    # Every kind our engine emits; derived_mismatch comes only from a bridge that derives,
    # comm from one that watches a distributed job, grads from the gradient watch.
    assert {e.kind for e in trace.events} == EVENT_KINDS - {"derived_mismatch", "comm", "grads"}


# -- whole-file problems ---------------------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    _fails(path, 1, "empty", "header")


def test_not_json(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    path = _write(tmp_path / "t.jsonl", [records[0], records[1], '{"type": "node", oops}'])
    _fails(path, 3, "not valid JSON", "column")


@pytest.mark.parametrize(
    ("garbage", "problem"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8"),
        (b"\x00\x01\x02\x03\n", "not valid JSON"),
        (b"PK\x03\x04 not a trace at all\n", "not valid JSON"),
    ],
)
def test_binary_garbage(tmp_path: Path, garbage: bytes, problem: str) -> None:
    path = tmp_path / "t.bin"
    path.write_bytes(garbage)
    _fails(path, 1, problem)


def test_garbage_after_a_good_start(tmp_path: Path, good: bytes) -> None:
    lines = good.splitlines(keepends=True)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines[:5]) + b"\xc3\x28 broken\n" + b"".join(lines[5:]))
    _fails(path, 6, "not UTF-8")


def test_missing_header(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    path = _write(tmp_path / "t.jsonl", records[1:])
    _fails(path, 1, "the first line must be the trace header")


@pytest.mark.parametrize("item", ['"header"', "[1, 2]", "null", "3"])
def test_a_record_that_is_not_an_object(
    tmp_path: Path, records: list[dict[str, Any]], item: str
) -> None:
    path = _write(tmp_path / "t.jsonl", [records[0], item])
    _fails(path, 2, "expected a JSON object")


def test_wrong_format(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    path = _write(tmp_path / "t.jsonl", [{**records[0], "format": "chrome-trace"}, *records[1:]])
    _fails(path, 1, "not an autograd-viz trace", "'chrome-trace'", "autograd-viz-trace")


@pytest.mark.parametrize("version", [0, 15, 99, "1", None, True])
def test_unknown_version(tmp_path: Path, records: list[dict[str, Any]], version: Any) -> None:
    path = _write(tmp_path / "t.jsonl", [{**records[0], "version": version}, *records[1:]])
    _fails(
        path,
        1,
        f"unknown trace schema version {version!r}",
        "reads versions 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 and 14",
    )


def test_a_version_1_file_still_loads(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    """Version 1 had backward anomalies only, without the fields version 2 added."""
    assert records[0]["version"] == 14
    old = [{k: v for k, v in {**records[0], "version": 1}.items() if k != "sources"}]
    for item in _without_modules(records[1:]):
        if item.get("kind") == "anomaly":
            if item["data"]["phase"] == "forward":
                continue
            kept = ("output_index", "value", "grad", "traceback")
            item = {**item, "data": {k: item["data"][k] for k in kept}}  # noqa: PLW2901
        old.append(item)
    trace = Trace.load(_write(tmp_path / "t.jsonl", old))
    assert trace.header["version"] == 1
    state = trace.state_at(len(trace))
    (anomaly,) = state.anomalies
    assert state.node(anomaly.node_id, anomaly.graph_task).status == "failed"


def test_a_second_header(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, kind="graph_task_start") + 1
    path = _write(tmp_path / "t.jsonl", [*records[:k], records[0], *records[k:]])
    _fails(path, k + 1, "unknown record type 'header'")


def test_unknown_record_type(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    path = _write(tmp_path / "t.jsonl", [records[0], {"type": "comment", "text": "hi"}])
    _fails(path, 2, "unknown record type 'comment'")


# -- truncation ----------------------------------------------------------------------------


def test_a_header_cut_short_is_truncated(tmp_path: Path, good: bytes) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(good[: good.index(b"\n") // 2])
    _fails(path, 1, "truncated")


def _quiet_points(good: bytes) -> list[int]:
    """The byte offsets just after each event line of ``good`` where no graph task runs."""
    points, offset, running = [], 0, set()
    for line in good.splitlines(keepends=True):
        offset += len(line)
        item = json.loads(line)
        if item["type"] != "event":
            continue
        if item["kind"] == "graph_task_start":
            running.add(item["graph_task"])
        elif item["kind"] == "graph_task_end":
            running.discard(item["graph_task"])
        if not running:
            points.append(offset)
    return points


def test_a_file_cut_short_keeps_every_finished_call_and_says_how_much_was_cut(
    tmp_path: Path, good: bytes
) -> None:
    """A process killed while streaming leaves a last line without its newline."""
    whole = Trace.load(_write_bytes(tmp_path / "whole.jsonl", good))
    ends = _quiet_points(good)
    assert len(ends) > 3
    header_end = good.index(b"\n") + 1
    for cut in sorted({header_end + 5, ends[0] - 3, ends[0] + 7, ends[-3] + 11, len(good) - 1}):
        path = _write_bytes(tmp_path / "t.jsonl", good[:cut])
        trace = Trace.load(path)
        finished = max((end for end in [header_end, *ends] if end <= cut), default=header_end)
        assert trace.tail_cut == cut - finished, cut
        kept = Trace.load(_write_bytes(tmp_path / "kept.jsonl", good[:finished]))
        assert trace == kept and kept.tail_cut == 0
        assert len(trace.events) < len(whole.events)
        assert all(e == whole.events[e.index] for e in trace.events)


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_cut_between_a_graph_task_and_its_nodes(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    k = _first(records, type="graph_task")
    path = _write(tmp_path / "t.jsonl", records[: k + 3])
    _fails(path, k + 3, f"declares {records[k]['nodes']} nodes but 2 follow")


def test_cut_before_a_graph_task_start(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, kind="graph_task_start")
    path = _write(tmp_path / "t.jsonl", records[:k])
    _fails(path, k, f"graph task {records[k]['graph_task']} has no graph_task_start event")


# -- wrong types, field by field -------------------------------------------------------------


def _field_cases(records: list[dict[str, Any]]) -> Iterator[tuple[int, str]]:
    """(index, field) for the first record of every type and event kind, every field."""
    seen: set[str] = set()
    for i, item in enumerate(records):
        label = item["type"] if item["type"] != "event" else f"event:{item['kind']}"
        if item.get("kind") == "anomaly":
            label += f":{item['data']['phase']}"  # forward and backward carry different fields
        if label in seen:
            continue
        seen.add(label)
        for name in item:
            yield i, name
        if item["type"] == "event":
            for name in item["data"]:
                yield i, f"data.{name}"


@pytest.mark.parametrize("wrong", [{"not": "this"}, [[["deep"]]]])
def test_a_field_of_the_wrong_type(
    tmp_path: Path, records: list[dict[str, Any]], wrong: Any
) -> None:
    cases = list(_field_cases(records))
    labels = {records[i]["type"] for i, _ in cases}
    kinds = {records[i].get("kind") for i, _ in cases}
    assert labels == {"header", "graph_task", "node", "event"} and len(kinds) == 16
    for i, name in cases:
        item = json.loads(json.dumps(records[i]))
        if name.startswith("data."):
            item["data"][name[5:]] = wrong
        else:
            item[name] = wrong
        path = _write(tmp_path / "t.jsonl", [*records[:i], item, *records[i + 1 :]])
        with pytest.raises(TraceFormatError) as info:
            Trace.load(path)
        message = str(info.value)
        if name == "modules" and isinstance(wrong, dict):
            # An object of strings is a modules map: the first node made in a module
            # names one it does not list.
            # Since version 12 that is the graph task's own scopes.
            scoped = next(k for k, r in enumerate(records) if k >= i and "scopes" in r)
            assert f", line {scoped + 1}: " in message and "'model'" in message, message
            continue
        assert f", line {i + 1}: " in message, (name, message)
        if name not in ("type", "kind"):
            field = name.removeprefix("data.")
            assert re.search(rf"\b{re.escape(field)}\b", message), (name, message)


def test_unknown_event_kind(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, kind="node_end")
    path = _write(
        tmp_path / "t.jsonl", [*records[:k], {**records[k], "kind": "teleport"}, *records[k + 1 :]]
    )
    _fails(path, k + 1, "unknown event kind 'teleport'")


@pytest.mark.parametrize("where", ["graph_task", "node", "event", "data", "leaf", "summary"])
def test_unknown_and_missing_fields(
    tmp_path: Path, records: list[dict[str, Any]], where: str
) -> None:
    def target(item: dict[str, Any]) -> dict[str, Any] | None:
        if where in ("graph_task", "node", "event"):
            return item if item["type"] == where else None
        if where == "data":
            return item["data"] if item["type"] == "event" else None
        if where == "leaf":
            return item.get("leaf")
        if item.get("kind") == "node_start" and item["data"]["inputs"][0]:
            return item["data"]["inputs"][0]
        return None

    k = next(i for i, r in enumerate(records) if target(json.loads(json.dumps(r))) is not None)
    extra = json.loads(json.dumps(records[k]))
    target_extra = target(extra)
    assert target_extra is not None
    target_extra["colour"] = "blue"
    path = _write(tmp_path / "t.jsonl", [*records[:k], extra, *records[k + 1 :]])
    _fails(path, k + 1, "unknown field 'colour'")

    missing = json.loads(json.dumps(records[k]))
    target_missing = target(missing)
    assert target_missing is not None
    name = next(n for n in target_missing if n != "type")
    del target_missing[name]
    path = _write(tmp_path / "t.jsonl", [*records[:k], missing, *records[k + 1 :]])
    _fails(path, k + 1, f"missing field {name!r}")


# -- how records fit together ---------------------------------------------------------------


@pytest.mark.parametrize("delta", [0, -1, -1000])
def test_seq_must_increase_within_a_thread(
    tmp_path: Path, records: list[dict[str, Any]], delta: int
) -> None:
    events = [i for i, r in enumerate(records) if r["type"] == "event"]
    k = events[5]
    previous = records[events[4]]["seq"]
    thread = records[events[4]]["thread"]
    assert records[k]["thread"] == thread
    changed = {**records[k], "seq": previous + delta}
    path = _write(tmp_path / "t.jsonl", [*records[:k], changed, *records[k + 1 :]])
    _fails(
        path,
        k + 1,
        f"seq {previous + delta} is not after {previous}, the previous event of thread {thread!r}",
    )


def test_seq_may_go_back_between_threads_but_never_repeat(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    # A live session lets paused threads go in its own order (see Note [Event order]).
    events = [i for i, r in enumerate(records) if r["type"] == "event"]
    k = events[-1]
    first_seq = records[events[0]]["seq"]
    other = {**records[k], "thread": "a-thread-of-its-own", "seq": first_seq - 1}
    path = _write(tmp_path / "ok.jsonl", [*records[:k], other, *records[k + 1 :]])
    assert Trace.load(path).events[-1].seq == first_seq - 1
    clash = {**records[k], "thread": "a-thread-of-its-own", "seq": first_seq}
    path = _write(tmp_path / "clash.jsonl", [*records[:k], clash, *records[k + 1 :]])
    _fails(path, k + 1, f"seq {first_seq} appears twice")


def test_node_count_mismatch(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, type="graph_task")
    declared = records[k]["nodes"]
    fewer = [*records[: k + 1], *records[k + 2 :]]  # one node record dropped
    path = _write(tmp_path / "t.jsonl", fewer)
    _fails(path, k + declared + 1, f"declares {declared} nodes but {declared - 1} follow")
    more = {**records[k], "nodes": declared + 1}
    path = _write(tmp_path / "t.jsonl", [*records[:k], more, *records[k + 1 :]])
    _fails(path, k + declared + 2, f"declares {declared + 1} nodes but {declared} follow")


def test_duplicated_node(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, type="graph_task")
    path = _write(tmp_path / "t.jsonl", [*records[: k + 2], records[k + 1], *records[k + 2 :]])
    _fails(path, k + 3, f"node {records[k + 1]['id']} appears twice")


def test_node_outside_its_graph_task(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, type="graph_task")
    start = _first(records, kind="graph_task_start")
    node = records[k + 1]
    path = _write(tmp_path / "t.jsonl", [*records[: start + 2], node, *records[start + 2 :]])
    _fails(path, start + 3, "a node record must follow its graph_task record")


def test_start_event_without_its_graph_task(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, type="graph_task")
    start = _first(records, kind="graph_task_start")
    path = _write(tmp_path / "t.jsonl", [*records[:k], *records[start:]])
    _fails(path, k + 1, "graph_task_start of", "without its graph_task record")


def test_graph_task_twice(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    k = _first(records, type="graph_task")
    end = _first(records, kind="graph_task_end")
    block = records[k : _first(records, kind="graph_task_start") + 1]
    path = _write(tmp_path / "t.jsonl", [*records[: end + 1], *block])
    _fails(path, end + 2, f"graph task {records[k]['id']} appears twice")


# -- numbers JSON cannot hold, and nesting -------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literals(tmp_path: Path, good: bytes, literal: str) -> None:
    lines = good.decode("utf-8").splitlines()
    k = next(i for i, line in enumerate(lines) if '"min":' in line)
    lines[k] = re.sub(r'"min":[^,]+', f'"min":{literal}', lines[k], count=1)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _fails(path, k + 1, f"{literal} is not valid JSON")


@pytest.mark.parametrize(
    ("field", "number", "problem"),
    [
        ("min", "1e999", "out of range"),
        ("min", "-1e999", "out of range"),
        pytest.param("min", "1" * 5000, "too many digits", id="min-5000-digits"),
        ("seq", "1e999", "expected an integer"),
        pytest.param("seq", "1" * 5000, "too many digits", id="seq-5000-digits"),
        ("seq", str(2**70), "out of range"),
        ("t_ns", str(-(2**70)), "out of range"),
    ],
)
def test_huge_numbers(tmp_path: Path, good: bytes, field: str, number: str, problem: str) -> None:
    lines = good.decode("utf-8").splitlines()
    k = next(i for i, line in enumerate(lines) if f'"{field}":' in line)
    lines[k] = re.sub(rf'"{field}":[^,]+', f'"{field}":{number}', lines[k], count=1)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    message = _fails(path, k + 1, problem)
    assert len(message) < 300, "the message quotes the number in full"


@pytest.mark.parametrize("depth", [100, 100_000])
def test_deep_nesting(tmp_path: Path, records: list[dict[str, Any]], depth: int) -> None:
    k = _first(records, kind="node_end")
    line = json.dumps({**records[k], "data": None}).replace(
        '"data": null', '"data": ' + "[" * depth + "]" * depth
    )
    path = _write(tmp_path / "t.jsonl", [*records[:k], line])
    _fails(path, k + 1, "nested too deeply" if depth > 1000 else "data: expected an object")


# -- fuzzing ---------------------------------------------------------------------------------

_FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["nan", "inf", "-inf", "node_start", "graph_task", "cpu", ""]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _load_or_reject(path: Path) -> None:
    """The property: a Trace that replays and saves again, or a TraceFormatError."""
    try:
        trace = Trace.load(path)
    except TraceFormatError as exc:
        assert re.search(r", line \d+: ", str(exc)), str(exc)
        event("rejected")
        return
    event("loaded")
    trace.state_at(len(trace)).nodes()
    assert isinstance(trace.state_at(len(trace) // 2).leaves, dict)
    again = path.with_suffix(".again")
    trace.save(again)
    assert Trace.load(again) == trace


@_FUZZ
@given(data=st.data())
def test_fuzz_truncate_anywhere(tmp_path: Path, good: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(good)))
    path = tmp_path / "t.jsonl"
    path.write_bytes(good[:cut])
    _load_or_reject(path)


@_FUZZ
@given(data=st.data())
def test_fuzz_replace_a_value(tmp_path: Path, good: bytes, data: st.DataObject) -> None:
    lines = good.decode("utf-8").splitlines()
    k = data.draw(st.integers(0, len(lines) - 1))
    item = json.loads(lines[k])
    where = data.draw(st.sampled_from(list(paths(item))))
    new = data.draw(_json_values)
    lines[k] = json.dumps(replaced(item, where, new))  # NaN and Infinity literals included
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _load_or_reject(path)


@_FUZZ
@given(data=st.data())
def test_fuzz_insert_bytes(tmp_path: Path, good: bytes, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(good)))
    noise = data.draw(st.binary(min_size=1, max_size=16))
    path = tmp_path / "t.jsonl"
    path.write_bytes(good[:at] + noise + good[at:])
    _load_or_reject(path)


@_FUZZ
@given(data=st.data())
def test_fuzz_shuffle_lines(tmp_path: Path, good: bytes, data: st.DataObject) -> None:
    lines = good.splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["drop", "duplicate", "swap"]))
        i = data.draw(st.integers(0, len(lines) - 1))
        j = data.draw(st.integers(0, len(lines) - 1))
        if op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    _load_or_reject(path)


def _same_type(value: Any) -> st.SearchStrategy[Any]:
    """Values a schema would accept in place of ``value``: the fuzz reaches the replay."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(-3, 40) | st.just(2**64 - 1)
    if isinstance(value, float):
        return st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(["nan", "inf"])
    if isinstance(value, str):
        return st.sampled_from(["cpu", "sim:0", "MainThread", "needed", "pruned", "x", "nan", ""])
    if isinstance(value, list):
        return st.just([]) | st.just(value[:1]) | st.just(value + value[-1:])
    return st.just(value)


@_FUZZ
@given(data=st.data())
def test_fuzz_replace_or_drop_a_value_keeping_types(
    tmp_path: Path, good: bytes, data: st.DataObject
) -> None:
    lines = good.decode("utf-8").splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        k = data.draw(st.integers(1, len(lines) - 1))
        item = json.loads(lines[k])
        where = data.draw(st.sampled_from(list(paths(item))[1:]))
        parent: Any = item
        for key in where[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            del parent[where[-1]]  # optional fields may go; required ones must be missed
            lines[k] = json.dumps(item)
        else:
            new = data.draw(_same_type(parent[where[-1]]))
            lines[k] = json.dumps(replaced(item, where, new))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _load_or_reject(path)


def test_optional_fields_may_be_left_out(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    stripped = json.loads(json.dumps(records))
    dropped = 0
    for item in stripped:
        if item["type"] == "event":
            for name in EVENT_DATA[item["kind"]][1]:
                dropped += item["data"].pop(name, None) is not None
        elif item["type"] == "node":
            dropped += item.pop("leaf", None) is not None
            dropped += item.pop("scope_ref", None) is not None
        elif item["type"] == "graph_task":
            dropped += item.pop("modules", None) is not None
            dropped += item.pop("scopes", None) is not None
    assert dropped > 20
    trace = Trace.load(_write(tmp_path / "t.jsonl", stripped))
    for step in range(len(trace) + 1):
        state = trace.state_at(step)
        for gid in state.graph_tasks:
            state.nodes(gid)
    assert not any(state.queues.values())


def test_the_example_in_the_format_reference_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[3] / "docs" / "trace-format.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```jsonl\n(.*?)```", doc, flags=re.DOTALL)
    path = tmp_path / "example.jsonl"
    path.write_text(example, encoding="utf-8")
    trace = Trace.load(path)
    state = trace.state_at(len(trace))
    (leaf,) = state.leaves.values()
    assert leaf.name == "x" and leaf.grad is not None and leaf.grad.values == (2.0, -4.0)
    assert all(node.status == "done" for node in state.nodes().values())


def test_the_format_reference_lists_every_event_field() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "trace-format.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Event data") : doc.index("## Tensor summaries")]
    headings = re.findall(r"^### (.*)$", section, flags=re.MULTILINE)
    for kind, (required, optional) in EVENT_DATA.items():
        (heading,) = [h for h in headings if f"`{kind}`" in h]
        body = section[section.index(f"### {heading}\n") :].split("\n### ", 1)[0]
        for name in [*required, *optional]:
            assert f"| `{name}` |" in body, (kind, name)


# -- modules (version 5) ---------------------------------------------------------------------


def _without_modules(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` as a file before version 5 wrote them: no ``scope``, no ``modules``."""
    out = []
    for item in records:
        if item["type"] in ("node", "graph_task"):
            left_out = ("scope", "scope_ref", "modules", "scopes")
            item = {k: v for k, v in item.items() if k not in left_out}  # noqa: PLW2901
        out.append(item)
    return out


def _whole_scopes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` with each node's scope written whole, as versions 5 to 11 wrote it (a
    ``scope`` of ``[path, call]`` pairs, not a ``scope_ref`` to its graph task's ``scopes``)."""
    out: list[dict[str, Any]] = []
    table: list[Any] = []
    for item in json.loads(json.dumps(records)):
        if item["type"] == "graph_task":
            table = item.pop("scopes", [])
        elif item["type"] == "node" and "scope_ref" in item:
            at, chain = item.pop("scope_ref"), []
            while at is not None:
                at, path, call = table[at]
                chain.insert(0, [path, call])
            item["scope"] = chain
        out.append(item)
    return out


def test_whole_scopes_load_as_scopes_by_reference(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    by_reference = Trace.load(_write(tmp_path / "new.jsonl", records))
    whole = Trace.load(_write(tmp_path / "whole.jsonl", _whole_scopes(records)))
    for gid, info in by_reference.graph_tasks.items():
        scopes = {n.id: n.scope for n in info.nodes.values()}
        assert scopes == {n.id: n.scope for n in whole.graph_tasks[gid].nodes.values()}
    assert any(n.scope for info in whole.graph_tasks.values() for n in info.nodes.values())


def test_scopes_and_modules_are_saved_and_loaded(good: bytes, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(good)
    trace = Trace.load(path)
    first = trace.graph_tasks[min(trace.graph_tasks)]
    assert first.modules == {"model": "Model", "model.double": "Double"}
    scoped = {n.name: n.scope for n in first.nodes.values() if n.scope}
    inner = (("model", 0), ("model.double", 0))
    # x * 2.0, the two copies and the product were made inside both scopes; the leaf x too
    # (its AccumulateGrad was made there, at x's first use).
    assert scoped == {
        "MulBackward0": inner,
        "ToCopyBackward0": inner,
        "AccumulateGrad": inner,
    }, scoped
    outside = [n.name for n in first.nodes.values() if not n.scope]
    # h * y, the sum, and y's AccumulateGrad (y was first used there).
    assert sorted(outside) == ["AccumulateGrad", "MulBackward0", "SumBackward0"], outside
    # Nodes of one module call share one scope object, as recorded.
    shared = {id(n.scope) for n in first.nodes.values() if n.scope}
    assert len(shared) == 1
    # Later graphs made no node in a scope; x's AccumulateGrad, made once, keeps its own.
    later = [info for gid, info in trace.graph_tasks.items() if gid != first.id]
    assert later
    for info in later:
        for node in info.nodes.values():
            leaf = node.leaf
            assert node.scope == (inner if leaf is not None and leaf.name == "x" else ())
    trace.save(tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == good


def test_a_version_4_file_loads_with_empty_scopes(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    old = _without_modules([{**records[0], "version": 4}, *records[1:]])
    trace = Trace.load(_write(tmp_path / "t.jsonl", old))
    assert trace.header["version"] == 4
    for info in trace.graph_tasks.values():
        assert info.modules == {}
        assert all(node.scope == () for node in info.nodes.values())
    new = Trace.load(_write(tmp_path / "new.jsonl", records))
    assert trace.events == new.events


@pytest.mark.parametrize(
    ("scope", "problem"),
    [
        ([["model", -1]], "scope: [0]: [1]: expected a non-negative integer, got -1"),
        ([["", 0]], "scope: [0]: [0]: expected a module path, got an empty string"),
        ([["model"]], "scope: [0]: expected a list of 2 items, got 1"),
        ([[3, 0]], "scope: [0]: [0]: expected a string, got the number 3"),
        ("model", "scope: expected a list, got a string"),
        ([["model", 0], ["elsewhere", 0]], "scope names module 'elsewhere', which its graph"),
    ],
)
def test_a_bad_scope_is_rejected(
    tmp_path: Path, records: list[dict[str, Any]], scope: Any, problem: str
) -> None:
    records = _whole_scopes(records)
    index = next(i for i, r in enumerate(records) if r["type"] == "node" and "scope" in r)
    bad = [*records[:index], {**records[index], "scope": scope}, *records[index + 1 :]]
    _fails(_write(tmp_path / "t.jsonl", bad), index + 1, problem)


@pytest.mark.parametrize(
    ("modules", "problem"),
    [
        ({"model": 1, "model.double": "Double"}, "modules: 'model': expected a string"),
        (["model"], "modules: expected an object, got a list"),
    ],
)
def test_bad_modules_are_rejected(
    tmp_path: Path, records: list[dict[str, Any]], modules: Any, problem: str
) -> None:
    index = next(i for i, r in enumerate(records) if "modules" in r)
    bad = [*records[:index], {**records[index], "modules": modules}, *records[index + 1 :]]
    _fails(_write(tmp_path / "t.jsonl", bad), index + 1, problem)


def test_hostile_module_paths_are_kept_as_they_are(tmp_path: Path) -> None:
    from tests.hostile.names import HOSTILE

    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    names = [name for key, name in HOSTILE.items() if key != "long"]
    with record() as trace:
        y = x
        for name in names:
            with engine.scope(name, kind=name):
                y = y * 2.0
        y.sum().backward()
    trace.save(tmp_path / "t.jsonl")
    loaded = Trace.load(tmp_path / "t.jsonl")
    (info,) = loaded.graph_tasks.values()
    assert sorted(info.modules) == sorted(names)
    assert all(info.modules[path] == path for path in info.modules)
    assert loaded == trace


def test_the_schema_reads_every_kind_of_event_the_engine_emits() -> None:
    # trace/ does not import the engine (it is plain data), so the two lists meet here.
    assert set(EVENT_DATA) == EVENT_KINDS
