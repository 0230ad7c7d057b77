"""`anyformer doctor`: the machine, the cache file, the plan in force."""
import pytest
import torch

from anyformer import doctor, plan
from anyformer.plan import host


def test_report_names_the_cpu_and_the_cache_file(planner_with, plan_cache):
    p = planner_with({})
    text = doctor.report(p)
    assert host.cpu_info()["model"] in text
    assert str(plan_cache) in text and "not written yet" in text
    assert torch.__version__ in text and f"threads        {torch.get_num_threads()}" in text
    assert "native bf16    " + ("yes" if host.native_bf16() else "no") in text
    assert "measured       nothing yet" in text


@pytest.mark.skipif(plan.onednn_linear_op() is None, reason="this torch build has no oneDNN: nothing to measure")
def test_report_shows_each_decision_with_its_times_and_choice(planner_with):
    p = planner_with({"stock": 2e-3, "onednn": 1e-3})
    plan.linear_kernel(100, 16, 32, torch.float32, True)
    text = doctor.report(p)
    assert "linear rows=128 in=16 out=32 dtype=float32 training=1" in text
    assert "stock 2 ms   onednn 1 ms*   -> onednn" in text
    assert "planning time" in text and "(exists, 1 decisions)" in text and "(planned in " in text


def test_report_shows_what_is_forced(planner_with, monkeypatch, capsys):
    monkeypatch.setenv("ANYFORMER_PLAN", "stock,attention=explicit")
    text = doctor.report(planner_with({}))
    assert ("adamw=foreach, amp=none, attention=explicit, compile=eager, decode=stock, gelu=stock, linear=stock, "
            "linears=stock, sdpa=default (from ANYFORMER_PLAN)") in text
    monkeypatch.setenv("ANYFORMER_PLAN", "linear=mkl")
    assert doctor.main([]) == 2  # still prints the report, with what was wrong
    assert "forced         INVALID: ANYFORMER_PLAN: unknown choice 'mkl' for linear" in capsys.readouterr().out


def test_main_measure_populates_the_plan_and_clear_removes_it(planner_with, plan_cache, capsys):
    planner_with({"stock": 1.0, "onednn": 0.5, "fused": 1.0, "explicit": 2.0, "none": 1.0, "bf16": 2.0,
                  "foreach": 1.0})
    assert doctor.main(["--measure", "--model", "vit-mnist-fast", "--batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "planned: amp width=64 hidden=128 rows=200 -> none" in out
    assert "planned: attention B=4 H=4 N=50 D_h=16" in out
    assert "linear rows=256 in=64 out=192 dtype=float32 training=1" in out  # 4 x 50 tokens, bucketed
    assert len(list(plan_cache.glob("*.json"))) == 1
    assert doctor.main(["--clear"]) == 0
    assert "removed" in capsys.readouterr().out and not list(plan_cache.glob("*.json"))
    with pytest.raises(ValueError, match="expected one of"):
        doctor.measure_default("resnet50", 4)


@pytest.mark.slow
def test_measure_a_language_model_from_one_block(planner_with):
    import anyformer as af
    planner_with({"stock": 1.0, "onednn": 1.0, "fused": 1.0, "explicit": 2.0, "none": 1.0, "bf16": 2.0,
                  "foreach": 1.0})
    lines = doctor.measure_default("shakespeare-char", 2)
    full = af.GPT.preset("shakespeare-char")
    assert any(line.startswith("attention B=2 H=6 N=256 D_h=64") and "causal=True" in line for line in lines)
    assert "linear rows=512 in=384 out=1536 training=True -> stock" in lines  # 2 x 256 tokens, MLP in
    assert lines[-1] == f"adamw {len(list(full.parameters()))} tensors, {full.num_params():,} parameters -> foreach"


def test_the_cli_can_build_doctors_parser_before_torch_loads():
    """The CLI sets thread and allocator options before torch is imported (anyformer/runtime.py)."""
    import subprocess
    import sys
    code = ("import argparse, sys, anyformer.doctor as d; p = argparse.ArgumentParser(); d.add_arguments(p); "
            "a = p.parse_args(['--measure', '--batch', '8']); print(a.measure, a.batch, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "8", "False"]


def test_doctor_shows_the_plan_a_run_trained_with(tmp_path, capsys):
    import json
    from anyformer import doctor
    (tmp_path / "plan.json").write_text(json.dumps({"format": 1, "compile": "eager", "linears": "mixed",
                                                    "answers": {"adamw device=cpu": "fused"}}))
    assert doctor.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"Run plan       {tmp_path}: compile eager, linears mixed, 1 kernel choices" in out
    assert "  fused     adamw device=cpu" in out
