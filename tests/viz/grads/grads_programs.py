"""Small PyTorch programs, one per reason a parameter gets no gradient, and one with all.

Each program is a script: it trains a model for a few steps and saves every
parameter's ``.grad`` to the file named by its first argument (``-`` for none),
so a test can run it with and without the watch and compare the gradients bit
for bit. A line that explains a finding ends in a ``# <- NAME`` marker that
tests look up with :func:`marked_line`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HEADER = """
import sys
import torch
from torch import nn

torch.manual_seed(0)


def save(model):
    if sys.argv[1:2] and sys.argv[1] != "-":
        torch.save({n: p.grad for n, p in model.named_parameters()}, sys.argv[1])


def train(model, steps=2, backward=None):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(steps):
        x = torch.randn(6, 4)
        opt.zero_grad()
        out = model(x)
        loss = out.pow(2).mean()
        if backward is None:
            loss.backward()
        else:
            backward(loss)
        opt.step()
    save(model)
"""


def program(body: str) -> str:
    """A whole script: the shared header, then ``body``."""
    return textwrap.dedent(HEADER) + textwrap.dedent(body)


CUT_FORMS = {
    ".detach()": "h.detach()",
    ".data": "h.data",
    ".item()": "torch.full((6, 8), h.sum().item())",
    ".numpy()": "torch.from_numpy(h.numpy(force=True))",
    ".tolist()": "torch.tensor(h.tolist())",
    "torch.tensor(t) (a copy)": "torch.tensor(h)",
}
"""How each cut is written in :func:`cut_program` (``h`` requires grad)."""


def cut_program(form: str) -> str:
    """The encoder's output cut by ``form`` before the head."""
    return program(f"""
        import warnings
        warnings.simplefilter("ignore")


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)

            def forward(self, x):
                h = self.enc(x)
                h = {form}  # <- cut
                return self.head(h)


        train(Net())
    """)


PROGRAMS: dict[str, str] = {
    "healthy": program("""
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        train(model)
    """),
    "frozen": program("""
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        model[0].requires_grad_(False)
        train(model)
    """),
    "never_called": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.spare = nn.Linear(8, 1)
                self.head = nn.Linear(8, 1)

            def forward(self, x):
                return self.head(torch.tanh(self.enc(x)))


        train(Net())
    """),
    "never_read": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 1)
                self.temperature = nn.Parameter(torch.ones(1))

            def forward(self, x):
                return self.enc(x)


        train(Net())
    """),
    "no_grad": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)

            def forward(self, x):
                with torch.no_grad():
                    h = self.enc(x)  # <- use
                return self.head(h)


        train(Net())
    """),
    "inference_mode": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)

            def forward(self, x):
                with torch.inference_mode():
                    h = self.enc(x)  # <- use
                return self.head(h.clone())


        train(Net())
    """),
    "no_grad_bare": program("""
        model = nn.Linear(4, 1)
        scale = nn.Parameter(torch.ones(4))
        for _ in range(2):
            x = torch.randn(6, 4)
            with torch.no_grad():
                x = x * scale  # <- use
            model.zero_grad()
            model(x).pow(2).mean().backward()
    """),
    "tied_after_init": program("""
        import sys

        sys.path.insert(0, sys.argv[1])  # a library installed in site-packages
        import tiedlib

        model = tiedlib.Tied()
        spare = nn.Parameter(torch.ones(3))
        tiedlib.init(spare)  # <- use
        ids = torch.randint(0, 10, (2, 5))
        for _ in range(2):
            model.zero_grad()
            model(ids).pow(2).mean().backward()
    """),
    "router": program("""
        class MoE(nn.Module):  # top-1 routing: argmax gives the router no gradient
            def __init__(self):
                super().__init__()
                self.router = nn.Linear(4, 3)
                self.experts = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

            def forward(self, x):
                choice = self.router(x).argmax(-1)  # <- cut
                gate = (self.router(x) > 0).float()  # <- compared
                return sum(e(x) * (choice == i).float().unsqueeze(-1) for i, e in enumerate(self.experts)) * gate.sum()


        torch.manual_seed(0)
        model = MoE()
        for _ in range(2):
            model.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
    """),
    "unreached": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.aux = nn.Linear(8, 1)
                self.head = nn.Linear(8, 1)

            def forward(self, x):
                h = torch.tanh(self.enc(x))
                self.aux_out = self.aux(h)  # <- dropped
                return self.head(h)


        train(Net())
    """),
    "pruned": program("""
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        train(model, backward=lambda loss: loss.backward(inputs=list(model[2].parameters())))  # <- call
    """),
    "grad_call": program("""
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        loss = model(torch.randn(6, 4)).pow(2).mean()
        (g,) = torch.autograd.grad(loss, [model[2].weight])  # <- call
    """),
    "zeros_relu": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)

            def forward(self, x):
                h = torch.relu(self.enc(x) - 1000.0)  # <- zeros
                return self.head(h) + x.sum()


        train(Net())
    """),
    "zeros_mask": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)
                self.register_buffer("mask", torch.zeros(8))

            def forward(self, x):
                h = self.enc(x) * self.mask  # <- zeros
                return self.head(h)


        train(Net())
    """),
    "zeros_weight": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)
                nn.init.zeros_(self.head.weight)

            def forward(self, x):
                return self.head(torch.tanh(self.enc(x)))  # <- zeros


        train(Net(), steps=1)
    """),
    "deep_sigmoid": program("""
        layers = []
        for _ in range(10):
            layers += [nn.Linear(4, 4), nn.Sigmoid()]
        model = nn.Sequential(*layers, nn.Linear(4, 1))
        train(model, steps=3)
    """),
    "parts": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.token = nn.Parameter(torch.zeros(1, 4))
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 1)

            def features(self, x):
                return torch.tanh(self.enc(x + self.token))  # <- use


        model = Net()
        value_head = nn.Linear(8, 1)
        ema = Net()  # a copy the program holds but never runs
        for _ in range(2):
            with torch.no_grad():
                h = model.features(torch.randn(6, 4))
            values = value_head(h)  # <- dropped
            model.head(h).pow(2).mean().backward()
    """),
    "idioms": program("""
        from torch.utils.checkpoint import checkpoint

        enc = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        lin = nn.Linear(16, 1)
        x = torch.randn(2, 5, 16)
        enc.eval()
        with torch.no_grad():
            fast = enc(x)  # the inference fast path, as unwatched
        enc.train()
        h = enc(x)
        loss = lin(h).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
        w = nn.Parameter(torch.randn(3))
        (g,) = torch.autograd.grad((w**3).sum(), w, create_graph=True)
        g.sum().backward()
        h2 = checkpoint(lambda t: torch.tanh(lin(t)), h.detach().requires_grad_(), use_reentrant=True)
        h2.sum().backward()
        if sys.argv[1:2] and sys.argv[1] != "-":
            torch.save({"fast": fast, "w": w.grad, "lin": lin.weight.grad, "enc": enc.linear1.weight.grad}, sys.argv[1])
    """),
    "all": program("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = nn.Linear(4, 8)
                self.frozen = nn.Linear(8, 8)
                self.frozen.requires_grad_(False)
                self.spare = nn.Linear(8, 8)
                self.teacher = nn.Linear(8, 8)
                self.cutter = nn.Linear(8, 8)
                self.aux = nn.Linear(8, 1)
                self.dead = nn.Linear(8, 8)
                self.head = nn.Linear(8, 1)
                self.temperature = nn.Parameter(torch.ones(1))

            def forward(self, x):
                h = torch.tanh(self.backbone(x))
                h = self.frozen(h)
                with torch.no_grad():
                    t = self.teacher(h)  # <- use
                c = self.cutter(h).detach()  # <- cut
                self.aux_out = self.aux(h)  # <- dropped
                d = torch.relu(self.dead(h) - 1000.0)  # <- zeros
                return self.head(h + t + c + d)


        train(Net(), steps=3)
    """),
}
"""Every program by name."""


def write(tmp_path: Path, name: str, source: str | None = None) -> Path:
    """``PROGRAMS[name]`` (or ``source``) as ``tmp_path/name.py``."""
    path = tmp_path / f"{name}.py"
    path.write_text(source if source is not None else PROGRAMS[name], encoding="utf-8")
    return path


def marked_line(path: Path, marker: str) -> int:
    """The line of ``path`` that ends in ``# <- marker``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.rstrip().endswith(f"# <- {marker}"):
            return number
    raise AssertionError(f"no line marked {marker!r} in {path}")


TIED_LIBRARY = """
import contextlib

import torch
from torch import nn


class quiet(contextlib.ContextDecorator):  # a library's wrapper of its initializers
    def __enter__(self):
        self.grad = torch.no_grad()
        self.grad.__enter__()

    def __exit__(self, *exc):
        self.grad.__exit__(*exc)


@quiet()
def init(weight):
    weight.normal_()
    weight[0].zero_()  # a padding row, as transformers initializes an embedding's


class Tied(nn.Module):  # a BART: three embeddings, each initialized, then tied to one
    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(10, 4)
        self.encoder = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        for weight in (self.shared.weight, self.encoder.weight, self.head.weight):
            init(weight)
        self.encoder.weight = self.shared.weight
        self.head.weight = self.shared.weight

    def forward(self, ids):
        return self.head(self.encoder(ids))
"""
"""The library ``tied_after_init`` imports, written into a ``site-packages`` folder."""
