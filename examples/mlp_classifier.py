"""Train a small MLP classifier with the engine, PyTorch-style.

Its parts are named with ``engine.scope`` (as a PyTorch model's modules name
themselves), so its traces and drawings show them as boxes:
``autograd-viz dot examples/mlp_classifier.py -o mlp.svg``.

Run: python examples/mlp_classifier.py
"""

from __future__ import annotations

import engine
import engine.functional as F


def main() -> None:
    engine.manual_seed(0)
    # Two interleaved half-moons would need sklearn; three Gaussian blobs will do.
    centers = engine.tensor([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    labels = engine.arange(3).reshape(3, 1).expand(3, 100).reshape(-1)
    points = centers[labels] + engine.randn(300, 2) * 0.6

    w1 = (engine.randn(16, 2) * 0.5).requires_grad_()
    b1 = engine.zeros(16, requires_grad=True)
    w2 = (engine.randn(3, 16) * 0.5).requires_grad_()
    b2 = engine.zeros(3, requires_grad=True)
    params = [w1, b1, w2, b2]
    # Named as PyTorch names a model's parameters: the module's path, then the attribute.
    w1.name, b1.name = "mlp.hidden.weight", "mlp.hidden.bias"
    w2.name, b2.name = "mlp.out.weight", "mlp.out.bias"

    for step in range(101):
        with engine.scope("mlp", kind="MLP"):
            with engine.scope("hidden", kind="Linear"):
                hidden = F.linear(points, w1, b1)
            with engine.scope("relu", kind="ReLU"):
                hidden = F.relu(hidden)
            with engine.scope("out", kind="Linear"):
                logits = F.linear(hidden, w2, b2)
        with engine.scope("loss", kind="CrossEntropyLoss"):
            loss = F.cross_entropy(logits, labels)
        for p in params:
            p.grad = None
        loss.backward()
        with engine.no_grad():
            for p in params:
                p.sub_(0.5 * p.grad)
        if step % 20 == 0:
            accuracy = (logits.argmax(dim=1) == labels).float().mean()
            print(f"step {step:3d}  loss {loss.item():.4f}  accuracy {accuracy.item():.2f}")


if __name__ == "__main__":
    main()
