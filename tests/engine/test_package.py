"""The ``engine`` package loads on first use (Note [The engine package loads on first use]).

Each check runs in a fresh interpreter: this one has long since loaded the engine.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import engine
from engine.ops import install

REPO = Path(__file__).resolve().parents[2]


def python(code: str) -> list[str]:
    """The lines ``code`` prints in a fresh interpreter that imports this checkout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_importing_engine_or_its_events_loads_neither_numpy_nor_the_ops() -> None:
    lines = python(
        """
        import sys
        import engine
        from engine import events, scopes
        from engine.events import HUB
        import engine.scheduler
        print("numpy" in sys.modules, sorted(m for m in sys.modules if m.startswith("engine.o")))
        print(type(engine.events.HUB).__name__, engine.scopes.__name__)
        """
    )
    assert lines == ["False []", "_Hub engine.scopes"]


def test_the_first_public_name_loads_the_whole_engine() -> None:
    lines = python(
        """
        import sys
        import engine
        x = engine.tensor([0.5, 0.75], requires_grad=True)
        y = engine.tensor([0.1, 0.90], requires_grad=True)
        z = engine.exp(x * y).sum()
        engine.backward([z], inputs=[x])
        print("numpy" in sys.modules, [round(float(g), 4) for g in x.grad.numpy()])
        print(x.exp is not None, callable(engine.matmul), engine.float32, engine.bool)
        """
    )
    assert lines == ["True [0.1051, 1.7676]", "True True float32 bool"]


def test_from_engine_import_names_and_star() -> None:
    lines = python(
        """
        from engine import Tensor, tensor, no_grad, functional, exp
        print(type(tensor([1.0])) is Tensor, functional.__name__, exp.__name__)
        namespace = {}
        exec("from engine import *", namespace)
        import engine
        print(sorted(set(engine.__all__) - set(namespace)), "exp" in namespace)
        """
    )
    assert lines == ["True engine.functional exp", "[] True"]


def test_engine_tensor_stays_the_factory_whatever_is_imported_first() -> None:
    """The import system sets ``engine.tensor`` to the submodule ``engine/tensor.py`` when it
    loads; the public name is the factory, as ``torch.tensor`` is."""
    lines = python(
        """
        from engine.tensor import Tensor
        import engine.graph_task
        import engine
        print(callable(engine.tensor), type(engine.tensor([2.0])) is Tensor)
        import engine.tensor as tensor_module
        print(tensor_module is engine.tensor)
        """
    )
    assert lines == ["True True", "True"]


def test_all_and_dir_list_the_ops_and_misspelt_names_raise() -> None:
    lines = python(
        """
        import engine
        names = engine.__all__
        print("exp" in names, "matmul" in names, "tensor" in names, len(names) == len(set(names)))
        print(set(names) <= set(dir(engine)))
        try:
            engine.tensr
        except AttributeError as exc:
            print(exc)
        import engine.anomaly
        print(engine.anomaly.__name__, engine.devices.__name__)
        """
    )
    assert lines == [
        "True True True True",
        "True",
        "module 'engine' has no attribute 'tensr'",
        "engine.anomaly engine.devices",
    ]


def test_threads_loading_at_once_see_the_same_engine() -> None:
    lines = python(
        """
        import threading
        import engine
        got = []
        def use():
            got.append(float(engine.exp(engine.tensor([0.0])).sum().item()))
        threads = [threading.Thread(target=use) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(got == [1.0] * 8, len(engine.__all__) == len(set(engine.__all__)))
        """
    )
    assert lines == ["True True"]


def test_the_names_type_checkers_see_are_the_names_loaded() -> None:
    """The ``if TYPE_CHECKING:`` imports and the loader's table say the same thing."""
    tree = ast.parse(Path(engine.__file__).read_text())
    checked: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    name = alias.asname or alias.name
                    if statement.module == "engine":
                        checked[name] = (f"engine.{alias.name}", "")
                    else:
                        checked[name] = (str(statement.module), alias.name)
    submodules = {name for name, (_, attribute) in checked.items() if not attribute}
    assert submodules == set(engine._SUBMODULES)
    assert {k: v for k, v in checked.items() if k not in submodules} == engine._FROM
    assert set(engine.__all__) == set(checked) | set(install())
