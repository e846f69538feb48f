"""Pictures that show themselves in a notebook: ``autograd_viz.animate(trace)``.

Jupyter shows an object through its ``_repr_html_``. The animation page is a
whole HTML document with its own script and styles, so it goes into an
``<iframe srcdoc=...>``: its script runs and its styles stay inside, in
JupyterLab, the classic notebook and VS Code alike, and the notebook file
keeps the page, so it plays again when reopened.
"""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autograd_viz.draw.render.animate import AnimationResult
    from autograd_viz.trace import Trace

__all__ = ["Animation", "animate"]

FRAME_HEIGHT_PX = 640
"""How tall the notebook's frame around the page is (the page scrolls inside it)."""


@dataclass(frozen=True, slots=True)
class Animation:
    """An animation page, written to :attr:`path`, that a notebook shows inline."""

    page: str
    """The whole HTML page."""
    result: AnimationResult
    """Where it was written, its frames and the steps they show."""

    @property
    def path(self) -> Path:
        return self.result.path

    @property
    def frames(self) -> int:
        return self.result.frames

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.page, quote=True)}" '
            f'style="width:100%;height:{FRAME_HEIGHT_PX}px;border:1px solid #ddd;resize:vertical" '
            'sandbox="allow-scripts"></iframe>'
        )

    def __repr__(self) -> str:
        return f"<Animation: {self.frames:,} frames, {self.path}>"


def animate(
    trace: Trace, output: str | os.PathLike[str] | None = None, **options: Any
) -> Animation:
    """Animate ``trace``'s backward pass, one frame per step; a notebook shows it inline.

    Example:
        >>> with autograd_viz.record() as trace:
        ...     loss.backward()
        >>> autograd_viz.animate(trace, values=True)   # the last line of a cell: it plays there

    Args:
        trace: a recorded or loaded trace with at least one backward call.
        output: an ``.html`` file to keep the page in; a temporary file if ``None``.
        **options: what :func:`autograd_viz.draw.render.animate.animate` takes (``first``,
            ``last``, ``max_frames``, ``frame_ms``, ``title``) and what ``to_dot``
            takes (``values=True``, ``around=``, ``expand=``, ...).

    Returns:
        The page, which displays itself in a notebook, and where it was written.

    Raises:
        ValueError: ``output`` is not an HTML file, or what the page animate raises.
    """
    from autograd_viz.draw.render import animate as pages

    if output is None:
        folder = tempfile.mkdtemp(prefix="autograd-viz-")
        output = Path(folder) / "animation.html"
        options.setdefault("title", "backward pass")
    elif pages.output_format(output) != "html":
        raise ValueError(f"a notebook animation is an HTML page; {output} is not an .html file")
    result = pages.animate(trace, output, **options)
    return Animation(Path(result.path).read_text(encoding="utf-8"), result)
