"""The fake CuPy is as strict as CuPy where the engine could go wrong."""

from __future__ import annotations

import re
import threading
from typing import Any

import numpy as np
import pytest

from tests.gpu import fakecupy as cp


@pytest.fixture(autouse=True)
def _fresh() -> None:
    cp.reset()


def test_a_device_array_refuses_implicit_conversion_to_numpy() -> None:
    a = cp.asarray([1.0, 2.0])
    for convert in (np.asarray, np.array, lambda x: np.asarray([x, x])):
        with pytest.raises(TypeError, match=re.escape(cp.IMPLICIT_CONVERSION)):
            convert(a)
    assert isinstance(a.get(), np.ndarray) and cp.asnumpy(a).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("host", [np.ones(2), np.array(1.0)], ids=["array", "0-dim"])
def test_numpy_arrays_are_not_operands(host: np.ndarray) -> None:
    a = cp.asarray([1.0, 2.0])
    message = re.escape("Unsupported type <class 'numpy.ndarray'>")
    for op in (lambda: a + host, lambda: host * a, lambda: cp.maximum(a, host)):
        with pytest.raises(TypeError, match=message):
            op()
    with pytest.raises(TypeError, match=message):
        a[...] = host
    with pytest.raises(TypeError, match="Unsupported type"):
        a[np.array([0])]


def test_scalars_are_operands_and_reductions_give_zero_dim_arrays() -> None:
    a = cp.asarray([1.0, 2.0, 4.0])
    assert (a + np.float64(1.0)).tolist() == [2.0, 3.0, 5.0]
    assert (2 * a).tolist() == [2.0, 4.0, 8.0]
    total = a.sum()
    assert isinstance(total, cp.ndarray) and total.shape == () and float(total) == 7.0
    element = a[1]
    assert isinstance(element, cp.ndarray) and element.shape == ()
    element[...] = 9.0
    assert a.tolist() == [1.0, 9.0, 4.0], "an integer index gives a view, as in CuPy"
    assert isinstance(a[cp.asarray([0, 0])], cp.ndarray) and a[[2]].tolist() == [4.0]


def test_numpy_functions_dispatch_to_the_fake() -> None:
    a = cp.asarray([[1.0, -2.0], [3.0, 4.0]])
    assert isinstance(np.exp(a), cp.ndarray)
    assert np.may_share_memory(a, a.T) and not np.may_share_memory(a, a.copy())
    b = cp.zeros(3)
    np.add.at(b, cp.asarray([0, 0, 2]), 1.0)
    assert b.tolist() == [2.0, 0.0, 1.0]
    with pytest.raises(TypeError):
        np.linalg.inv(a)  # nothing of that name here: NumPy refuses, as it does with CuPy


def test_each_thread_has_a_current_device() -> None:
    cp.reset(device_count=2)
    assert cp.zeros(1).device.id == 0
    with cp.cuda.Device(1):
        on_one = cp.ones(2)
        assert on_one.device.id == 1 and cp.asarray(np.ones(1)).device.id == 1
    seen: list[int] = []
    thread = threading.Thread(
        target=lambda: (cp.cuda.Device(1).use(), seen.append(cp.zeros(1).device.id))
    )
    thread.start()
    thread.join()
    assert seen == [1] and cp.current_device_id() == 0
    with pytest.raises(
        ValueError, match=re.escape("resides (1) is different from the current device (0)")
    ):
        on_one + 1
    with pytest.raises(cp.CUDARuntimeError, match="invalid device ordinal"):
        cp.cuda.Device(2).use()


def test_synchronizations_are_counted() -> None:
    cp.cuda.get_current_stream().synchronize()
    cp.cuda.Device(0).synchronize()
    assert cp.sync_calls == {0: 2} and cp.sync_threads == [threading.current_thread().name] * 2


def test_no_gpu_is_cupys_runtime_error() -> None:
    cp.reset(device_count=0)
    with pytest.raises(cp.CUDARuntimeError, match="no CUDA-capable device is detected"):
        cp.cuda.runtime.getDeviceCount()


def test_dtypes_and_casts_follow_numpy() -> None:
    a: Any = cp.asarray(np.arange(3))
    assert a.dtype == cp.int64 and a.astype(cp.float32).dtype == np.float32
    assert a.astype(np.int64, copy=False) is a
    assert cp.can_cast(np.float32, np.float64) and cp.result_type(a, 1.0) == np.float64
    with pytest.raises(TypeError):
        a += 0.5  # same_kind casting, as CuPy's in-place ops
