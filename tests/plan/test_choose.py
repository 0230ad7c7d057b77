"""The decision helpers the floors call: each with a faked timing table (the real candidates still
run once and are checked against stock), and each once with real timing (a smoke run)."""
import time

import pytest
import torch

from anyformer import plan
from anyformer.plan import Planner, native

needs_onednn = pytest.mark.skipif(plan.onednn_linear_op() is None, reason="this torch build has no oneDNN")

# the real smoke runs: small shapes, a short budget
SMOKE_BUDGET_S = 0.05


def _entry(p, prefix):
    entries = p.snapshot()["entries"]
    (key,) = [k for k in entries if k.startswith(prefix)]
    return entries[key]


@needs_onednn
@pytest.mark.parametrize("training", [False, True])
def test_linear_kernel_follows_the_timing_table(planner_with, training):
    p = planner_with({"stock": 1.0, "onednn": 0.5, "mixed": 0.7})
    assert plan.linear_kernel(300, 24, 40, torch.float32, training) == "onednn"
    entry = _entry(p, "linear rows=512 in=24 out=40 dtype=float32")
    assert entry["dropped"] == {} and entry["error_vs_stock"]["onednn"] < 1e-5  # the real kernels agree
    q = planner_with({"stock": 1.0, "onednn": 2.0, "mixed": 2.0})
    assert plan.linear_kernel(300, 24, 48, torch.float32, training) == "stock"
    # "mixed" (oneDNN forward and input gradient, BLAS weight gradient) differs in the backward alone
    assert q.timer.calls == [["stock", "onednn", "mixed"] if training else ["stock", "onednn"]]
    if training:
        r = planner_with({"stock": 1.0, "onednn": 0.9, "mixed": 0.5})
        assert plan.linear_kernel(300, 24, 56, torch.float32, True) == "mixed"
        assert _entry(r, "linear rows=512 in=24 out=56 dtype=float32")["error_vs_stock"]["mixed"] < 1e-5


@needs_onednn
def test_a_record_without_a_newer_candidate_is_measured_again(planner_with):
    """A plan file written before "mixed" existed judged stock and onednn only: measured again."""
    p = planner_with({"stock": 1.0, "onednn": 2.0})
    p.decide("linear", {"rows": 512, "in": 24, "out": 64, "dtype": "float32", "training": True},
             lambda: {"stock": lambda: torch.ones(1), "onednn": lambda: torch.ones(1)}, available=("stock", "onednn"))
    q = planner_with({"stock": 1.0, "onednn": 2.0, "mixed": 0.5})
    assert plan.linear_kernel(300, 24, 64, torch.float32, True) == "mixed"
    assert q.timer.calls == [["stock", "onednn", "mixed"]]


@pytest.mark.slow
def test_linear_kernel_buckets_rows_and_caps_the_timed_size(planner_with):
    p = planner_with({"stock": 1.0, "onednn": 0.5})
    plan.linear_kernel(300, 16, 16, torch.float32, False)
    plan.linear_kernel(400, 16, 16, torch.float32, False)  # same bucket (512): no second measurement
    plan.linear_kernel(100_000, 2048, 2048, torch.float32, True)
    plan.linear_kernel(100_000, 2048, 2048, torch.float32, False)
    assert len(p.measured) == 3
    # Training: ~16 GFLOP a call (the weight gradient sums over the rows, so fewer rows are another
    # product), not 4096 rows' 100 GFLOP; a pass without gradients ~1 GFLOP.
    assert _entry(p, "linear rows=4096 in=2048 out=2048 dtype=float32 training=1")["measured_with"] == {"rows": 512}
    assert _entry(p, "linear rows=4096 in=2048 out=2048 dtype=float32 training=0")["measured_with"] == {"rows": 64}


def test_linear_kernel_without_a_candidate_measures_nothing(planner_with):
    p = planner_with({})
    assert plan.linear_kernel(64, 8, 8, torch.float64, True) == "stock"
    assert p.measured == [] and p.timer.calls == []
    with pytest.raises(ValueError, match="linear_kernel: in_features must be a positive int, got 0"):
        plan.linear_kernel(64, 0, 8, torch.float32, True)
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype"):
        plan.linear_kernel(64, 8, 8, "float32", True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal, q_len, masked", [(False, 20, False), (True, 20, False), (True, 1, False),
                                                   (False, 20, True)])
def test_attention_kernel_follows_the_timing_table(planner_with, dtype, causal, q_len, masked):
    p = planner_with({"fused": 1.0, "explicit": 0.5})
    assert plan.attention_kernel(3, 2, q_len, 20, 8, dtype, causal, True, masked=masked) == "explicit"
    entry = _entry(p, "attention")
    assert entry["dropped"] == {}, entry["dropped"]  # SDPA and the explicit maths agree, gradients included
    q = planner_with({"fused": 1.0, "explicit": 0.95})
    assert plan.attention_kernel(3, 2, q_len, 20, 8, dtype, causal, False, masked=masked) == "fused"


def test_attention_kernel_keeps_long_sequences_cheap(planner_with):
    p = planner_with({"fused": 1.0, "explicit": 0.5})
    plan.attention_kernel(32, 16, 5000, 5000, 64, torch.float32, True, True)
    entry = _entry(p, "attention batch=32 heads=16 q=2048 k=2048")
    assert entry["measured_with"] == {"batch": 1, "heads": 1}


def test_attention_kernel_times_the_lengths_asked(planner_with):
    """A ViT's 50 tokens are timed at 50, not at a rounded 64 (where the answer differed), and keyed
    by the next multiple of 8; a decode step's growing cache (one query) by powers of two."""
    p = planner_with({"fused": 1.0, "explicit": 0.5})
    plan.attention_kernel(4, 2, 50, 50, 8, torch.float32, False, False)
    plan.attention_kernel(4, 2, 52, 52, 8, torch.float32, False, False)  # same key (56): measured once
    entry = _entry(p, "attention batch=4 heads=2 q=56 k=56")
    assert entry["measured_with"] == {"q": 50, "k": 50}
    plan.attention_kernel(4, 2, 1, 50, 8, torch.float32, True, False)
    plan.attention_kernel(4, 2, 1, 60, 8, torch.float32, True, False)  # same power-of-two bucket (64)
    assert _entry(p, "attention batch=4 heads=2 q=1 k=64").get("measured_with") is None
    plan.attention_kernel(1, 2, 257, 257, 8, torch.float32, True, False)
    plan.attention_kernel(1, 2, 270, 270, 8, torch.float32, True, False)  # past 128 tokens: multiples of 32
    assert _entry(p, "attention batch=1 heads=2 q=288 k=288")["measured_with"] == {"q": 257, "k": 257}
    assert len(p.measured) == 3


def test_attention_kernel_keys_the_layout_it_is_told(planner_with):
    """A layer says where q, k and v come from; the memo and the stored record agree on it."""
    p = planner_with({"fused": 1.0, "explicit": 0.5})
    plan.attention_kernel(4, 2, 50, 50, 8, torch.float32, False, False)
    plan.attention_kernel(4, 2, 50, 52, 8, torch.float32, False, False)  # same key: packed views, q=k=56
    plan.attention_kernel(4, 2, 50, 52, 8, torch.float32, False, False, layout="cache")
    assert _entry(p, "attention batch=4 heads=2 q=56 k=56 head_dim=8 dtype=float32 causal=0 training=0 masked=0 "
                     "layout=packed")["measured_with"] == {"q": 50, "k": 50}
    assert len(p.measured) == 2 and p.measured[1].endswith("layout=cache whole=0")
    with pytest.raises(ValueError, match="layout must be one of"):
        plan.attention_kernel(4, 2, 50, 52, 8, torch.float32, False, False, layout="strided")
    with pytest.raises(ValueError, match="q_len must be a positive int, got 50.0"):
        plan.attention_kernel(4, 2, 50.0, 50, 8, torch.float32, False, False)


def test_amp_dtype_asks_bf16_for_a_clear_win(planner_with):
    p = planner_with({"none": 1.0, "bf16": 0.75, "stock": 1.0, "onednn": 1.0})
    assert plan.amp_dtype("cpu", width=32, hidden=64, rows=100) == "bf16"
    entry = _entry(p, "amp")
    assert entry["dropped"] == {} and 1e-4 < entry["error_vs_stock"]["bf16"] < 5e-2  # bf16: close, not equal
    planner_with({"none": 1.0, "bf16": 0.85, "stock": 1.0, "onednn": 1.0})  # 15%: under amp's 20% margin
    assert plan.amp_dtype("cpu", width=48, hidden=64, rows=100) == "none"
    assert plan.amp_dtype("meta") == "none"


def test_adamw_impl_follows_the_timing_table(planner_with):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    p = planner_with({"foreach": 1.0, "fused": 0.5})
    assert plan.adamw_impl(model.parameters()) == "fused"
    entry = _entry(p, "adamw device=cpu dtypes=float32 tensors=4 numel=256")
    assert entry["dropped"] == {} and entry["error_vs_stock"]["fused"] < 1e-6
    q = planner_with({"foreach": 1.0, "fused": 0.95})
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 4))
    groups = [{"params": list(model[0].parameters())}, {"params": list(model[1].parameters())}]
    assert plan.adamw_impl(groups) == "foreach"
    assert q.measured == ["adamw device=cpu dtypes=float32 tensors=4 numel=512"]
    assert plan.adamw_impl([]) == "foreach"
    with pytest.raises(ValueError, match="adamw_impl: expected tensors or param groups, got str"):
        plan.adamw_impl(["w"])


def test_planning_leaves_the_global_rng_alone(planner_with):
    planner_with({"stock": 1.0, "onednn": 0.5, "fused": 1.0, "explicit": 0.5})
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    plan.linear_kernel(64, 8, 8, torch.float32, True)
    plan.attention_kernel(2, 2, 8, 8, 4, torch.float32, False, True)
    assert torch.equal(torch.rand(3), expected)


def test_planning_inside_inference_mode_and_autocast(planner_with):
    """The floors ask from inside a forward pass: the training candidates still get gradients."""
    p = planner_with({"stock": 1.0, "onednn": 0.5, "mixed": 0.6, "fused": 1.0, "explicit": 0.5})
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        plan.linear_kernel(64, 8, 8, torch.float32, True)
        plan.attention_kernel(2, 2, 8, 8, 4, torch.float32, False, True)
    assert p.notes == [] and all(e["dropped"] == {} for e in p.snapshot()["entries"].values())


def test_real_smoke_run_of_every_helper(plan_cache):
    """Real timing, small shapes: every helper answers with one of its choices, no candidate is
    dropped (each agrees with stock on this machine) and each decision stays well under a second."""
    p = Planner(budget_s=SMOKE_BUDGET_S)
    native.library()  # built once per machine (about a second), not per decision
    with plan.using(p):
        asks = [
            (lambda: plan.linear_kernel(256, 64, 128, torch.float32, True), plan.decision("linear")),
            (lambda: plan.attention_kernel(4, 2, 32, 32, 16, torch.float32, True, True), plan.decision("attention")),
            (lambda: plan.amp_dtype("cpu", width=32, hidden=64, rows=128), plan.decision("amp")),
            (lambda: plan.adamw_impl(torch.nn.Linear(32, 32).parameters()), plan.decision("adamw")),
        ]
        for ask, d in asks:
            start = time.perf_counter()
            assert ask() in d.choices
            elapsed = time.perf_counter() - start
            assert elapsed < 5.0, (d.name, elapsed)  # ~0.1-0.3 s when quiet; a shared machine can be 10x slower
    entries = p.snapshot()["entries"]
    assert {e["decision"] for e in entries.values()} == {"linear", "attention", "amp", "adamw"}
    for key, e in entries.items():
        assert e["dropped"] == {}, (key, e["dropped"])
        expected = set(plan.decision(e["decision"]).choices)
        if e["decision"] == "linear":  # a training call of 256 rows: the one-pass kernel is for a few rows only
            expected = {"stock", "onednn", "mixed"} if plan.onednn_linear_op() else {"stock"}
        if e["decision"] == "attention" and native.library() is None:  # no compiler here: not offered
            expected.discard("native")
        assert set(e["times"]) == expected, key
    assert next(plan_cache.glob("*.json")).stat().st_size > 0


@needs_onednn
def test_forcing_mixed_means_onednn_without_gradients(planner_with, monkeypatch):
    monkeypatch.setenv("ANYFORMER_PLAN", "linear=mixed")
    planner_with({})
    assert plan.linear_kernel(64, 8, 8, torch.float32, False) == "onednn"
    assert plan.linear_kernel(64, 8, 8, torch.float32, True) == "mixed"
    layer = plan.prepare(torch.nn.Linear(8, 4), torch.randn(3, 8, requires_grad=True))
    assert (layer.kernel, layer.training_kernel) == ("onednn", "mixed")
    x = torch.randn(3, 8, requires_grad=True)
    layer(x).sum().backward()  # the mixed backward runs
    with torch.no_grad():
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
