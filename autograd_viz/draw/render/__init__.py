"""How a picture is drawn: DOT through Graphviz, SVG, frames, the HTML animation page, words.

Each renderer takes what :mod:`autograd_viz.draw.model` chose and draws it;
every name in it is data, escaped on its way out (:mod:`.escape`).
"""
