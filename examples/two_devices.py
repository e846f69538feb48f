"""Watch a backward pass hop between engine threads.

Two branches of the graph live on simulated accelerators (``sim:0`` and
``sim:1``); each device has its own engine worker thread and ready queue, as
a GPU would in PyTorch. The printed events show which thread ran which node.

Run: python examples/two_devices.py
"""

from __future__ import annotations

import engine


def main() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True, name="x")
    left = (x.to("sim:0") * 2.0).exp().to("cpu")
    right = (x.to("sim:1") ** 2).to("cpu")
    loss = (left + right).sum()

    def show(event: engine.events.Event) -> None:
        if event.kind in ("node_start", "enqueue"):
            where = event.data.get("queue", "") if event.kind == "enqueue" else ""
            print(f"{event.thread:>16}  {event.kind:<10} {event.node_name:<16} {where}")

    with engine.events.listen(show):
        loss.backward()
    print("x.grad =", x.grad)


if __name__ == "__main__":
    main()
