"""A reverse-mode autograd engine on NumPy, built like PyTorch's.

Read it like ``torch.autograd``::

    import engine
    x = engine.tensor([0.5, 0.75], requires_grad=True)
    y = engine.tensor([0.1, 0.90], requires_grad=True)
    z = engine.exp(x * y).sum()
    engine.backward([z], inputs=[x])
    x.grad  # tensor([0.1051, 1.7676])
"""

from __future__ import annotations

from engine import dtypes, events, functional, scopes
from engine.anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from engine.autograd import backward, grad
from engine.devices import Device, cuda_is_available, set_sim_device_count
from engine.devices import Device as device  # noqa: N813 - torch.device
from engine.dtypes import bool_ as bool  # noqa: A004 - torch.bool
from engine.dtypes import dtype
from engine.dtypes import int16 as short
from engine.dtypes import int32 as int  # noqa: A004 - torch.int
from engine.engine import get_default_engine
from engine.factories import (
    arange,
    bool_,
    complex64,
    complex128,
    double,
    empty,
    eye,
    float16,
    float32,
    float64,
    full,
    get_default_dtype,
    half,
    int8,
    int16,
    int32,
    int64,
    linspace,
    long,
    manual_seed,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    set_default_dtype,
    tensor,
    uint8,
    zeros,
    zeros_like,
)
from engine.factories import float as float  # noqa: A004 - torch.float
from engine.function import Function, FunctionCtx, once_differentiable
from engine.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from engine.gradcheck import GradcheckError, gradcheck, gradgradcheck
from engine.graph import AccumulateGrad, Edge, GraphRoot, Node
from engine.ops import install as _install_ops
from engine.scopes import scope
from engine.tensor import Size, Tensor

_OPS = _install_ops()
globals().update(_OPS)

__version__ = "0.1.0"


__all__ = [
    "AccumulateGrad",
    "Device",
    "Edge",
    "Function",
    "FunctionCtx",
    "GradcheckError",
    "GraphRoot",
    "Node",
    "Size",
    "Tensor",
    "arange",
    "backward",
    "bool",
    "bool_",
    "complex64",
    "complex128",
    "cuda_is_available",
    "detect_anomaly",
    "device",
    "double",
    "dtype",
    "dtypes",
    "empty",
    "enable_grad",
    "events",
    "eye",
    "float",
    "float16",
    "float32",
    "float64",
    "full",
    "functional",
    "get_default_dtype",
    "get_default_engine",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "half",
    "inference_mode",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_anomaly_enabled",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "linspace",
    "long",
    "manual_seed",
    "no_grad",
    "once_differentiable",
    "ones",
    "ones_like",
    "rand",
    "randint",
    "randn",
    "scope",
    "scopes",
    "set_default_dtype",
    "set_detect_anomaly",
    "set_grad_enabled",
    "set_sim_device_count",
    "short",
    "tensor",
    "uint8",
    "zeros",
    "zeros_like",
]
__all__.extend(sorted(_OPS))  # the ops: exp, cat, matmul, ... (torch.__all__ lists its ops)
