"""Running a user's script as ``python`` runs it.

:mod:`~autograd_viz.launch.script` runs the script as ``__main__`` with its
own ``argv``, and its errors as Python would print them;
:mod:`~autograd_viz.launch.processes` arms the processes it starts through
the environment, names their rank files and says what they became;
:mod:`~autograd_viz.launch.uncaught` trims the traceback of an error a
watched child never catches, and :mod:`~autograd_viz.launch.child_signals`
has a watched child stopped by SIGTERM or SIGHUP save first, then end by it.
What each command watches in a child is :mod:`autograd_viz.cli.children`'s:
it stands above the rooms it watches with.
"""
