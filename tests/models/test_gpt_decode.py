"""The one-token decode step (models/generation.py's `next_logits`, the model's own forward over its
cache): the same logits as the uncached forward for every kind of position; compiled by the door's
decoding half (`plan.prepare_decode`, before generation: a real inductor compile; on CUDA with CUDA
graphs), the same greedy tokens, and nothing planned, timed or compiled while generating; the eager
forward wherever it does not apply, the model was not prepared or the plan has not chosen it."""
import gc
import weakref

import pytest
import torch

from anyformer.models.gpt import GPT, GPTConfig
from anyformer import plan
from anyformer.models.generation import cache_length, compiled_steps, next_logits
from anyformer.plan import attention_choice, compiled as compiled_module, decode as decode_plan, layers
from anyformer.plan.decode import decode_tolerance, plan_fields
from anyformer.plan.timing import Measurement


def tiny_gpt(position: str = "learned", prepared: bool = True, **kw) -> GPT:
    """A small GPT, prepared by the plan (`plan.prepare`) unless asked not."""
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=50, context=64, width=32, depth=2, heads=4, position=position, **kw)).eval()
    return plan.prepare(gpt, "default") if prepared else gpt


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rotary", "none"])
def test_the_one_token_step_computes_the_models_own_logits(position):
    gpt = tiny_gpt(position, bias=position != "none")
    ids = torch.randint(0, 50, (2, 12))
    with torch.inference_mode():
        cache = gpt.new_cache(2, 32)
        gpt(ids[:, :9], cache=cache)  # the prompt: the position moves on to 9
        for t in range(9, 12):  # three steps, each written into the cache at its position
            logits = next_logits(gpt, ids[:, t:t + 1], cache)
            torch.testing.assert_close(logits, gpt(ids[:, :t + 1])[:, -1], rtol=1e-5, atol=1e-5)
        assert int(cache.position) == 12


def test_the_cache_takes_several_tokens_at_its_position():
    """A prompt written into the cache at position 0, then more tokens at 5: the uncached logits."""
    gpt = tiny_gpt("rotary")
    ids = torch.randint(0, 50, (1, 8))
    with torch.inference_mode():
        cache = gpt.new_cache(1, 16)
        gpt(ids[:, :5], cache=cache)
        logits = gpt(ids[:, 5:], cache=cache)
        torch.testing.assert_close(logits, gpt(ids)[:, 5:], rtol=1e-5, atol=1e-5)


def test_compiled_steps_take_products_and_sums_on_the_cpu(monkeypatch):
    """Under torch.compile on the CPU a planned linear of a few rows and one query over the cache are
    written as products and sums (inductor fuses them); the prompt's keep F.linear and SDPA."""
    gpt = tiny_gpt()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(layers, "_is_compiling", lambda: True)
    monkeypatch.setattr(attention_choice, "_is_compiling", lambda: True)
    seen, rowwise, by_sums = [], layers.rowwise_linear, attention_choice.by_sums
    monkeypatch.setattr(layers, "rowwise_linear", lambda *a: seen.append("linear") or rowwise(*a))
    monkeypatch.setattr(attention_choice, "by_sums", lambda *a: seen.append("attention") or by_sums(*a))
    with torch.inference_mode():
        cache = gpt.new_cache(1, 16)
        gpt(torch.randint(0, 50, (1, 5)), cache=cache)
        assert seen == []  # five rows: F.linear, SDPA
        next_logits(gpt, torch.randint(0, 50, (1, 1)), cache)
    # per block: qkv, attention, proj, fc1, fc2; then the LM head
    assert seen == ["linear", "attention", "linear", "linear", "linear"] * 2 + ["linear"]


@pytest.mark.slow
@pytest.mark.parametrize("position, batch", [("learned", 1), ("sinusoidal", 1), ("rotary", 2)])
def test_generate_with_the_compiled_step_gives_the_eager_tokens(position, batch):
    """A real torch.compile (inductor and the C++ compiler), forced at the door: greedy tokens as the
    eager loop's, cached and uncached, and no graph compiled while generating."""
    from torch._dynamo.utils import counters
    gpt = tiny_gpt(position)
    prompt = torch.randint(0, 50, (batch, 7))
    eager = gpt.generate(prompt, 20, temperature=0)
    assert not gpt.compiled_decode(batch, 27)
    assert torch.equal(gpt.generate(prompt, 20, temperature=0, use_cache=False), eager)
    with plan.forcing(compile="compiled"):
        assert plan.prepare_decode(gpt, batch, 27)
    compiled = compiled_steps(gpt)[(batch, 64)]
    kept = compiled.kept[0]
    counters.clear()
    first = gpt.generate(prompt, 20, temperature=0)
    again = gpt.generate(prompt, 20, temperature=0)  # the same graph, and the cache kept from the first
    assert not counters["stats"]["unique_graphs"]  # compiled at the door, none in generate
    assert compiled.kept == [kept]
    assert gpt.compiled_decode(batch, 27) and not gpt.compiled_decode(batch + 1, 27)
    assert torch.equal(first, eager) and torch.equal(again, eager)
    with plan.forcing(compile="eager"):  # forcing at the door drops the compiled step
        assert not plan.prepare_decode(gpt, batch, 27)
    assert not gpt.compiled_decode(batch, 27) and torch.equal(gpt.generate(prompt, 20, temperature=0), eager)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["float32", "bfloat16-autocast", "bfloat16"])
def test_on_cuda_the_compiled_step_runs_as_a_cuda_graph_with_the_uncached_logits(precision):
    """On CUDA the compiled step is a CUDA graph (mode reduce-overhead), its cache (buffers and
    position) marked static so that cudagraph trees do not skip it. Its logits, teacher-forced along
    the uncached tokens, are the uncached forward's within the precision's tolerance; in float32
    greedy tokens are equal too (in bf16 a random model's near-ties may round either way)."""
    from torch._dynamo.utils import counters
    gpt = tiny_gpt("rotary").cuda()
    gpt = gpt.to(torch.bfloat16) if precision == "bfloat16" else gpt
    prompt = torch.randint(0, 50, (2, 7), device="cuda")
    counters.clear()
    with torch.autocast("cuda", torch.bfloat16, enabled=precision == "bfloat16-autocast"):
        uncached = gpt.generate(prompt, 20, temperature=0, use_cache=False)
        with plan.forcing(compile="compiled"):
            assert plan.prepare_decode(gpt, 2, 27)
        cached = gpt.generate(prompt, 20, temperature=0)
        again = gpt.generate(prompt, 20, temperature=0)
        step = compiled_steps(gpt)[(2, 64)].run
        with torch.inference_mode():
            cache = gpt.new_cache(2, 64)  # another cache: the graph is recorded again for its addresses
            gpt(uncached[:, :7], cache=cache)
            steps = torch.stack([step(gpt, uncached[:, t:t + 1], cache).float() for t in range(7, 26)])
            ref = torch.stack([gpt(uncached[:, :t + 1])[:, -1].float() for t in range(7, 26)])
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    dtype = torch.float32 if precision == "float32" else torch.bfloat16
    assert (steps - ref).abs().max() <= decode_tolerance(dtype) * ref.abs().max()
    if precision == "float32":
        assert torch.equal(cached, uncached) and torch.equal(again, uncached)


class Clock:
    """`time` for compiled.py: every perf_counter() half a second on. The gate reads it around a call
    that reads it once more itself, so every step it times takes 1 s."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.5
        return self.now


def _favour(name, runs):
    times = {n: (0.5 if n == name else 1.0) for n in runs}
    return Measurement(times=times, errors={}, rounds=1)


def test_the_door_compiles_only_where_the_steps_to_come_would_pay_for_it(monkeypatch, tmp_path):
    """Ski rental, at the door: with steps timed at 1 s and a compile estimated at 10 s, 7 steps to come
    are too few to measure one; 14 are enough, and the compile is measured (faked timings favour it)
    and kept. Generation then asks nothing: it neither plans nor compiles, however many steps it takes."""
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    monkeypatch.delenv("ANYFORMER_PLAN", raising=False)
    monkeypatch.setattr(compiled_module, "FIRST_DECODE_COMPILE_S", 10.0)
    monkeypatch.setattr(compiled_module, "time", Clock())
    compiles = []
    monkeypatch.setattr(compiled_module, "_compile", lambda f, **kw: compiles.append(kw) or f)
    gpt = tiny_gpt()
    prompt = torch.randint(0, 50, (1, 5))
    with plan.using(plan.Planner(timer=lambda runs, budget_s: _favour("compiled", runs))):
        assert not plan.prepare_decode(gpt, 1, 13, steps=7)
        assert compiles == [] and not gpt.compiled_decode(1, 13)
        assert plan.prepare_decode(gpt, 1, 13, steps=14)
        assert compiles == [{"dynamic": False, "fullgraph": True}] and gpt.compiled_decode(1, 13)
        record = plan.planner().entry("compile", {**plan_fields(gpt, 1, 64), "pass": "decode"})
        assert record["choice"] == "compiled" and record["timed"] == "decode steps"
        assert plan_fields(gpt, 1, 64)["model"] == "gpt-d2-w32-h4-m128-v50-learned-gelu_tanh"
        assert plan.prepare_decode(gpt, 1, 40)  # the same cache size: settled, not planned again
        for asked in ("decide", "entry", "lookup", "forced"):  # generation must not reach the plan
            monkeypatch.setattr(plan.Planner, asked, lambda *a, **kw: pytest.fail("generation asked the plan"))
        gpt.generate(prompt, 8, temperature=0)
        gpt.generate(prompt, 50, temperature=0)
        gpt.generate(prompt.expand(2, -1), 8, temperature=0)  # no step compiled for 2 prompts: eager
    assert len(compiles) == 1


@pytest.mark.slow
def test_a_model_with_a_compiled_step_can_still_be_freed():
    gpt = tiny_gpt()
    with plan.forcing(compile="compiled"):
        assert plan.prepare_decode(gpt, 1, 9)
    gpt.generate(torch.randint(0, 50, (1, 5)), 4, temperature=0)
    assert gpt.compiled_decode(1, 9)
    gone = weakref.ref(gpt)
    del gpt
    gc.collect()
    assert gone() is None


def test_where_the_static_step_does_not_apply_generate_runs_eager(monkeypatch):
    """A model the door was not asked about, or on a device without a static step, runs eager."""
    with plan.forcing(compile="compiled"):
        out = tiny_gpt(prepared=False).generate(torch.randint(0, 50, (1, 5)), 4, temperature=0)
        monkeypatch.setattr(decode_plan, "STATIC_DEVICES", ("cuda",))
        gpt = tiny_gpt()
        assert not plan.prepare_decode(gpt, 1, 9)
        assert gpt.generate(torch.randint(0, 50, (1, 5)), 4, temperature=0).shape == out.shape == (1, 9)
    assert not gpt.compiled_decode(1, 9) and not tiny_gpt(prepared=False).compiled_decode(1, 9)


def test_half_precision_steps_are_checked_to_their_precision():
    assert decode_tolerance(torch.float32) == 1e-4
    assert decode_tolerance(torch.float16) < decode_tolerance(torch.bfloat16) < 0.1


def test_caches_come_in_powers_of_two_up_to_the_context():
    gpt = tiny_gpt()  # context 64
    assert [cache_length(gpt, n) for n in (1, 64)] == [64, 64]
    big = GPT(GPTConfig(vocab_size=10, context=1000, width=8, depth=1, heads=2))
    assert [cache_length(big, n) for n in (65, 300, 512, 513, 1000)] == [128, 512, 512, 1000, 1000]
