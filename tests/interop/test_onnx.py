"""ONNX export: ONNX Runtime gives anyformer's outputs (max abs difference at most 1e-4) for each
exported family, at batch sizes 1 and 3, and for the sequence models at two lengths."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import anyformer as af
from anyformer.interop.onnx import export_onnx, onnx_inputs, onnx_metadata, run_onnx
from tests.conftest import REPO

TOL = 1e-4


def parity(model, path, **shape) -> float:
    worst = 0.0
    g = torch.Generator().manual_seed(1)
    for batch in (1, 3):
        inputs = onnx_inputs(model, batch=batch, generator=g, **shape)
        with torch.no_grad():
            want = model(*inputs.values())
        got = run_onnx(path, inputs)
        assert got.shape == want.shape, (got.shape, want.shape)
        worst = max(worst, float((got - want).abs().max()))
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["patch", "conv"])
def test_vit_matches_onnx_runtime(stem, tmp_path, one_thread):
    overrides = dict(width=32, depth=2, heads=4, mlp_hidden=64, num_classes=10)
    if stem == "patch":
        overrides["patch_size"] = 7
    model = af.ViT.preset("vit-mnist-fast" if stem == "conv" else "vit-mnist", **overrides).eval()
    assert model.config.stem == stem
    path = export_onnx(model, tmp_path / "vit.onnx")
    assert [p.name for p in tmp_path.iterdir()] == ["vit.onnx"]  # written whole, no temporary left
    diff = parity(model, path)
    print(f"vit {stem}: max abs diff {diff:.2e}")
    assert diff <= TOL


@pytest.mark.slow
def test_gpt_full_sequence_matches_onnx_runtime(tmp_path, one_thread):
    model = af.GPT.preset("shakespeare-char", width=32, depth=2, heads=4, context=32, vocab_size=65).eval()
    path = export_onnx(model, tmp_path / "gpt.onnx")
    diffs = [parity(model, path, seq_len=n) for n in (5, 32)]
    print(f"gpt: max abs diff {max(diffs):.2e}")
    assert max(diffs) <= TOL


@pytest.mark.slow
def test_text_encoder_with_padding_matches_onnx_runtime(tmp_path, one_thread):
    from anyformer.models.text_encoder import TextEncoderConfig
    model = af.TextEncoder(TextEncoderConfig(vocab_size=100, max_positions=16, width=32, depth=2, heads=4,
                                             mlp_hidden=64, dropout=0.0, attn_dropout=0.0)).eval()
    path = export_onnx(model, tmp_path / "enc.onnx")
    diffs = [parity(model, path, seq_len=n) for n in (6, 16)]
    print(f"text encoder: max abs diff {max(diffs):.2e}")
    assert max(diffs) <= TOL
    # The mask matters in the graph: padding changes the real tokens' states, as in anyformer.
    ids = torch.randint(0, 100, (1, 8))
    full = run_onnx(path, {"input_ids": ids, "attention_mask": torch.ones(1, 8, dtype=torch.long)})
    half = run_onnx(path, {"input_ids": ids, "attention_mask": torch.tensor([[1] * 4 + [0] * 4])})
    assert (full[0, :4] - half[0, :4]).abs().max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("numbers,categories,task", [(3, [4, 5], "classify"), (2, [], "regress"), (0, [3], "classify")])
def test_a_table_model_with_missing_cells_matches_onnx_runtime(numbers, categories, task, tmp_path, one_thread):
    model = af.models.TableTransformer(af.models.TableConfig(numbers=numbers, categories=categories, task=task,
                                                             outputs=3 if task == "classify" else 1)).eval()
    path = export_onnx(model, tmp_path / "t.onnx")
    inputs = onnx_inputs(model, batch=5, generator=torch.Generator().manual_seed(1))
    if numbers:
        inputs["numbers"][2] = float("nan")  # a row of missing numbers: each column's own token
    got = run_onnx(path, inputs)
    with torch.no_grad():
        want = model(inputs.get("numbers"), inputs.get("categories"))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert list(inputs) == [n for n, k in (("numbers", numbers), ("categories", categories)) if k]


def test_a_family_that_cannot_be_exported_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="ONNX export supports the families vit, gpt, text-encoder, table; got a model "
                                         "of family None \\(Linear\\)"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "x.onnx")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_export_command_writes_a_run_that_onnx_runtime_reproduces(tmp_path, capsys, one_thread):
    from anyformer.cli import main
    model = af.ViT.preset("vit-mnist", width=32, depth=2, heads=4, mlp_hidden=64, patch_size=7).eval()
    data = {"kind": "images", "classes": [str(i) for i in range(10)], "mean": [0.13], "std": [0.31]}
    model.save(tmp_path / "run", extra={"data": data})
    out = tmp_path / "model.onnx"
    assert main(["export", str(tmp_path / "run"), "--format", "onnx", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out == f"wrote {out} (vit, onnx; its metadata holds the signature and the run's data facts)\n"
    assert "Warning" not in printed.err, printed.err  # the exporter's libraries keep their notes to themselves
    assert "torchvision" not in printed.err, printed.err
    meta = onnx_metadata(out)
    assert meta["anyformer.family"] == "vit" and meta["anyformer.signature"].startswith("input images float32 (B, C, H, W)")
    assert json.loads(meta["anyformer.config"])["patch_size"] == 7
    assert {k: json.loads(meta[f"anyformer.data.{k}"]) for k in data} == data
    x = onnx_inputs(model, batch=2)
    with torch.no_grad():
        assert float((run_onnx(out, x) - model(x["images"])).abs().max()) <= TOL
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "no" / "m.onnx")]) == 2
    assert "anyformer: error: cannot write" in capsys.readouterr().err


# `anyformer ARGS` where torchvision is not installed (the onnx extra does not bring it): the import
# system finds no torchvision, as in a fresh environment.
WITHOUT_TORCHVISION = """
import importlib.machinery, importlib.util, sys
find = importlib.machinery.PathFinder.find_spec
def hidden(name, path=None, target=None):
    return None if name.partition(".")[0] == "torchvision" else find(name, path, target)
importlib.machinery.PathFinder.find_spec = staticmethod(hidden)
assert importlib.util.find_spec("torchvision") is None
from anyformer.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_export_without_torchvision_prints_nothing_about_it(tmp_path):
    # torch.onnx's registry logs 'torchvision is not installed. Skipping torchvision::nms' (and three
    # more) on stderr on every export there; the export needs none of torchvision's operators.
    model = af.ViT.preset("vit-mnist", width=32, depth=1, heads=2, mlp_hidden=64, patch_size=7)
    model.save(tmp_path / "run", extra={"data": {"kind": "images", "classes": list("0123456789"),
                                                 "mean": [0.13], "std": [0.31]}})
    out = tmp_path / "model.onnx"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("ANYFORMER_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", WITHOUT_TORCHVISION, "export", str(tmp_path / "run"),
                        "--format", "onnx", "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"wrote {out} (vit, onnx;") and out.is_file()
    assert "torchvision" not in r.stderr, r.stderr
