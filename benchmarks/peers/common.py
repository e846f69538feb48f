"""What several peers share: the fan-in constants, the add tree, the MLP's data.

Usage: imported by the peer modules.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

STEP = 1.0001
"""The chain's factor: ``y = y * STEP + 0.0``."""

T = TypeVar("T")


def fan_constants(n: int) -> list[float]:
    """The ``n`` constants ``c_i`` of the fan-in; their sum is the expected gradient."""
    return [1.0 + i / n for i in range(n)]


def tree_sum(parts: list[T], add: Callable[[T, T], T]) -> T:
    """Sum ``parts`` pairwise, level by level: a balanced binary tree of ``len - 1`` adds."""
    while len(parts) > 1:
        paired = [add(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            paired.append(parts[-1])
        parts = paired
    return parts[0]


@dataclass(frozen=True)
class MlpData:
    """A batch, its labels and an MLP's parameters, as NumPy arrays.

    Layers are ``x @ W + b`` with ``tanh`` between them and cross entropy
    (log-softmax, then the mean negative log likelihood) on the last.
    """

    inputs: np.ndarray
    """``(batch, widths[0])``."""
    targets: np.ndarray
    """``(batch,)`` class indices, int64."""
    weights: tuple[np.ndarray, ...]
    """``(widths[i], widths[i + 1])`` each."""
    biases: tuple[np.ndarray, ...]
    """``(widths[i + 1],)`` each."""

    @classmethod
    def random(cls, batch: int, widths: tuple[int, ...], dtype: Any, seed: int = 0) -> MlpData:
        rng = np.random.default_rng(seed)
        weights = tuple(
            (rng.standard_normal((m, k)) / np.sqrt(m)).astype(dtype)
            for m, k in itertools.pairwise(widths)
        )
        return cls(
            inputs=rng.standard_normal((batch, widths[0])).astype(dtype),
            targets=rng.integers(0, widths[-1], batch),
            weights=weights,
            biases=tuple(np.full(w.shape[1], 0.01, dtype=dtype) for w in weights),
        )
