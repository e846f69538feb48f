"""``d``: the step on screen drawn with Graphviz and written to a file, in a thread."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import one_line
from autograd_viz.tui.prompt import PromptBar

if TYPE_CHECKING:
    from autograd_viz.tui.host import Host


class Exporter:
    """Asks where to write the step shown, and writes it in a thread; a notice says how it went.

    Args:
        owner: the app whose step and graph task are written.
    """

    def __init__(self, owner: Host) -> None:
        self.owner = owner

    def ask(self) -> None:
        """Open the prompt, offering a file name made from the step."""
        default = f"autograd-viz-step-{self.owner.driver.position}.svg"
        self.owner.query_one(PromptBar).ask(
            "Export this step as .svg, .png, .pdf or .dot", self.export, value=default
        )

    def export(self, path: str | None) -> None:
        """Write the step shown to ``path`` (nothing when ``None``: the prompt was cancelled).

        ``path`` is taken as typed, a space in a file's name included; only when it cannot
        be written (no format's suffix, no such folder) and it can without the spaces around
        it are those dropped, as a stray space after ``.svg`` is.
        """
        if not path:
            return
        app = self.owner
        state = app.driver.state()
        task = app.shown_task(state)
        write = functools.partial(self._write, path, state, None if task is None else task.id)
        app.run_worker(write, thread=True, group="export", exit_on_error=False)

    def _write(self, path: str, state: ExecutionState, graph_task: int | None) -> None:
        from autograd_viz.tui.search import export_step

        app = self.owner
        try:
            written = export_step(state, graph_task, path_as_typed(path), app.path)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
            app.call_from_thread(
                app.notify, one_line(exc), title="Export failed", severity="error", markup=False
            )
            return
        app.call_from_thread(app.notify, one_line(written), title="Exported", markup=False)


def path_as_typed(typed: str) -> str:
    """``typed``, unless it cannot be written (its suffix is no format, its folder is missing)
    and the same without the spaces around it can; a leading ``~`` or ``~user`` is the home
    folder, as a shell reads it (``./~/x.svg`` is a folder named ``~``)."""
    from autograd_viz.draw.render import dot

    def home(path: str) -> str:
        return os.path.expanduser(path) if path.startswith("~") else path

    def writable(path: str) -> bool:
        try:
            dot.output_format(path)
        except ValueError:
            return False
        return os.path.isdir(os.path.dirname(home(path)) or ".")

    bare = typed.strip()
    return home(bare if bare != typed and not writable(typed) and writable(bare) else typed)


__all__ = ["Exporter", "path_as_typed"]
