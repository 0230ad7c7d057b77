"""SDPA's backend (the CUDA attention decision), checked on the CPU: its candidates run anywhere
(the CPU has the flash and math backends; memory-efficient and cuDNN refuse and are dropped with
their reason), the timing table decides among those that agree, and the chosen backend reaches a
torch.compile'd layer. tests/gpu asks it on a GPU, through the layers."""
import pytest
import torch
import torch.nn.functional as F

from anyformer import plan
from anyformer.nn import MultiHeadAttention


def _entry(p):
    (entry,) = [e for e in p.snapshot()["entries"].values() if e["decision"] == "sdpa"]
    return entry


@pytest.mark.parametrize("training", [False, True])
def test_the_timing_table_picks_among_the_backends_that_run(planner_with, training):
    p = planner_with({"default": 1.0, "flash": 0.9, "efficient": 0.1, "cudnn": 0.1, "math": 0.5})
    choice = plan.sdpa_backend(2, 3, 24, 24, 8, torch.float32, True, training, device="cpu")
    assert choice == "math"
    entry = _entry(p)
    # The CPU has no memory-efficient or cuDNN kernel: each raised in the numerics check, and its
    # (fake) time never counted.
    assert set(entry["dropped"]) == {"efficient", "cudnn"}, entry["dropped"]
    assert all(why.startswith("raised") for why in entry["dropped"].values())
    assert set(entry["times"]) == {"default", "flash", "math"}
    assert entry["fields"]["device"] == "cpu" and entry["fields"]["training"] is training


@pytest.mark.parametrize("causal", [False, True])
def test_a_padding_mask_is_timed_with_the_backends_that_take_it(planner_with, causal):
    p = planner_with({"default": 1.0, "flash": 0.95, "efficient": 0.1, "cudnn": 0.1, "math": 0.5})
    assert plan.sdpa_backend(2, 2, 16, 16, 8, torch.float32, causal, True, masked=True, device="cpu") == "math"
    entry = _entry(p)
    assert set(entry["times"]) == {"default", "flash", "math"}  # all three agree under the mask
    assert entry["fields"]["masked"] is True


def test_forced_and_replayed_like_every_decision(planner_with):
    p = planner_with({"default": 1.0, "math": 0.1})
    with plan.forcing(sdpa="flash"):
        assert plan.sdpa_backend(1, 1, 8, 8, 8, torch.float32, False, False, device="cpu") == "flash"
    with p.recording({"sdpa device=cpu batch=1 heads=1 q=8 k=8 head_dim=8 dtype=float32 causal=0 training=0 "
                      "masked=0": "flash"}) as answers:
        assert plan.sdpa_backend(1, 1, 8, 8, 8, torch.float32, False, False, device="cpu") == "flash"
    assert list(answers.values()) == ["flash"]
    assert p.measured == []  # forced, then replayed: nothing timed


def test_the_context_picks_the_backend_and_compiles_whole():
    """`sdpa_context` is what a CUDA layer runs its SDPA call under; torch.compile traces it in one
    graph (fullgraph), so a compiled layer follows the measured backend too."""
    q = torch.randn(1, 2, 8, 4)
    with plan.sdpa_context("efficient"), pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q, q)  # no memory-efficient kernel on the CPU: it refuses

    def attend(x):
        with plan.sdpa_context("math"):
            return F.scaled_dot_product_attention(x, x, x, is_causal=True)
    compiled = torch.compile(attend, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(q), F.scaled_dot_product_attention(q, q, q, is_causal=True))


def test_a_cpu_layer_asks_the_attention_decision_not_this_one(planner_with):
    p = planner_with({"fused": 1.0, "explicit": 2.0, "native": 3.0})
    layer = MultiHeadAttention(16, 2).eval()
    with torch.no_grad():
        plan.prepare(layer, torch.randn(2, 5, 16))
    assert {e["decision"] for e in p.snapshot()["entries"].values()} == {"attention"}
