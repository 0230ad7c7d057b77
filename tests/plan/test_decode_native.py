"""A GPT's one-token step with its blocks on anyformer's own kernel (plan/decode_native.py, native/decode.cpp):
the eager forward's logits and cache, step after step, for every activation, bias and position it takes;
the eager forward for what it does not take (prompts, hooked attention); refusals named; and the door
(`plan.prepare_decode`) offering it as the `decode` decision, forced or measured, greedy tokens unchanged."""
import pytest
import torch

from anyformer import plan
from anyformer.models.generation import compiled_steps, next_logits
from anyformer.models.gpt import GPT, GPTConfig
from anyformer.nn import attention_weights
from anyformer.plan import native
from anyformer.plan.decode_native import NativeDecodeStep, unsupported

needs_compiler = pytest.mark.skipif(native._compiler() is None, reason="no C++ compiler on this machine")


def gpt(**kw) -> GPT:
    torch.manual_seed(0)
    c = dict(vocab_size=50, context=64, width=64, depth=2, heads=4)
    return GPT(GPTConfig(**{**c, **kw})).eval()


def _steps(model: GPT, step, ids: torch.Tensor, prompt: int, cache_len: int = 64):
    """Each position's logits after the prompt, teacher-forced along `ids`, and the cache at the end."""
    with torch.inference_mode():
        cache = model.new_cache(ids.shape[0], cache_len)
        out = [step(model, ids[:, :prompt], cache)]
        out += [step(model, ids[:, t:t + 1], cache) for t in range(prompt, ids.shape[1])]
    return torch.stack(out), cache


@needs_compiler
@pytest.mark.parametrize("kw", [dict(activation="gelu_tanh"), dict(activation="gelu", bias=False),
                                dict(activation="relu", position="sinusoidal"), dict(position="none"),
                                dict(width=96, heads=3, mlp_hidden=80)])  # heads of 32, an MLP not of 16s
@pytest.mark.parametrize("batch", [1, 3])
def test_the_native_step_gives_the_eager_logits_and_cache(kw, batch):
    model = gpt(**kw)
    ids = torch.randint(0, 50, (batch, 40))
    eager, eager_cache = _steps(model, next_logits, ids, 7)
    own, own_cache = _steps(model, NativeDecodeStep(model), ids, 7)
    torch.testing.assert_close(own, eager, rtol=1e-5, atol=1e-5 * float(eager.abs().max()))
    assert int(own_cache.position) == int(eager_cache.position) == 40
    for mine, theirs in zip(own_cache.k + own_cache.v, eager_cache.k + eager_cache.v):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


@needs_compiler
def test_prompts_and_hooked_attention_take_the_eager_forward(monkeypatch):
    model = gpt()
    step, calls = NativeDecodeStep(model), []
    monkeypatch.setattr(native.library(), "gpt_decode_blocks",
                        lambda *a, f=native.library().gpt_decode_blocks: calls.append(1) or f(*a))
    with torch.inference_mode():
        cache = model.new_cache(1, 16)
        step(model, torch.tensor([[1, 2, 3]]), cache)  # a prompt: eager
        assert calls == []
        with attention_weights(model, [0]) as weights:
            step(model, torch.tensor([[4]]), cache)  # weights asked: eager, and they come
        assert calls == [] and weights[0].shape == (1, 4, 1, 4)
        step(model, torch.tensor([[5]]), cache)
        assert calls == [1] and int(cache.position) == 5


@needs_compiler
def test_the_step_reads_the_weights_the_model_has_now():
    model, other = gpt(), gpt()
    torch.nn.init.normal_(other.backbone.blocks[1].mlp.fc1.weight)
    step = NativeDecodeStep(model)
    model.load_state_dict(other.state_dict(), assign=True)  # new tensors, not copies into the old
    ids = torch.randint(0, 50, (1, 12))
    torch.testing.assert_close(_steps(model, step, ids, 5)[0], _steps(other, next_logits, ids, 5)[0],
                               rtol=1e-5, atol=1e-5)


@needs_compiler
def test_what_it_does_not_take_is_named():
    assert "rotary" in unsupported(gpt(position="rotary"))
    assert "float32 CPU" in unsupported(gpt().to(torch.bfloat16))
    model = gpt()
    model.backbone.blocks[0].mlp.act = torch.nn.Tanh()
    assert "GELU, tanh GELU or ReLU" in unsupported(model)
    model.backbone.blocks[0].mlp.act = torch.nn.ReLU()
    assert "one activation" in unsupported(model)  # the other block's is tanh GELU
    model = gpt()
    step = NativeDecodeStep(model)
    model.backbone.blocks[1].mlp.fc2.to(torch.float64)  # changed after the step was made: refused, not misread
    with torch.inference_mode(), pytest.raises(ValueError, match="contiguous float32 CPU weights"):
        step(model, torch.tensor([[1]]), model.new_cache(1, 8))
    with pytest.raises(ValueError, match="cannot run this model: no rotary"):
        NativeDecodeStep(gpt(position="rotary"))
    model = gpt()
    with torch.inference_mode(), pytest.raises(ValueError, match="a cache of 2 layers of \\(2, 4\\)"):
        NativeDecodeStep(model)(model, torch.tensor([[1]]), model.new_cache(2, 8))
    with torch.inference_mode(), pytest.raises(ValueError, match="at most 4 positions; got 4 cached"):
        cache = model.new_cache(1, 4)
        cache.position.fill_(4)
        NativeDecodeStep(model)(model, torch.tensor([[1]]), cache)


@needs_compiler
def test_the_door_offers_it_as_the_decode_decision(monkeypatch, tmp_path):
    """Forced (`decode=native`, no compile) the door leaves the native step for the size, which generate
    then runs (greedy tokens as the eager loop's) without counting it as compiled; `decode=stock` drops it."""
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    model = gpt()
    prompt = torch.randint(0, 50, (2, 5))
    with plan.forcing("stock"):
        eager = model.generate(prompt, 30, temperature=0)
    with plan.forcing(decode="native", compile="eager"):
        assert not plan.prepare_decode(model, 2, 35)
    step = compiled_steps(model)[(2, 64)]
    assert step.kind == "native" and isinstance(step.run, NativeDecodeStep) and not model.compiled_decode(2, 35)
    calls = []
    monkeypatch.setattr(NativeDecodeStep, "__call__",
                        lambda self, *a, f=NativeDecodeStep.__call__: calls.append(a[1].shape[1]) or f(self, *a))
    assert torch.equal(model.generate(prompt, 30, temperature=0), eager)
    assert calls == [5] + [1] * 29  # the prompt (eager inside), then every new token
    with plan.forcing("stock"):
        assert not plan.prepare_decode(model, 2, 35)
    assert compiled_steps(model) == {}


@needs_compiler
def test_measured_the_door_records_its_choice(monkeypatch, tmp_path):
    """Unforced, the step is measured against the eager forward and the choice recorded under the decode
    decision, keyed by the model's shape, batch and cache size."""
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    model = gpt(width=128, depth=4)
    with plan.using(plan.Planner()), plan.forcing(compile="eager"):
        plan.prepare_decode(model, 1, 40)
        record = plan.planner().entry("decode", plan.decode.plan_fields(model, 1, 64))
    assert record["choice"] in ("stock", "native") and set(record["times"]) == {"stock", "native"}
    assert (compiled_steps(model).get((1, 64)) is not None) == (record["choice"] == "native")
