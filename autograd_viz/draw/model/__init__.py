"""What a picture shows: the graph at a step, the module tree and its folds, what is open.

Every view (``dot``, ``animate``, the TUI's drawn DAG, the timeline's module
rows) reads this one model; none folds or chooses on its own. It imports trace
types only, and nothing of :mod:`autograd_viz.draw.render`.
"""
