"""Models are built from plain nn.Linear; `plan_kernels` switches them to the plan's kernel and back,
without touching their parameters, and anyformer's own loops do so for their models."""
import pytest
import torch
from torch import nn

from anyformer import plan
from anyformer.models import REGISTRY
from anyformer.nn import (LMHead, PlannedLinear, PlannedLMHead, plan_kernels, planned_kernels, set_training_kernel,
                          stock_kernels)
from anyformer.nn import linear as linear_module
from anyformer.train.build import build_model

TINY = {
    "vit": dict(image_size=8, in_chans=1, num_classes=3, patch_size=4, width=16, depth=1, heads=2),
    "gpt": dict(vocab_size=11, context=8, width=16, depth=1, heads=2),
    "text-encoder": dict(vocab_size=11, max_positions=8, width=16, depth=1, heads=2, mlp_hidden=32),
    "mae": dict(image_size=8, in_chans=1, patch_size=4, width=16, depth=1, heads=2, mlp_hidden=32,
                decoder_width=8, decoder_depth=1, decoder_heads=2),
    "dit": dict(image_size=8, in_chans=1, num_classes=3, patch_size=4, width=16, depth=1, heads=2, mlp_hidden=32,
                time_freq_dim=8),
}


def _linear_types(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, (nn.Linear, LMHead))}


@pytest.mark.parametrize("family", sorted(TINY))
def test_every_model_is_built_from_plain_linear_layers(family):
    cls = REGISTRY[family]
    model = cls(cls.config_class(**TINY[family]))
    assert _linear_types(model) <= {nn.Linear, LMHead} and nn.Linear in _linear_types(model)


def test_dynamic_quantization_finds_every_linear_layer():
    """quantize_dynamic matches layers by exact type: a subclass would be left in float."""
    gpt = REGISTRY["gpt"](REGISTRY["gpt"].config_class(**TINY["gpt"]))
    q = torch.ao.quantization.quantize_dynamic(gpt, {nn.Linear}, dtype=torch.qint8)
    assert not any(type(m) is nn.Linear for m in q.modules())


def test_plan_kernels_switches_in_place_and_back_keeping_the_weights():
    gpt = REGISTRY["gpt"](REGISTRY["gpt"].config_class(**TINY["gpt"])).eval()
    ids = torch.randint(0, 11, (2, 8))
    before, state = gpt(ids), {k: v.clone() for k, v in gpt.state_dict().items()}
    assert plan_kernels(gpt) is gpt and _linear_types(gpt) == {PlannedLinear, PlannedLMHead}
    assert gpt.state_dict().keys() == state.keys() and all(torch.equal(gpt.state_dict()[k], v) for k, v in state.items())
    torch.testing.assert_close(gpt(ids), before)  # the suite forces linear=stock: F.linear either way
    assert _linear_types(stock_kernels(gpt)) == {nn.Linear, LMHead}


def test_planned_kernels_switches_back_only_what_it_switched():
    model = nn.Sequential(nn.Linear(3, 3), PlannedLinear(3, 2))
    with planned_kernels(model):
        assert [type(m) for m in model] == [PlannedLinear, PlannedLinear]
    assert [type(m) for m in model] == [nn.Linear, PlannedLinear]


def test_the_trainers_model_and_generate_use_the_planned_kernels(monkeypatch):
    from types import SimpleNamespace

    from anyformer.train.config import TrainConfig
    seen = []
    monkeypatch.setattr(PlannedLinear, "forward",
                        lambda self, x: seen.append("planned") or nn.functional.linear(x, self.weight, self.bias))
    gpt = REGISTRY["gpt"](REGISTRY["gpt"].config_class(**TINY["gpt"]))
    gpt.generate(torch.zeros(1, 1, dtype=torch.long), 3, temperature=0)
    assert seen and _linear_types(gpt) == {nn.Linear, LMHead}  # planned while generating, plain after
    task = SimpleNamespace(family="vit", model_overrides=lambda: {"num_classes": 10})  # what build_model reads
    model = build_model(TrainConfig(model="vit-mnist-fast"), task)
    assert _linear_types(model) == {PlannedLinear}


@pytest.mark.skipif(plan.onednn_linear_op() is None, reason="this torch build has no oneDNN")
def test_a_training_kernel_set_on_the_model_serves_its_gradient_calls_only(monkeypatch):
    """`set_training_kernel` (the model-wide choice of plan.linears_for_training): calls that need
    gradients take that kernel without asking the plan; gradient-free calls still ask it."""
    gpt = plan_kernels(REGISTRY["gpt"](REGISTRY["gpt"].config_class(**TINY["gpt"])))
    asked = []
    monkeypatch.setattr(linear_module, "linear_kernel", lambda *a: asked.append(a[-1]) or "stock")
    idx = torch.randint(0, 11, (2, 8))
    set_training_kernel(gpt, "mixed")
    assert {m.training_kernel for m in gpt.modules() if isinstance(m, (PlannedLinear, PlannedLMHead))} == {"mixed"}
    out = gpt(idx)
    assert asked == [] and "OneDNNLinearBackward" in _grad_names(out)
    with torch.no_grad():
        gpt(idx)
    assert asked and not any(asked)  # every gradient-free call asked the plan (training=False)
    set_training_kernel(gpt, None)
    asked.clear()
    gpt(idx)
    assert asked and all(asked)
    with pytest.raises(ValueError, match="training kernel must be one of"):
        set_training_kernel(gpt, "fast")


def _grad_names(t: torch.Tensor) -> str:
    """The names of every node of t's autograd graph."""
    seen, todo, names = set(), [t.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        todo += [n for n, _ in node.next_functions]
    return " ".join(names)
