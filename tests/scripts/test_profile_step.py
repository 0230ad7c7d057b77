"""benchmarks/profile_step.py: operators put in the groups their names say, and a real `anyformer train` run profiled
in this process, its groups adding up to the operators' time."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from profile_step import OTHER, group_of, grouped, report, run  # noqa: E402


@pytest.mark.parametrize("name, group", [
    ("aten::mm", "matrix products"), ("aten::addmm", "matrix products"), ("aten::bmm", "matrix products"),
    ("aten::add", "element-wise and reductions"), ("aten::add_", "element-wise and reductions"),
    ("aten::_log_softmax", "the loss"), ("aten::nll_loss_forward", "the loss"),
    ("aten::_softmax", "attention"), ("_EagerAttentionBackward", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::gelu_backward", "GELU and other activations"), ("aten::native_layer_norm", "norms"),
    ("aten::_fused_adamw_", "optimizer and gradient clip"), ("Optimizer.step#AdamW.step", "optimizer and gradient clip"),
    ("aten::linalg_vector_norm", "optimizer and gradient clip"), ("aten::copy_", "copies, fills and joins"),
    ("aten::empty_strided", "copies, fills and joins"), ("aten::convolution_backward", "convolutions"),
    ("aten::view", OTHER), ("autograd::engine::evaluate_function: MmBackward0", OTHER),
])
def test_an_operator_goes_to_the_group_its_name_says(name, group):
    assert group_of(name) == group


def test_a_real_run_is_profiled_in_this_process_and_its_groups_add_up(tmp_path):
    text = tmp_path / "words.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    bare, profiled, events = run(["shakespeare-char", "--data", str(text), "--set", "width=32", "--set", "depth=1",
                                  "--set", "heads=2", "--set", "context=16", "--seq-len", "16", "--batch-size", "4",
                                  "--max-steps", "7", "--eval-every", "7", "--eval-iters", "1", "--plan", "stock",
                                  "--no-progress", "--no-plots", "--out", str(tmp_path / "run")], skip=1, steps=3)
    assert 0 < bare and 0 < profiled
    groups = grouped(events)
    assert groups["matrix products"] > 0 and groups["optimizer and gradient clip"] > 0
    assert sum(groups.values()) == pytest.approx(sum(e.self_cpu_time_total for e in events) / 1e6)
    body = report(bare, profiled, 3, events)
    assert "| matrix products |" in body and "`aten::mm`" in body
    with pytest.raises(SystemExit, match="raise its --max-steps"):
        run(["shakespeare-char", "--data", str(text), "--set", "width=32", "--set", "depth=1", "--set", "heads=2",
             "--set", "context=16", "--seq-len", "16", "--batch-size", "4", "--max-steps", "4", "--plan", "stock",
             "--no-progress", "--no-plots", "--out", str(tmp_path / "short")], skip=1, steps=3)
