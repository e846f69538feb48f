"""Anomaly mode beyond PyTorch: Inf checks, forward checks, collect mode, and its arguments."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import engine
from engine import anomaly, events
from engine.anomaly import AnomalySettings


@pytest.fixture(autouse=True)
def _all_settings_restored() -> Iterator[None]:
    """The shared fixture resets only what PyTorch has; these tests touch every setting.

    NumPy's warnings about the NaN and Inf these tests make on purpose are silenced.
    """
    with np.errstate(all="ignore"):
        yield
    anomaly.STATE.set(AnomalySettings(False, True, False, False, "raise"))


@contextmanager
def anomaly_mode(**settings: Any) -> Iterator[None]:
    """``detect_anomaly(**settings)`` without its warnings (they are tested elsewhere)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with engine.detect_anomaly(**settings):
            yield


def leaf(*values: float) -> engine.Tensor:
    return engine.tensor(list(values), requires_grad=True)


def anomalies(recorded: list[events.Event], phase: str | None = None) -> list[events.Event]:
    return [
        e for e in recorded if e.kind == "anomaly" and (phase is None or e.data["phase"] == phase)
    ]


def still_usable() -> None:
    """A plain backward after an anomaly error works and gives the right gradient."""
    x = leaf(1.0, 2.0)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


# -- defaults: PyTorch's behaviour -----------------------------------------------------


def test_the_defaults_are_pytorchs() -> None:
    assert anomaly.anomaly_settings() == AnomalySettings(False, True, False, False, "raise")
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = engine.detect_anomaly()
    assert mode.settings == AnomalySettings(True, True, False, False, "raise")
    with mode:
        assert anomaly.anomaly_settings() == mode.settings
        x = leaf(0.0, 1.0)
        y = x.log()  # -inf, born in the forward: not checked by default
        assert np.isneginf(y.detach().numpy()[0])
        x.sqrt().sum().backward()  # SqrtBackward0 returns inf: not checked by default
    assert np.isposinf(x.grad.numpy()[0])
    assert anomaly.anomaly_settings() == AnomalySettings(False, True, False, False, "raise")


def test_a_nan_still_raises_pytorchs_message_and_warning() -> None:
    with anomaly_mode():
        x = leaf(0.0, 1.0)
        with (
            pytest.raises(
                RuntimeError,
                match=r"^Function 'SqrtBackward0' returned nan values in its 0th output\.$",
            ),
            warnings.catch_warnings(record=True) as caught,
        ):
            warnings.simplefilter("always")
            (x.sqrt() * 0.0).sum().backward()
    assert any("Error detected in SqrtBackward0" in str(w.message) for w in caught)
    still_usable()


def test_the_public_names() -> None:
    assert engine.autograd.detect_anomaly is engine.detect_anomaly
    assert engine.autograd.set_detect_anomaly is engine.set_detect_anomaly


# -- check_inf -------------------------------------------------------------------------


def test_check_inf_flags_an_infinite_gradient() -> None:
    with anomaly_mode(check_inf=True):
        x = leaf(0.0, 1.0)
        with pytest.raises(
            RuntimeError,
            match=r"^Function 'SqrtBackward0' returned inf values in its 0th output\.$",
        ):
            x.sqrt().sum().backward()
    assert x.grad is None
    still_usable()


@pytest.mark.parametrize(("check_nan", "value"), [(True, "nan"), (False, "inf")])
def test_nan_is_named_first_when_it_is_checked(check_nan: bool, value: str) -> None:
    # SqrtBackward0 at 0 with incoming gradients 0 and 1 returns [0/0, 1/0] = [nan, inf].
    with anomaly_mode(check_nan=check_nan, check_inf=True):
        x = leaf(0.0, 0.0)
        with pytest.raises(RuntimeError, match=f"returned {value} values in its 0th output"):
            x.sqrt().backward(engine.tensor([0.0, 1.0]))


def test_check_inf_leaves_finite_backward_alone() -> None:
    with anomaly_mode(check_inf=True, check_forward=True):
        x = leaf(1.0, 4.0)
        (x.sqrt() * x.log()).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


# -- check_forward ---------------------------------------------------------------------

FORWARD_CASES: dict[str, tuple[Callable[[engine.Tensor], engine.Tensor], str, str, str, bool]] = {
    # name: (op, node, op name, value, needs check_inf)
    "log(0)": (lambda x: x.log(), "LogBackward0", "log", "inf", True),
    "log(-1)": (lambda x: (x - 1.0).log(), "LogBackward0", "log", "nan", False),
    "sqrt(-1)": (lambda x: (x - 1.0).sqrt(), "SqrtBackward0", "sqrt", "nan", False),
    "0/0": (lambda x: x / x, "DivBackward0", "div", "nan", False),
    "0/0.0": (lambda x: x / 0.0, "DivBackward0", "div", "nan", False),
    "exp overflow": (lambda x: (x + 1000.0).exp(), "ExpBackward0", "exp", "inf", True),
}


@pytest.mark.parametrize("case", list(FORWARD_CASES))
def test_check_forward_names_the_op_that_made_the_value(case: str) -> None:
    fn, node, op, value, needs_inf = FORWARD_CASES[case]
    x = leaf(0.0)
    with anomaly_mode(check_forward=True, check_inf=needs_inf):
        with pytest.raises(RuntimeError) as info:
            fn(x)
        assert str(info.value) == (
            f"Function '{node}' produced {value} values in its 0th forward output (op '{op}')."
        )
        still_usable()


def test_check_forward_without_check_inf_lets_inf_be_born() -> None:
    with anomaly_mode(check_forward=True):
        x = leaf(0.0, 1.0)
        y = x.log()  # -inf is not checked...
        with pytest.raises(RuntimeError, match=r"^Function 'MulBackward0' produced nan values"):
            y * 0.0  # ...but the NaN that -inf * 0 makes is born here (Note [Born non-finite])


def test_a_value_passed_on_is_not_raised(recorded: list[events.Event]) -> None:
    with anomaly_mode(check_forward=True, check_inf=True):
        x = leaf(float("nan"), 1.0)  # non-finite before any op
        y = x * 2.0
        z = y.sqrt() + engine.tensor([1.0, float("inf")])
        z.sum()
    found = anomalies(recorded, "forward")
    assert [e.node_name for e in found] == [
        "MulBackward0",
        "SqrtBackward0",
        "AddBackward0",
        "SumBackward0",
    ]
    assert not any(e.data["born"] or e.data["raised"] for e in found)
    assert [e.data["nonfinite_inputs"] for e in found] == [[0], [0], [0, 1], [0]]


def test_forward_checks_need_anomaly_mode_on() -> None:
    engine.set_detect_anomaly(False, check_forward=True, check_inf=True)
    x = leaf(0.0)
    assert np.isneginf(x.log().detach().numpy()).all()


def test_an_in_place_op_is_checked_before_it_writes() -> None:
    x = leaf(1.0, 2.0)
    h = x * 1.0
    with (
        anomaly_mode(check_forward=True, check_inf=True),
        pytest.raises(RuntimeError, match="'DivBackward0' produced inf"),
    ):
        h.div_(0.0)
    np.testing.assert_array_equal(h.detach().numpy(), [1.0, 2.0])
    assert h.grad_fn.name() == "MulBackward0"


def test_forward_event_fields(recorded: list[events.Event]) -> None:
    x = leaf(0.0, 2.0)
    with anomaly_mode(check_forward=True, check_inf=True), pytest.raises(RuntimeError):
        x.log()  # the line the traceback must show
    (event,) = anomalies(recorded)
    assert event.graph_task == 0 and event.device == "cpu"
    assert event.node_name == "LogBackward0"
    data = event.data
    assert data["phase"] == "forward" and data["op"] == "log"
    assert data["value"] == "inf" and data["output_index"] == 0
    assert data["born"] and data["raised"]
    assert data["nonfinite_inputs"] == []
    tensor = data["tensor"].summary
    assert tensor.shape == (2,) and tensor.inf_count == 1 and tensor.nan_count == 0
    (given,) = data["inputs"]
    assert given.summary.values is None and given.summary.min == 0.0
    assert "x.log()  # the line" in "".join(data["traceback"])


def test_forward_checks_in_a_backward_that_builds_a_graph(recorded: list[events.Event]) -> None:
    # With create_graph, SqrtBackward0 computes g / (2 * sqrt(x)) with engine ops: at x = 0
    # that division is born infinite, inside the backward pass, outside any forward call.
    x = leaf(0.0, 1.0)
    y = x.sqrt()
    with anomaly_mode(check_forward=True, check_inf=True, mode="collect"):
        (grad,) = engine.grad(y.sum(), [x], create_graph=True)
    assert np.isposinf(grad.detach().numpy()[0])
    forward = [e for e in anomalies(recorded, "forward") if e.data["born"]]
    assert [e.node_name for e in forward] == ["DivBackward0"]
    assert forward[0].graph_task == 0 and forward[0].thread == "MainThread"
    assert [e.node_name for e in anomalies(recorded, "backward")] == ["SqrtBackward0"]


# -- collect mode -----------------------------------------------------------------------


def _three_nan_sources() -> tuple[engine.Tensor, list[engine.Tensor], set[int]]:
    """A loss whose backward makes NaN in three places; the ids of every node that returns one."""
    a, b, c, d = leaf(0.0, 1.0), leaf(0.0, 4.0), leaf(1.0, 2.0), leaf(0.0, 1.0)
    root_a = a.sqrt()  # d/da at 0 with a zero gradient: 0 / 0
    root_b = b.pow(0.5)  # the same through pow
    # d/dc is 0 / 0 and d/dd is -0 * c / 0**2; the second NaN goes on through MulBackward0.
    quotient = c / (d * 1.0)
    loss = (root_a * 0.0).sum() + (root_b * 0.0).sum() + (quotient * 0.0).sum()
    sources = {
        root_a.grad_fn.node_id,
        root_b.grad_fn.node_id,
        quotient.grad_fn.node_id,
        quotient.grad_fn.next_functions[1][0].node_id,  # d * 1.0 passes the NaN on
    }
    return loss, [a, b, c, d], sources


def test_collect_mode_finds_every_nan_and_finishes(recorded: list[events.Event]) -> None:
    loss, (a, b, c, d), sources = _three_nan_sources()
    with anomaly_mode(mode="collect"):
        loss.backward()
    found = anomalies(recorded, "backward")
    assert {e.node_id for e in found} == sources
    assert len(found) == len(sources) + 1  # DivBackward0 returns two
    assert {e.node_name for e in found} == {
        "SqrtBackward0",
        "PowBackward0",
        "DivBackward0",
        "MulBackward0",
    }
    assert all(e.data["value"] == "nan" and not e.data["raised"] for e in found)
    assert [e.data["output_index"] for e in found if e.node_name == "DivBackward0"] == [0, 1]
    assert not [e for e in recorded if e.kind == "error"]
    (end,) = [e for e in recorded if e.kind == "graph_task_end"]
    assert end.data["status"] == "ok"
    for t in (a, b, c, d):
        assert np.isnan(t.grad.numpy()[0]) and np.isfinite(t.grad.numpy()[1])


def test_raise_mode_stops_at_the_first_of_them(recorded: list[events.Event]) -> None:
    loss, _, sources = _three_nan_sources()
    with anomaly_mode(), pytest.raises(RuntimeError, match="returned nan values"):
        loss.backward()
    (found,) = anomalies(recorded)
    assert found.node_id in sources and found.data["raised"]
    still_usable()


def test_collect_mode_reports_every_forward_finding(recorded: list[events.Event]) -> None:
    x = leaf(0.0, 1.0)
    with anomaly_mode(check_forward=True, check_inf=True, mode="collect"):
        logs = x.log()
        roots = (x - 1.0).sqrt()
        ratio = x / x
        passed_on = logs * 2.0
        loss = (passed_on * 0.0).sum() + roots.sum() + ratio.sum()
        loss.backward()
    found = anomalies(recorded, "forward")
    born = {e.node_id for e in found if e.data["born"]}
    assert born == {logs.grad_fn.node_id, roots.grad_fn.node_id, ratio.grad_fn.node_id}
    assert not any(e.data["raised"] for e in found)
    passed = {e.node_name: e.data["nonfinite_inputs"] for e in found if not e.data["born"]}
    assert passed["MulBackward0"] == [0]
    assert anomalies(recorded, "backward")  # the backward ran, and was checked too
    assert x.grad is not None


def test_collect_mode_without_listeners_checks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_run(*args: Any) -> None:
        raise AssertionError("a check ran although nobody listens")

    monkeypatch.setattr(anomaly, "non_finite_value", must_not_run)
    monkeypatch.setattr(anomaly, "note_forward_inputs", must_not_run)
    loss, leaves, _ = _three_nan_sources()
    with anomaly_mode(mode="collect"):
        loss.backward()
    assert np.isnan(leaves[0].grad.numpy()[0])
    monkeypatch.undo()
    with anomaly_mode(mode="collect", check_forward=True):
        (leaf(-1.0).sqrt() * 0.0).sum().backward()


def test_no_check_runs_with_anomaly_mode_off(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_run(*args: Any) -> None:
        raise AssertionError("an anomaly check ran with anomaly mode off")

    for name in ("non_finite_value", "note_forward_inputs", "check_forward_output"):
        monkeypatch.setattr(anomaly, name, must_not_run)
    x = leaf(0.0, 1.0)
    (x.log() * x.sqrt()).sum().backward()
    assert np.isnan(x.grad.numpy()[0])


# -- the arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: engine.detect_anomaly(mode="stop"), ValueError, "unknown anomaly mode 'stop'"),
        (lambda: engine.detect_anomaly(mode=None), TypeError, "mode must be 'raise' or 'collect'"),
        (lambda: engine.detect_anomaly(check_inf="yes"), TypeError, "check_inf must be True or"),
        (lambda: engine.detect_anomaly(check_forward=1), TypeError, "check_forward must be"),
        (lambda: engine.detect_anomaly(check_nan=None), TypeError, "check_nan must be True or"),
        (lambda: engine.detect_anomaly(True, True), TypeError, "positional argument"),
        (lambda: engine.set_detect_anomaly(1), TypeError, "enabled must be True or False"),
        (engine.set_detect_anomaly, TypeError, "set_detect_anomaly(True)"),
        (lambda: engine.set_detect_anomaly(True, mode="all"), ValueError, "'raise' (stop at"),
        (lambda: engine.set_detect_anomaly(True, mode=False), TypeError, "got bool"),
    ],
)
def test_bad_arguments(make: Callable[[], Any], error: type[Exception], message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error) as info:
            make()
    assert message in str(info.value)
    assert anomaly.anomaly_settings() == AnomalySettings(False, True, False, False, "raise")
    still_usable()


def test_set_detect_anomaly_sets_and_restores_every_setting() -> None:
    engine.set_detect_anomaly(True, check_inf=True, mode="collect")
    assert anomaly.anomaly_settings() == AnomalySettings(True, True, True, False, "collect")
    with engine.set_detect_anomaly(True, False, check_forward=True):
        assert anomaly.anomaly_settings() == AnomalySettings(True, False, False, True, "raise")
    assert anomaly.anomaly_settings() == AnomalySettings(True, True, True, False, "collect")
    engine.set_detect_anomaly(mode=False)  # PyTorch's keyword for the first argument
    assert not engine.is_anomaly_enabled()


def test_detect_anomaly_decorates_with_its_settings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @engine.detect_anomaly(check_forward=True, check_inf=True)
        def make_inf(x: engine.Tensor) -> engine.Tensor:
            assert anomaly.anomaly_settings().check_forward
            return x.log()

    for _ in range(2):  # a fresh context per call
        with pytest.raises(RuntimeError, match="'LogBackward0' produced inf"):
            make_inf(leaf(0.0))
        assert not engine.is_anomaly_enabled()


# -- against PyTorch -------------------------------------------------------------------

BACKWARD_CASES: dict[str, tuple[Callable[[Any], Any], list[float]]] = {
    "sqrt": (lambda x: x.sqrt() * 0.0, [0.0, 1.0]),
    "pow": (lambda x: x.pow(0.5) * 0.0, [0.0, 1.0]),
    "log": (lambda x: x.log() * 0.0, [1.0, 0.0]),
    "sqrt after mul": (lambda x: (x * 1.0).sqrt() * 0.0, [0.0, 1.0]),
    "div": (lambda x: (x * 0.0 + 1.0) / x * 0.0, [0.0, 1.0]),
}


def _torch_message(torch: Any, fn: Callable[[Any], Any], values: list[float]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(), pytest.raises(RuntimeError) as info:
            fn(torch.tensor(values, requires_grad=True)).sum().backward()
    return str(info.value)


def _collected(loss: engine.Tensor) -> list[str]:
    """What collect mode finds in ``loss``'s backward, as raise mode would say it, in order."""
    found: list[events.Event] = []
    with events.listen(found.append), anomaly_mode(mode="collect"):
        loss.backward()
    return [
        f"Function '{e.node_name}' returned nan values in its {e.data['output_index']}th output."
        for e in anomalies(found)
    ]


@pytest.mark.oracle
@pytest.mark.parametrize("case", list(BACKWARD_CASES))
def test_the_first_finding_is_where_pytorch_stops(torch: Any, case: str) -> None:
    fn, values = BACKWARD_CASES[case]
    ours = _collected(fn(leaf(*values)).sum())
    assert ours[0] == _torch_message(torch, fn, values)


@pytest.mark.oracle
def test_collect_mode_finds_every_node_pytorch_stops_at(torch: Any) -> None:
    x = {name: leaf(*values) for name, (_, values) in BACKWARD_CASES.items()}
    loss = sum(fn(x[name]).sum() for name, (fn, _) in BACKWARD_CASES.items())
    assert isinstance(loss, engine.Tensor)
    ours = _collected(loss)
    theirs = {_torch_message(torch, fn, values) for fn, values in BACKWARD_CASES.values()}
    assert theirs <= set(ours)
    assert len(theirs) == 4  # two cases stop at SqrtBackward0 alike


@pytest.mark.oracle
@pytest.mark.parametrize("case", list(FORWARD_CASES))
def test_check_forward_names_pytorchs_node(torch: Any, case: str) -> None:
    fn, _, _, _, needs_inf = FORWARD_CASES[case]
    with anomaly_mode(check_forward=True, check_inf=needs_inf), pytest.raises(RuntimeError) as info:
        fn(leaf(0.0))
    theirs = fn(torch.tensor([0.0], requires_grad=True)).grad_fn.name()
    assert str(info.value).startswith(f"Function '{theirs}' produced")


@pytest.mark.oracle
def test_bad_flags_are_type_errors_as_in_pytorch(torch: Any) -> None:
    for lib in (engine, torch.autograd):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(TypeError), lib.detect_anomaly(check_nan=1):
                pass
            with pytest.raises(TypeError):
                lib.set_detect_anomaly(1)
    torch.autograd.set_detect_anomaly(False)
