"""The static one-token decode step (models/generation.py), the model's own forward in its static cache
mode: the same logits as the uncached forward for every kind of position, the same greedy tokens when
the plan's decoder (plan/decode.py, installed by `plan.prepare`) runs it compiled (a real inductor
compile; on CUDA with CUDA graphs), and the eager forward wherever it does not apply, the model was
not prepared or the plan has not chosen it."""
import gc
import weakref

import pytest
import torch

from anyformer.models.gpt import GPT, GPTConfig
from anyformer import plan
from anyformer.models.generation import cache_length, decode_step
from anyformer.plan import attention_choice, compiled as compiled_module, decode as decode_plan, layers
from anyformer.plan.decode import PLANNED_DECODER, decode_tolerance, plan_fields, static_step
from anyformer.plan.timing import Measurement


def tiny_gpt(position: str = "learned", prepared: bool = True, **kw) -> GPT:
    """A small GPT, prepared by the plan (`plan.prepare`: its decoder installed) unless asked not."""
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=50, context=64, width=32, depth=2, heads=4, position=position, **kw)).eval()
    return plan.prepare(gpt, "default") if prepared else gpt


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rotary", "none"])
def test_the_static_step_computes_the_models_own_logits(position):
    gpt = tiny_gpt(position, bias=position != "none")
    ids = torch.randint(0, 50, (2, 12))
    with torch.inference_mode():
        cache = gpt.new_cache(2, 32)
        gpt(ids[:, :9], cache=cache)  # the prompt, eager: the cache's length moves on to 9
        for t in range(9, 12):  # three steps, each written into the cache at its position
            logits = decode_step(gpt, ids[:, t:t + 1], torch.tensor(t), cache)
            torch.testing.assert_close(logits, gpt(ids[:, :t + 1])[:, -1], rtol=1e-5, atol=1e-5)
        assert all(c.length == 9 for c in cache)  # the static mode leaves the length to its caller


def test_the_static_mode_takes_several_tokens_at_a_position():
    """A prompt written into a static cache at position 0, then more tokens at 5: the uncached logits."""
    gpt = tiny_gpt("rotary")
    ids = torch.randint(0, 50, (1, 8))
    with torch.inference_mode():
        cache = gpt.new_cache(1, 16)
        gpt(ids[:, :5], cache=cache, position=torch.tensor(0))
        logits = gpt(ids[:, 5:], cache=cache, position=torch.tensor(5))
        torch.testing.assert_close(logits, gpt(ids)[:, 5:], rtol=1e-5, atol=1e-5)


def test_compiled_steps_take_products_and_sums_on_the_cpu(monkeypatch):
    """Under torch.compile on the CPU a planned linear of a few rows and one query over a static cache
    are written as products and sums (inductor fuses them); the prompt's keep F.linear and SDPA."""
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
        decode_step(gpt, torch.randint(0, 50, (1, 1)), torch.tensor(5), cache)
    # per block: qkv, attention, proj, fc1, fc2; then the LM head
    assert seen == ["linear", "attention", "linear", "linear", "linear"] * 2 + ["linear"]


@pytest.mark.slow
@pytest.mark.parametrize("position, batch", [("learned", 1), ("sinusoidal", 1), ("rotary", 2)])
def test_generate_with_the_compiled_step_gives_the_eager_tokens(position, batch):
    """A real torch.compile (inductor and the C++ compiler), forced: greedy tokens as the eager loop's,
    cached and uncached."""
    gpt = tiny_gpt(position)
    prompt = torch.randint(0, 50, (batch, 7))
    with plan.forcing(compile="eager"):
        eager = gpt.generate(prompt, 20, temperature=0)
        assert not gpt.compiled_decode(batch, 27)
    assert torch.equal(gpt.generate(prompt, 20, temperature=0, use_cache=False), eager)
    with plan.forcing(compile="compiled"):
        first = gpt.generate(prompt, 20, temperature=0)
        kept = PLANNED_DECODER._caches[gpt][(batch, 64)]
        again = gpt.generate(prompt, 20, temperature=0)  # the same graph, and the cache kept from the first
    assert PLANNED_DECODER._caches[gpt][(batch, 64)] is kept
    assert gpt.compiled_decode(batch, 27) and not gpt.compiled_decode(batch + 1, 27)
    assert torch.equal(first, eager) and torch.equal(again, eager)
    with plan.forcing(compile="eager"):  # forcing wins over the compiled step already made
        assert torch.equal(gpt.generate(prompt, 20, temperature=0), eager)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["float32", "bfloat16-autocast", "bfloat16"])
def test_on_cuda_the_compiled_step_runs_as_a_cuda_graph_with_the_uncached_logits(precision):
    """On CUDA the compiled step is a CUDA graph (mode reduce-overhead), its caches marked static so
    that cudagraph trees do not skip it. Its logits, teacher-forced along the uncached tokens, are the
    uncached forward's within the precision's tolerance; in float32 greedy tokens are equal too (in
    bf16 a random model's near-ties may round either way)."""
    from torch._dynamo.utils import counters
    gpt = tiny_gpt("rotary").cuda()
    gpt = gpt.to(torch.bfloat16) if precision == "bfloat16" else gpt
    prompt = torch.randint(0, 50, (2, 7), device="cuda")
    counters.clear()
    with torch.autocast("cuda", torch.bfloat16, enabled=precision == "bfloat16-autocast"):
        uncached = gpt.generate(prompt, 20, temperature=0, use_cache=False)
        with plan.forcing(compile="compiled"):
            cached = gpt.generate(prompt, 20, temperature=0)
            again = gpt.generate(prompt, 20, temperature=0)
        assert gpt.compiled_decode(2, 27)
        step = static_step(gpt, PLANNED_DECODER._steps[gpt][(2, 64)])
        with torch.inference_mode():
            cache = gpt.new_cache(2, 64)  # another cache: the graph is recorded again for its addresses
            gpt(uncached[:, :7], cache=cache)
            steps = torch.stack([step(uncached[:, t:t + 1], cache).float() for t in range(7, 26)])
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


def test_the_compile_waits_until_the_steps_taken_would_have_paid_for_it(monkeypatch, tmp_path):
    """Ski rental: with steps timed at 1 s and a compile estimated at 10 s, a request of 7 steps does
    not measure one; the second, 7 steps taken and 7 asked, does, and the compile is measured (faked
    timings favour it) and kept."""
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    monkeypatch.delenv("ANYFORMER_PLAN", raising=False)
    monkeypatch.setattr(compiled_module, "FIRST_DECODE_COMPILE_S", 10.0)
    monkeypatch.setattr(compiled_module, "time", Clock())
    compiles = []
    monkeypatch.setattr(compiled_module, "_compile", lambda f, **kw: compiles.append(kw) or f)
    gpt = tiny_gpt()
    prompt = torch.randint(0, 50, (1, 5))
    with plan.using(plan.Planner(timer=lambda runs, budget_s: _favour("compiled", runs))):
        gpt.generate(prompt, 8, temperature=0)
        assert compiles == [] and not gpt.compiled_decode(1, 13)
        assert PLANNED_DECODER._tally[gpt] == {(1, 64): 7}  # 7 one-token steps in a request
        gpt.generate(prompt, 8, temperature=0)
        assert compiles == [{"dynamic": False, "fullgraph": True}] and gpt.compiled_decode(1, 13)
        record = plan.planner().entry("compile", {**plan_fields(gpt, 1, 64), "pass": "decode"})
        assert record["choice"] == "compiled" and record["timed"] == "decode steps"
        assert plan_fields(gpt, 1, 64)["model"] == "gpt-d2-w32-h4-m128-v50-learned-gelu_tanh"
        gpt.generate(prompt, 8, temperature=0)
        assert len(compiles) == 1  # settled: the step is kept, not planned again
    assert PLANNED_DECODER._tally[gpt] == {(1, 64): 7}  # counted while unsettled: the second request's were compiled


def test_a_request_that_stops_early_counts_the_steps_it_took(monkeypatch, tmp_path):
    """The tally is of steps taken, not asked: a client that reads 3 tokens of 40 and goes away adds 2
    one-token steps; the 37 it asked for and never took are not carried into later requests."""
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path))
    monkeypatch.delenv("ANYFORMER_PLAN", raising=False)
    monkeypatch.setattr(compiled_module, "FIRST_DECODE_COMPILE_S", 1000.0)  # never repaid here
    gpt = tiny_gpt()
    prompt = torch.randint(0, 50, (1, 5))
    with plan.using(plan.Planner(timer=lambda runs, budget_s: _favour("compiled", runs))):
        tokens = gpt.stream(prompt, 40, temperature=0)
        for _ in range(3):
            next(tokens)
        tokens.close()
        assert PLANNED_DECODER._tally[gpt] == {(1, 64): 2}
        gpt.generate(prompt, 5, temperature=0)
    assert PLANNED_DECODER._tally[gpt] == {(1, 64): 6}


@pytest.mark.slow
def test_a_model_with_a_compiled_step_can_still_be_freed():
    gpt = tiny_gpt()
    with plan.forcing(compile="compiled"):
        gpt.generate(torch.randint(0, 50, (1, 5)), 4, temperature=0)
    assert gpt.compiled_decode(1, 9)
    gone = weakref.ref(gpt)
    del gpt
    gc.collect()
    assert gone() is None


def test_where_the_static_step_does_not_apply_generate_runs_eager(monkeypatch):
    """A model not prepared, or on a device without a static step, keeps the eager decoder."""
    with plan.forcing(compile="compiled"):
        out = tiny_gpt(prepared=False).generate(torch.randint(0, 50, (1, 5)), 4, temperature=0)
        monkeypatch.setattr(decode_plan, "STATIC_DEVICES", ("cuda",))
        gpt = tiny_gpt()
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
