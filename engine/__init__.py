"""A reverse-mode autograd engine on NumPy, built like PyTorch's.

Read it like ``torch.autograd``::

    import engine
    x = engine.tensor([0.5, 0.75], requires_grad=True)
    y = engine.tensor([0.1, 0.90], requires_grad=True)
    z = engine.exp(x * y).sum()
    engine.backward([z], inputs=[x])
    x.grad  # tensor([0.1051, 1.7676])

Note [The engine package loads on first use]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Importing ``engine`` costs nothing: its public names (PEP 562's module
``__getattr__``) load the whole engine, NumPy and the ops on Tensor
included, the first time one of them is read (``engine.tensor(...)``,
``from engine import Tensor``, ``engine.__all__``, ``dir(engine)``). A
process that only listens to events (a watched PyTorch program, whose
children are watched from their first line) imports ``engine.events`` and
the scheduler without the rest, which is most of what starting up to watch
used to cost. The names below :data:`TYPE_CHECKING` are what type checkers
see; ``_FROM`` says where each one is loaded from, and a test keeps the two
alike. ``engine.tensor`` is the factory, as ``torch.tensor`` is: the import
system sets a package's attribute to each submodule it loads, and would set
it to the module ``engine/tensor.py`` whenever that loads, so :class:`_Package`
keeps submodules from hiding a public name.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from engine.scopes import scope
    from engine.tensor import Size, Tensor

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
"""The public names; loading the engine adds the ops (exp, cat, matmul, ...), as
``torch.__all__`` lists its ops, and reading ``engine.__all__`` loads it."""

_SUBMODULES = ("dtypes", "events", "functional", "scopes")
"""Public submodules: ``engine.events`` loads only itself (Note [The engine package ...])."""

_FROM: dict[str, tuple[str, str]] = {
    "AccumulateGrad": ("engine.graph", "AccumulateGrad"),
    "Device": ("engine.devices", "Device"),
    "Edge": ("engine.graph", "Edge"),
    "Function": ("engine.function", "Function"),
    "FunctionCtx": ("engine.function", "FunctionCtx"),
    "GradcheckError": ("engine.gradcheck", "GradcheckError"),
    "GraphRoot": ("engine.graph", "GraphRoot"),
    "Node": ("engine.graph", "Node"),
    "Size": ("engine.tensor", "Size"),
    "Tensor": ("engine.tensor", "Tensor"),
    "backward": ("engine.autograd", "backward"),
    "bool": ("engine.dtypes", "bool_"),
    "cuda_is_available": ("engine.devices", "cuda_is_available"),
    "detect_anomaly": ("engine.anomaly", "detect_anomaly"),
    "device": ("engine.devices", "Device"),
    "dtype": ("engine.dtypes", "dtype"),
    "enable_grad": ("engine.grad_mode", "enable_grad"),
    "float": ("engine.factories", "float"),
    "get_default_engine": ("engine.engine", "get_default_engine"),
    "grad": ("engine.autograd", "grad"),
    "gradcheck": ("engine.gradcheck", "gradcheck"),
    "gradgradcheck": ("engine.gradcheck", "gradgradcheck"),
    "inference_mode": ("engine.grad_mode", "inference_mode"),
    "int": ("engine.dtypes", "int32"),
    "is_anomaly_enabled": ("engine.anomaly", "is_anomaly_enabled"),
    "is_grad_enabled": ("engine.grad_mode", "is_grad_enabled"),
    "is_inference_mode_enabled": ("engine.grad_mode", "is_inference_mode_enabled"),
    "no_grad": ("engine.grad_mode", "no_grad"),
    "once_differentiable": ("engine.function", "once_differentiable"),
    "scope": ("engine.scopes", "scope"),
    "set_detect_anomaly": ("engine.anomaly", "set_detect_anomaly"),
    "set_grad_enabled": ("engine.grad_mode", "set_grad_enabled"),
    "set_sim_device_count": ("engine.devices", "set_sim_device_count"),
    "short": ("engine.dtypes", "int16"),
    **{
        name: ("engine.factories", name)
        for name in (
            "arange",
            "bool_",
            "complex64",
            "complex128",
            "double",
            "empty",
            "eye",
            "float16",
            "float32",
            "float64",
            "full",
            "get_default_dtype",
            "half",
            "int8",
            "int16",
            "int32",
            "int64",
            "linspace",
            "long",
            "manual_seed",
            "ones",
            "ones_like",
            "rand",
            "randint",
            "randn",
            "set_default_dtype",
            "tensor",
            "uint8",
            "zeros",
            "zeros_like",
        )
    },
}
"""Each public name but the submodules and the ops: the module it is in, and its name there."""

_loaded = False
"""Whether the whole engine is loaded: every name of ``_FROM`` set, the ops installed."""

_SETTING = threading.Lock()
"""Held while the loaded names are set, so that two threads loading at once list each op once."""

_loading = threading.local()
"""Set while this thread loads the engine, so that the engine's own modules, reading
``engine``'s names as they load, get each name alone instead of a second loading."""


def _load() -> None:
    """Load the whole engine once: the names of ``_FROM``, then the ops (functions and methods)."""
    global _loaded
    if _loaded or getattr(_loading, "active", False):
        return
    # No lock: loading is idempotent (the import system locks each module), and a lock here
    # could wait on a thread that holds a module's import lock while it waits on this one.
    _loading.active = True
    try:
        from engine.ops import install

        names = {name: getattr(importlib.import_module(m), a) for name, (m, a) in _FROM.items()}
        ops = install()
        with _SETTING:
            if not _loaded:
                globals().update(names)
                globals().update(ops)
                __all__.extend(sorted(set(ops) - set(__all__)))
                _loaded = True
    finally:
        _loading.active = False


def _public_name(name: str) -> Any:
    """The package's ``__getattr__`` (PEP 562): a public name, loading the engine the first time
    one is read (Note [The engine package loads on first use]).

    Raises:
        AttributeError: ``name`` is neither a public name, an op nor a submodule.
    """
    if name in _FROM:
        module, attribute = _FROM[name]
        value = getattr(importlib.import_module(module), attribute)
        _load()
        return value
    if not name.startswith("_"):
        if name in _SUBMODULES or importlib.machinery.PathFinder.find_spec(name, __path__):
            return importlib.import_module(f"{__name__}.{name}")
        _load()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if not TYPE_CHECKING:
    # Out of type checkers' sight: a module's __getattr__ makes them take every name, a
    # misspelt one too, for Any; they read the names imported above instead.
    __getattr__ = _public_name


def __dir__() -> list[str]:
    """Every name of the package, the ops included (which loads the engine)."""
    _load()
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The ``engine`` package: its ``__all__`` lists the ops too, and a submodule, once loaded,
    never hides a public name (``engine/tensor.py`` and ``engine.tensor``; Note [The engine
    package loads on first use])."""

    @property
    def __all__(self) -> list[str]:
        _load()
        return __all__

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FROM and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
