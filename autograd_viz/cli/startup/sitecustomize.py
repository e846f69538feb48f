"""Start-up of a child process of a watched script (Note [Children armed by the environment]).

Python imports this module at start-up because a watching command put its
directory first on ``PYTHONPATH``. It takes that directory off ``sys.path``
again, starts watching as the command asked (``AUTOGRAD_VIZ_CHILDREN``), and
then imports the ``sitecustomize`` it hid, if there is one. Nothing here may
stop the child: a failure is one line on stderr and the child runs unwatched.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys


def _start() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        _watch()
    finally:
        _run_hidden()


def _run_hidden() -> None:
    """Run the ``sitecustomize`` this module stood in front of, if there is one.

    It becomes ``sys.modules["sitecustomize"]``, as without us: the program sees its own,
    and what it made lives as long as the process (a ``torch.library.Library`` it
    defines ops with takes them away again when it is freed).
    """
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["sitecustomize"]  # as a failed import leaves it
        raise


def _watch() -> None:
    try:
        try:
            from autograd_viz.cli.children import start_child
        except ImportError:
            root = json.loads(os.environ.get("AUTOGRAD_VIZ_CHILDREN", "{}")).get("root")
            if not isinstance(root, str):
                raise
            sys.path.append(root)
            from autograd_viz.cli.children import start_child
        start_child()
    except Exception as exc:  # noqa: BLE001 - the child runs unwatched, and says so
        print(f"autograd-viz: process {os.getpid()} is not watched: {exc!r}", file=sys.stderr)


_start()
