"""The plain path (Note [The plain path] in engine.engine) against the general one.

Nodes without hooks, in a backward call with no listener, no anomaly mode
and no ``inputs=`` pruning, run on the plain path; a listener sends every node
through ``evaluate_function``. Each graph here runs both ways, from the same
values, and must give the same gradients, run its nodes in the same order and
fail with the same error.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import events
from engine.engine import Engine

Build = Callable[[list[str]], tuple[engine.Tensor, list[engine.Tensor]]]
"""Makes fresh leaves and a scalar loss; tagged nodes log their names into the list."""


class Tag(engine.Function):
    """The identity, logging ``name`` when its backward runs."""

    @staticmethod
    def forward(ctx: Any, x: engine.Tensor, name: str, log: list[str]) -> engine.Tensor:
        ctx.tag, ctx.log = name, log
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> tuple[engine.Tensor, None, None]:
        ctx.log.append(ctx.tag)
        return grad, None, None


class ReturnsInstead(engine.Function):
    """Backward returns ``make(grad)`` instead of the gradient of its input."""

    @staticmethod
    def forward(ctx: Any, x: engine.Tensor, make: Callable[[engine.Tensor], Any]) -> engine.Tensor:
        ctx.make = make
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> tuple[Any, None]:
        return ctx.make(grad), None


def _leaf(values: list[float], dtype: Any = engine.float64) -> engine.Tensor:
    return engine.tensor(values, dtype=dtype, requires_grad=True)


def _diamond(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
    x = _leaf([0.5, -1.5, 2.0])
    a = Tag.apply(x.sin(), "a", log)
    b = Tag.apply(x * x, "b", log)
    c = Tag.apply(a * b + a.exp(), "c", log)
    return (c * b).sum(), [x]


def _wide(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
    x = _leaf([1.0, 2.0])
    parts = [Tag.apply(x * float(i + 1), f"p{i}", log) for i in range(12)]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return (total * total).sum(), [x]


def _chain(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
    x = _leaf([0.3])
    y = x
    for i in range(200):
        y = y * 1.01 + 0.001
        if i % 50 == 0:
            y = Tag.apply(y, f"t{i}", log)
    return y.sum(), [x]


def _broadcast_and_cast(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
    x = _leaf([[1.0, 2.0, 3.0]])  # (1, 3): the (2, 3) float32 gradient below is summed and cast
    w = _leaf([1.0, -1.0, 0.5], dtype=engine.float32)
    y = ReturnsInstead.apply(x, lambda g: (engine.ones(2, 3) * g).to(engine.float32))
    z = Tag.apply(y * w.to(engine.float64), "z", log)
    return z.sum(), [x, w]


def _two_leaves_several_uses(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
    x, y = _leaf([1.0, 2.0, 3.0]), _leaf([0.5, 0.25, -1.0])
    s = engine.stack([x * y, x + y, Tag.apply(x / (y + 3.0), "q", log)])
    return (s.tanh() * s).sum() + (x * x).sum(), [x, y]


def _tree(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
    # Each sum readies two nodes while others wait: the order is the queue's.
    x = _leaf([1.0, 2.0])
    level = [Tag.apply(x * float(i + 1), f"p{i}", log) for i in range(16)]
    depth = 0
    while len(level) > 1:
        depth += 1
        level = [
            Tag.apply(level[i] + level[i + 1], f"s{depth}.{i}", log)
            for i in range(0, len(level), 2)
        ]
    return (level[0] * level[0]).sum(), [x]


def _random_dag(seed: int) -> Build:
    """A random DAG of tagged nodes: fan-in, fan-out and ties between the leaves' nodes."""

    def build(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
        rng = random.Random(seed)
        leaves = [_leaf([rng.uniform(-1, 1), rng.uniform(-1, 1)]) for _ in range(rng.randint(1, 4))]
        made = list(leaves)
        for i in range(rng.randint(5, 40)):
            a, b = rng.choice(made), rng.choice(made)
            value = a * b if rng.random() < 0.3 else a + b * rng.uniform(0.5, 1.5)
            made.append(Tag.apply(value, f"n{i}", log))
        loss = made[-1]
        for extra in rng.sample(made, min(3, len(made))) + leaves:  # every leaf gets a grad
            loss = loss + extra.tanh()
        return loss.sum(), leaves

    return build


GRAPHS = {
    **{f"random{seed}": _random_dag(seed) for seed in range(30)},
    "diamond": _diamond,
    "wide": _wide,
    "chain": _chain,
    "broadcast_and_cast": _broadcast_and_cast,
    "two_leaves_several_uses": _two_leaves_several_uses,
    "tree": _tree,
}


def _run(build: Build, listen: bool) -> tuple[list[np.ndarray], list[str]]:
    log: list[str] = []
    loss, leaves = build(log)
    if listen:
        with events.listen(lambda event: None):
            loss.backward()
    else:
        loss.backward()
    grads = []
    for leaf in leaves:
        assert leaf.grad is not None
        grads.append(leaf.grad.numpy().copy())
    return grads, log


@pytest.fixture
def general_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the nodes that went through ``evaluate_function``."""
    calls: list[str] = []
    general = Engine.evaluate_function

    def counted(self: Engine, graph_task: Any, fn: Any, inputs: Any, queue: Any) -> Any:
        calls.append(fn.name())
        return general(self, graph_task, fn, inputs, queue)

    monkeypatch.setattr(Engine, "evaluate_function", counted)
    return calls


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_plain_and_general_paths_agree(name: str, general_calls: list[str]) -> None:
    plain_grads, plain_order = _run(GRAPHS[name], listen=False)
    # Only the leaves' AccumulateGrad (hooks live on the leaf) leave the plain path.
    assert set(general_calls) == {"AccumulateGrad"}
    general_calls.clear()
    general_grads, general_order = _run(GRAPHS[name], listen=True)
    assert "AccumulateGrad" in general_calls and len(set(general_calls)) > 1
    assert plain_order == general_order and plain_order
    for plain, general in zip(plain_grads, general_grads, strict=True):
        assert plain.dtype == general.dtype
        np.testing.assert_array_equal(plain, general)


def test_plain_path_gradients_match_finite_differences() -> None:
    def loss(values: np.ndarray) -> float:
        a = np.sin(values)
        b = values * values
        return float(((a * b + np.exp(a)) * b).sum())

    (grad,), _ = _run(_diamond, listen=False)
    x0 = np.array([0.5, -1.5, 2.0])
    eps = 1e-6
    expected = [
        (loss(x0 + eps * np.eye(3)[i]) - loss(x0 - eps * np.eye(3)[i])) / (2 * eps)
        for i in range(3)
    ]
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


BAD_GRADIENTS = {
    "shape": (
        RuntimeError,
        lambda g: engine.zeros(4),
        "Function ReturnsInsteadBackward returned an invalid gradient at index 0 - got [4] but "
        "expected shape compatible with [3]",
    ),
    "type": (
        RuntimeError,
        lambda g: [1.0, 2.0, 3.0],
        "expected Variable or None (got list)",  # a custom Function's, as PyTorch words it
    ),
}


@pytest.mark.parametrize("listen", [False, True], ids=["plain", "general"])
@pytest.mark.parametrize("kind", sorted(BAD_GRADIENTS))
def test_invalid_gradient_fails_the_same_way_and_the_engine_goes_on(
    kind: str, listen: bool
) -> None:
    exc_type, make, message = BAD_GRADIENTS[kind]
    x = _leaf([1.0, 2.0, 3.0])
    w = _leaf([2.0, 2.0, 2.0])
    # The bad node's first output would be routed before the check of its second fails.
    loss = (ReturnsInstead.apply(x, make) * w + x).sum()
    with pytest.raises(exc_type) as info:
        _run(lambda log: (loss, [x]), listen)
    assert str(info.value) == message
    assert x.grad is None
    grads, _ = _run(_diamond, listen=False)  # the engine is usable afterwards
    assert np.isfinite(grads[0]).all()


def test_a_node_with_two_outputs_fails_after_routing_its_first(general_calls: list[str]) -> None:
    class Split(engine.Function):
        @staticmethod
        def forward(ctx: Any, a: engine.Tensor, b: engine.Tensor) -> engine.Tensor:
            return a * b

        @staticmethod
        def backward(ctx: Any, grad: engine.Tensor) -> tuple[engine.Tensor, engine.Tensor]:
            return grad, engine.zeros(7)

    a, b = _leaf([1.0, 2.0]), _leaf([3.0, 4.0])
    loss = Split.apply(a.exp(), b.exp()).sum()
    with pytest.raises(RuntimeError, match="invalid gradient at index 1 - got \\[7\\]"):
        loss.backward()
    assert not general_calls  # it failed on the plain path
    assert a.grad is None and b.grad is None


def test_plain_path_hands_over_to_a_device_thread_and_back() -> None:
    def build(log: list[str]) -> tuple[engine.Tensor, list[engine.Tensor]]:
        x = _leaf([1.0, -2.0])
        on_sim = Tag.apply((x * 3.0).to("sim:0"), "sim", log).exp()
        back = Tag.apply(on_sim.to("cpu") * x, "cpu", log)
        return back.sum(), [x]

    (plain,), plain_order = _run(build, listen=False)
    (general,), general_order = _run(build, listen=True)
    np.testing.assert_array_equal(plain, general)
    assert plain_order == general_order == ["cpu", "sim"]
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(plain, np.exp(3 * x) * (3 * x + 1))


def test_fan_in_sums_stay_differentiable_with_create_graph() -> None:
    x = _leaf([0.5, -2.0])
    # x reaches its AccumulateGrad along three paths: the buffer adds their gradients.
    y = (x * x * 3.0 + x.sin() + x * 2.0).sum()
    y.backward(create_graph=True)  # no inputs=: the plain path, with grad mode on
    g = x.grad
    assert g is not None and g.requires_grad
    x.grad = None
    g.sum().backward()
    x0 = np.array([0.5, -2.0])
    np.testing.assert_allclose(g.detach().numpy(), 6 * x0 + np.cos(x0) + 2)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 6 - np.sin(x0))


def test_a_process_with_only_a_cpu_and_its_first_other_device() -> None:
    """Note [A process with only a CPU]: no gradient is looked at for its device until a
    device other than the CPU exists; from then on the plain path routes by device again.

    A fresh interpreter: this one has made ``sim`` devices long ago.
    """
    from tests.engine.test_package import python

    lines = python(
        """
        import threading
        import numpy as np
        import engine
        from engine import devices

        class Where(engine.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 1.0

            @staticmethod
            def backward(ctx, grad):
                print("ran on", threading.current_thread().name, grad.device)
                return grad

        print("at start", devices.only_cpu)
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        (Where.apply(x * 3.0) * 2.0).sum().backward()
        print("after a cpu backward", devices.only_cpu, x.grad.data.tolist())
        w = engine.tensor([1.0, 2.0], requires_grad=True)
        s = w.to("sim:1")
        print("after a sim tensor", devices.only_cpu)
        (Where.apply(s * 3.0).to("cpu") * 2.0).sum().backward()
        print("grad", w.grad.device, w.grad.data.tolist())
        """
    )
    main = "MainThread"
    assert lines == [
        "at start True",
        f"ran on {main} cpu",
        "after a cpu backward True [6.0, 6.0]",
        "after a sim tensor False",
        "ran on autograd-sim:1 sim:1",
        "grad cpu [6.0, 6.0]",
    ]
