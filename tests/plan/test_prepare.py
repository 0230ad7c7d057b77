"""The one door (`plan.prepare`): models are built from plain layers; preparing swaps in the plan's
(same parameters and state dict), chooses their kernels once for what an example runs, and no
forward asks the planner afterwards. `nn/` and `models/` never import the plan."""
import ast
import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from anyformer import plan
from anyformer.models import REGISTRY
from anyformer.nn import LMHead, MultiHeadAttention
from anyformer.plan.layers import PlannedGELU, PlannedLinear, PlannedLMHead
from anyformer.plan.planner import Planner
from anyformer.train.build import build_model

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "vit": dict(image_size=8, in_chans=1, num_classes=3, patch_size=4, width=16, depth=1, heads=2),
    "gpt": dict(vocab_size=11, context=8, width=16, depth=1, heads=2),
    "text-encoder": dict(vocab_size=11, max_positions=8, width=16, depth=1, heads=2, mlp_hidden=32),
    "mae": dict(image_size=8, in_chans=1, patch_size=4, width=16, depth=1, heads=2, mlp_hidden=32,
                decoder_width=8, decoder_depth=1, decoder_heads=2),
    "dit": dict(image_size=8, in_chans=1, num_classes=3, patch_size=4, width=16, depth=1, heads=2, mlp_hidden=32,
                time_freq_dim=8),
}
PLANNED = {PlannedLinear, PlannedLMHead, PlannedGELU}


def tiny(family: str) -> nn.Module:
    cls = REGISTRY[family]
    return cls(cls.config_class(**TINY[family]))


def _types(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, (nn.Linear, LMHead, nn.GELU, MultiHeadAttention))}


@pytest.mark.parametrize("family", sorted(TINY))
def test_every_model_is_built_from_plain_layers(family):
    assert not _types(tiny(family)) & PLANNED and nn.Linear in _types(tiny(family))


def test_only_token_wise_gelus_are_the_plans():
    """The GELUs of MLPs and of a classifier's pre-logits layer are swapped; a convolutional stem's
    (vit-mnist-fast's) keeps PyTorch's, as it always did."""
    vit = plan.prepare(REGISTRY["vit"].preset("vit-mnist-fast"))
    kinds = {name: type(m) for name, m in vit.named_modules() if isinstance(m, nn.GELU)}
    assert {t for n, t in kinds.items() if n.startswith("patch_embed")} == {nn.GELU}
    assert {t for n, t in kinds.items() if ".mlp." in n} == {PlannedGELU}
    assert type(plan.prepare(nn.Sequential(nn.Linear(2, 2), nn.GELU()))[1]) is nn.GELU


def test_dynamic_quantization_finds_every_linear_layer():
    """quantize_dynamic matches layers by exact type: a subclass would be left in float."""
    q = torch.ao.quantization.quantize_dynamic(tiny("gpt"), {nn.Linear}, dtype=torch.qint8)
    assert not any(type(m) is nn.Linear for m in q.modules())


def test_prepare_swaps_in_place_and_unprepare_back_keeping_the_weights():
    gpt = tiny("gpt").eval()
    ids = torch.randint(0, 11, (2, 8))
    before, state = gpt(ids), {k: v.clone() for k, v in gpt.state_dict().items()}
    assert plan.prepare(gpt, ids) is gpt
    assert _types(gpt) == {PlannedLinear, PlannedLMHead, PlannedGELU, MultiHeadAttention}
    assert gpt.state_dict().keys() == state.keys() and all(torch.equal(gpt.state_dict()[k], v) for k, v in state.items())
    torch.testing.assert_close(gpt(ids), before)  # the suite forces stock: the same arithmetic
    assert _types(plan.unprepare(gpt)) == {nn.Linear, LMHead, nn.GELU, MultiHeadAttention}
    torch.testing.assert_close(gpt(ids), before, rtol=0, atol=0)


def test_no_forward_asks_the_planner_once_prepared(monkeypatch):
    """The choices are made in prepare; afterwards forwards, backwards and generation ask nothing."""
    vit, gpt = tiny("vit"), tiny("gpt")
    images, ids = torch.randn(4, 1, 8, 8), torch.randint(0, 11, (1, 3))
    plan.prepare(vit, images)
    plan.prepare(gpt, lambda m: m.generate(ids, 2, temperature=0))
    asked = []
    monkeypatch.setattr(Planner, "decide", lambda self, name, *a, **k: asked.append(name) or "stock")
    vit(images).sum().backward()
    with torch.no_grad():
        vit(torch.randn(9, 1, 8, 8))  # another batch size: the same choices
    gpt.generate(ids, 5, temperature=0)
    assert asked == []


def test_prepare_asks_for_each_layer_and_kind_of_call_and_leaves_the_answers_on_the_layers(monkeypatch):
    answers = {"linear": "onednn", "gelu": "native", "attention": "explicit"}
    asked = []

    def decide(self, name, fields, *a, **k):
        asked.append((name, fields.get("training")))
        return answers.get(name, "stock")
    monkeypatch.setattr(Planner, "decide", decide)
    vit = tiny("vit")  # training mode: calls with gradients, and the evaluation's without
    with plan.using(Planner()):  # a fresh memory: every answer comes from `decide`
        plan.prepare(vit, torch.randn(4, 1, 8, 8))
    fc1, act, attn = vit.backbone.blocks[0].mlp.fc1, vit.backbone.blocks[0].mlp.act, vit.backbone.blocks[0].attn
    assert (fc1.kernel, fc1.few_rows_kernel, fc1.training_kernel) == ("onednn", "onednn", "onednn")
    assert act.native and act.native_training
    assert attn.attend.table[(True, True)] is layers_attend("explicit")  # one block: its class token queries alone
    assert {("linear", True), ("linear", False), ("gelu", True), ("gelu", False), ("attention", True),
            ("attention", False)} <= set(asked)
    eval_only = tiny("vit").eval()  # eval mode: nothing asked for calls with gradients
    asked.clear()
    with plan.using(Planner()):
        plan.prepare(eval_only, torch.randn(4, 1, 8, 8))
    assert asked and not any(training for _, training in asked)


def test_under_autocast_only_what_can_run_on_another_kernel_is_asked(monkeypatch):
    """A bf16 autocast step (the default recipe's on CPUs with bf16): its linear layers and GELUs run
    PyTorch's kernels whatever the plan says, so nothing is asked for them, and attention is asked for
    the precision q, k and v come in (as the layer's calls would be keyed)."""
    asked = []
    monkeypatch.setattr(Planner, "decide", lambda self, name, fields, *a, **k: asked.append(
        (name, fields.get("dtype"), fields.get("layout"))) or "stock")

    def bf16_step(m):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            m(torch.randn(4, 1, 8, 8))
    with plan.using(Planner()):
        plan.prepare(tiny("vit"), bf16_step)
    assert asked and set(asked) == {("attention", "bfloat16", "views")}


def layers_attend(name: str):
    from anyformer.nn.attend import ATTENTION_FUNCTIONS
    return ATTENTION_FUNCTIONS[name]


def test_the_example_runs_without_moving_the_rng_or_leaving_gradients():
    vit = tiny("vit")
    vit.backbone.blocks[0].mlp.drop = torch.nn.Dropout(0.5)  # draws from the RNG when it runs
    torch.manual_seed(3)
    state = torch.random.get_rng_state()
    plan.prepare(vit, lambda m: m(torch.randn(2, 1, 8, 8)).sum().backward())
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(p.grad is None for p in vit.parameters())


def test_examples_of_every_form_and_a_bad_one():
    x = torch.randn(2, 1, 8, 8)
    for example in (x, (x,), {"images": x}, lambda m: m(x), "default", None):
        assert _types(plan.prepare(tiny("vit"), example)) >= {PlannedLinear, PlannedGELU}
    with pytest.raises(ValueError, match="example must be inputs, a callable, 'default' or None; got 'fast'"):
        plan.prepare(tiny("vit"), "fast")


@pytest.mark.skipif(plan.onednn_linear_op() is None, reason="this torch build has no oneDNN")
def test_a_training_kernel_set_on_the_model_serves_its_gradient_calls_only():
    """`set_training_kernel` (the model-wide choice of plan.linears_for_training): calls that need
    gradients take that kernel, the others prepare's; None gives prepare's own answer back."""
    # Prepared under a forced stock plan: this folder's tests plan for real (conftest), and a host where
    # oneDNN wins would give prepare's own answer "onednn", not the "stock" this test hands back to.
    with plan.forcing("stock"):
        gpt = plan.prepare(tiny("gpt"), torch.randint(0, 11, (2, 8)))
    idx = torch.randint(0, 11, (2, 8))
    plan.set_training_kernel(gpt, "mixed")
    assert {m.training_kernel for m in gpt.modules() if isinstance(m, (PlannedLinear, PlannedLMHead))} == {"mixed"}
    assert "OneDNNLinearBackward" in _grad_names(gpt(idx))
    with torch.no_grad():
        assert gpt(idx).grad_fn is None  # gradient-free calls: prepare's choice, F.linear here
    plan.set_training_kernel(gpt, None)
    assert {m.training_kernel for m in gpt.modules() if isinstance(m, (PlannedLinear, PlannedLMHead))} == {"stock"}
    assert "OneDNNLinearBackward" not in _grad_names(gpt(idx))
    with pytest.raises(ValueError, match="training kernel must be one of"):
        plan.set_training_kernel(gpt, "fast")


def test_build_model_gives_a_plain_model_and_the_trainer_prepares_it(tmp_path):
    from types import SimpleNamespace

    from anyformer.train.config import TrainConfig
    task = SimpleNamespace(family="vit", model_overrides=lambda: {"num_classes": 10})  # what build_model reads
    assert not _types(build_model(TrainConfig(model="vit-mnist-fast"), task)) & PLANNED


def _plan_imports(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.module and (node.module == "plan" or node.module.startswith("plan.")) and node.level:
                return True
            if node.module in ("anyformer.plan",) or (node.module or "").startswith("anyformer.plan."):
                return True
            if any(a.name == "plan" for a in node.names):
                return True
        if isinstance(node, ast.Import) and any(a.name.startswith("anyformer.plan") for a in node.names):
            return True
    return False


def test_nn_and_models_never_import_the_plan():
    offenders = [str(p.relative_to(ROOT)) for d in ("nn", "models") for p in sorted((ROOT / "anyformer" / d).rglob("*.py"))
                 if _plan_imports(p)]
    assert offenders == []


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


def test_a_cuda_layer_is_asked_its_sdpa_backend_with_its_calls_shape(monkeypatch):
    """On CUDA the attention decision is SDPA's backend (plan/decisions/sdpa.py), asked with the call's
    sizes; a cached call or attention dropout keep torch's pick (each backend draws its own masks),
    and another device asks nothing."""
    import importlib
    door = importlib.import_module("anyformer.plan.prepare")  # the module (the package exports the function)
    asked = []
    monkeypatch.setattr(door, "sdpa_backend", lambda *a, **k: asked.append((a, k)) or "cudnn")
    monkeypatch.setattr(door, "attention_kernel", lambda *a, **k: pytest.fail("the CPU decision asked for CUDA"))
    case = door.AttentionCase(4, 2, 5, 7, 8, torch.bfloat16, True, False, "views", "cuda", False)
    assert door._attention_choice(case, True) == "cudnn"
    assert asked == [((4, 2, 5, 7, 8, torch.bfloat16, True, True), {"masked": False, "device": "cuda"})]
    for other in (dict(layout="cache"), dict(dropout=True), dict(device="mps")):
        assert door._attention_choice(dataclasses.replace(case, **other), False) is None
    assert len(asked) == 1


def test_an_sdpa_backend_function_is_sdpa_in_that_backend():
    from anyformer.nn.attend import sdpa
    from anyformer.plan.attention_choice import SdpaBackend
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[..., 0] = True
    math = SdpaBackend("math")  # the backend every device has
    torch.testing.assert_close(math(q, k, v, mask, False, 0.0), sdpa(q, k, v, mask, False, 0.0))
    torch.testing.assert_close(math(q, k, v, None, True, 0.0), sdpa(q, k, v, None, True, 0.0))
    assert repr(math) == "SdpaBackend('math')"
