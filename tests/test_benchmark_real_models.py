"""``benchmarks.real_models``: every way runs a model's steps and leaves its gradients alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks import real_models  # noqa: E402


def test_each_way_times_the_steps_and_watching_changes_no_gradient() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    grads: list[torch.Tensor] = []
    model[0].weight.register_post_accumulate_grad_hook(lambda p: grads.append(p.grad.clone()))

    def loss() -> torch.Tensor:
        return model(x).pow(2).sum()

    medians = real_models.measure(model, loss, repeat=1, steps=2)
    assert list(medians) == list(real_models.WAYS)
    assert all(seconds > 0 for seconds in medians.values())
    # Two steps under each way, the same gradient every time.
    assert len(grads) == 2 * len(real_models.WAYS)
    assert all(torch.equal(g, grads[0]) for g in grads)


def test_a_model_whose_library_is_missing_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def without_timm(name: str, *args: object, **kwargs: object) -> object:
        if name == "timm":
            raise ImportError("No module named 'timm'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", without_timm)
    with pytest.raises(ImportError, match="timm"):
        real_models.build("vit")
