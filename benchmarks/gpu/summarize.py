"""Merge the parts that benchmarks/gpu/run.sh wrote into one summary.json: each figure the GPU issue
names, by name, beside its target and whether it was met (None where the part failed or was skipped).

    python benchmarks/gpu/summarize.py PARTS_DIR ENV_TXT > summary.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def part(parts: Path, name: str) -> dict[str, Any]:
    f = parts / f"{name}.json"
    return json.loads(f.read_text()) if f.is_file() else {"failed": "not run"}


def tests(parts: Path) -> dict[str, Any]:
    """pytest's count, failures and skips (with their reasons) from its JUnit report."""
    import xml.etree.ElementTree as ET
    report = parts / "junit.xml"
    if not report.is_file():
        return {"failed": "no test report: " + part(parts, "tests").get("failed", "pytest did not finish")}
    cases = list(ET.parse(report).getroot().iter("testcase"))
    name = lambda c: f"{c.get('classname')}::{c.get('name')}"
    return {"tests": len(cases),
            "passed": sum(c.find("failure") is None and c.find("error") is None and c.find("skipped") is None
                          for c in cases),
            "failed": [name(c) for c in cases if c.find("failure") is not None or c.find("error") is not None],
            "skipped": [f"{name(c)}: {c.find('skipped').get('message', '')}" for c in cases
                        if c.find("skipped") is not None]}


def ratio(training: dict, peer: str) -> float | None:
    """How many times faster anyformer's step is than `peer`'s (> 1: anyformer is faster)."""
    mine, theirs = training.get("anyformer"), training.get(peer)
    return None if not (mine and theirs) else theirs["ms_per_step"] / mine["ms_per_step"]


def at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


def at_most(value: float | None, target: float) -> bool | None:
    return None if value is None else value <= target


def summarize(parts: Path, env: str) -> dict[str, Any]:
    gpt2, vit, char = part(parts, "gpt2"), part(parts, "vit"), part(parts, "char")
    gen, default, sh, mg = (part(parts, n) for n in ("generate", "train_default", "shakespeare", "mnist_gen"))
    g_train, v_train, c_train = (p.get("training", {}) for p in (gpt2, vit, char))
    v_infer = vit.get("inference_images_per_s", {})
    mfu = (g_train.get("anyformer") or {}).get("mfu_spec")
    infer_ratio = (v_infer["anyformer"] / v_infer["timm"]) if {"anyformer", "timm"} <= set(v_infer) else None
    figures = {
        "gpt2_train_tokens_per_s": {k: v["items_per_s"] for k, v in g_train.items()},
        "gpt2_train_vs_hf": ratio(g_train, "HF GPT-2 (sdpa)"),
        "gpt2_train_vs_nanogpt_ref": ratio(g_train, "nanoGPT-ref"),
        "gpt2_train_mfu": mfu,
        "vit_b16_train_images_per_s": {k: v["items_per_s"] for k, v in v_train.items()},
        "vit_b16_train_vs_timm": ratio(v_train, "timm"),
        "vit_b16_infer_images_per_s": v_infer,
        "vit_b16_infer_vs_timm": infer_ratio,
        "char_train_vs_nanogpt_ref": ratio(c_train, "nanoGPT-ref"),
        "shakespeare_char_val_loss": sh.get("val_loss"),
        "shakespeare_char_train_seconds": sh.get("train_seconds"),
        "default_recipe_test_accuracy": default.get("test_accuracy"),
        "default_recipe_train_seconds": default.get("train_seconds"),
        "default_recipe_wall_seconds": default.get("wall_seconds"),
        "generate_ms_per_token": gen.get("ms_per_token"),
        "generate_vs_hf": gen.get("speedup_vs_hf"),
        "mnist_gen_class_consistency": mg.get("class_consistency"),
        "mnist_gen_train_seconds": mg.get("train_seconds"),
    }
    f = figures
    fast_default = None if f["default_recipe_train_seconds"] is None else f["default_recipe_train_seconds"] <= 15
    targets = {
        "gpt2 >= 1.1x HF": at_least(f["gpt2_train_vs_hf"], 1.1),
        "gpt2 >= 1.0x nanoGPT-ref": at_least(f["gpt2_train_vs_nanogpt_ref"], 1.0),
        "gpt2 MFU >= 45%": at_least(f["gpt2_train_mfu"], 0.45),
        "vit-b/16 training >= 1.1x timm": at_least(f["vit_b16_train_vs_timm"], 1.1),
        "vit-b/16 inference >= 1.1x timm": at_least(f["vit_b16_infer_vs_timm"], 1.1),
        "char val loss <= 1.47 in 60 s": at_most(f["shakespeare_char_val_loss"], 1.47),
        "char >= 1.2x nanoGPT-ref": at_least(f["char_train_vs_nanogpt_ref"], 1.2),
        "default recipe >= 99.0%": at_least(f["default_recipe_test_accuracy"], 0.99),
        "default recipe within 15 s of training": fast_default,
        "generate >= 3x HF": at_least(f["generate_vs_hf"], 3.0),
        "generate <= 2 ms a token": at_most(f["generate_ms_per_token"], 2.0),
        "mnist-gen consistency >= 97%": at_least(f["mnist_gen_class_consistency"], 0.97),
        "mnist-gen within 60 s": at_most(f["mnist_gen_train_seconds"], 60.5),
    }
    return {"environment": env.strip().splitlines(), "tests": tests(parts), "figures": figures,
            "targets": targets, "parts": {n: part(parts, n) for n in
                                          ("train_default", "gpt2", "generate", "shakespeare", "vit", "char", "mnist_gen")}}


if __name__ == "__main__":
    print(json.dumps(summarize(Path(sys.argv[1]), Path(sys.argv[2]).read_text()), indent=2, default=str))
