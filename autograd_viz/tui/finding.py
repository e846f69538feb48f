"""``/``: find a module, a parameter or a node, and select it everywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autograd_viz.trace.text import one_line
from autograd_viz.tui.closing import while_open
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.pictures import Pictures
from autograd_viz.tui.prompt import PromptBar
from autograd_viz.tui.styled import quoted_if_padded

if TYPE_CHECKING:
    from autograd_viz.tui.host import Host

TITLE = "Find a module, a parameter or a node (its id, or any part of its name)"
"""The prompt's question."""


class Finder:
    """Asks what to find and selects it: by the exact name any view shows (a module path,
    a fold, a parameter, ``Name #id``), else the next node whose id or name holds the text.

    The text is looked for as typed first: a name is data, and ``nn.ModuleDict`` takes
    ``" "`` or ``" a"`` as a module's name. Only when that finds nothing is it looked for
    again without the spaces around it, so a stray space still finds an ordinary name.

    Args:
        owner: the app whose node list, drawing and status the finds move.
    """

    def __init__(self, owner: Host) -> None:
        self.owner = owner
        self.query: str | None = None
        """The last thing looked for, offered again by the next ``/``."""

    def ask(self) -> None:
        """Open the prompt; a big task's names are read in a thread while one types."""
        app = self.owner
        app.query_one(PromptBar).ask(
            TITLE,
            self.find,
            value=self.query or "",
            placeholder="layer4.1.conv2, fc.weight, MulBackward0 #12, 12, W_h",
        )
        task = app.shown_task(app.driver.state())
        if task is not None:  # once the prompt is painted
            app.call_after_refresh(app.query_one(DagView).prepare, app.driver.trace, task)

    @while_open
    def find(self, query: str | None) -> None:
        """Select what ``query`` names (in a big task, once a thread has read its names)."""
        if not query:
            return
        app = self.owner
        self.query = query
        task = app.shown_task(app.driver.state())
        if task is None:
            self.find_node(query)
            return
        waited = False

        def then(pictures: Pictures) -> None:
            if waited:
                app.say("")
            if not self.find_by_name(query, pictures):
                self.find_node(query)

        if not app.query_one(DagView).with_pictures(app.driver.trace, task, then):
            waited = True
            names = f"{len(task.nodes):,} nodes' names"
            app.say(f"finding {quoted_if_padded(query)}: reading {names}…")
            app.refresh_status()

    @while_open
    def find_node(self, query: str) -> None:
        """Select the next node whose id or name ``query`` is part of, in any graph task
        (``query`` as given, else without the spaces around it)."""
        from autograd_viz.tui.search import find_next

        app = self.owner
        state = app.driver.state()
        nodes = app.query_one(NodeList)
        found = find_next(app.driver.trace, app.shown_task(state), nodes, query)
        bare = query.strip()
        if found is None and bare and bare != query:  # spaces alone would match every name
            found = find_next(app.driver.trace, app.shown_task(state), nodes, bare)
        if found is None:
            app.refresh_status()
            # Quoted, not repr: repr would double every backslash of what was typed.
            said = f"No node matches '{one_line(query)}'."
            app.notify(said, severity="warning", markup=False)
            return
        task_id, node_id = found
        shown = app.shown_task(state)
        if shown is None or shown.id != task_id:
            app.pin(task_id)
            app.refresh_view()
        app.query_one(NodeList).select(node_id)

    @while_open
    def find_by_name(self, query: str, pictures: Pictures) -> bool:
        """Select what ``query`` names exactly, as every view names it: a module path (its
        box opened in the drawing), a fold, a parameter, ``Name #id``; ``False`` if nothing."""
        from autograd_viz.draw.model.graph_view import GraphViewError

        app = self.owner
        dag = app.query_one(DagView)
        if app.shown_task(app.driver.state()) is not pictures.task:
            return False  # another task is shown now
        try:
            target = pictures.resolve(query)  # as given, else stripped (Names.resolve)
        except GraphViewError:
            return False
        ids = [pictures.view.nodes[key].info.id for key in target.nodes]
        if not ids:
            return False
        tree = pictures.tree
        for scope in target.scopes:  # a module found is drawn whole, as --around draws it
            inside = tree.descendants(scope)
            dag.opened.update(inside)
            dag.closed.difference_update(inside)
            dag.unfolded.update(tree.group_of[i] for i in inside if i in tree.group_of)
        if target.group is not None:
            dag.unfolded.add(target.group)
        if not target.scopes:  # a node or a parameter: open the modules around it
            around = tree.scope_of.get(target.nodes[0])
            for index in tree.ancestors(around) if around is not None else ():
                dag.opened.add(index)
                dag.closed.discard(index)
                if index in tree.group_of:
                    dag.unfolded.add(tree.group_of[index])
        count = "1 node" if len(ids) == 1 else f"{len(ids):,} nodes"
        app.say(f"{target.kind} {quoted_if_padded(target.text)}: {count}")
        app.query_one(NodeList).select(ids[0])
        app.refresh_view()
        return True


__all__ = ["TITLE", "Finder"]
