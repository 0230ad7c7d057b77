"""Hugging Face transformers <-> anyformer: ViT, GPT-2 and BERT give equal outputs, round trips reload
strictly, greedy generation matches `generate`, mismatched weights are named, imports stay lazy."""
import subprocess
import sys

import pytest
import torch

import anyformer as af
from anyformer.interop import hf, hf_bert, require_transformers

from . import PRIVATE_KERNELS, assert_close, block_outputs, private_kernel, randomize, state_dicts_equal

transformers = require_transformers()  # a missing transformers fails here: CI installs it


def gen(seed):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------- ViT

VIT_SHAPES = {
    # non-square images; the pooler's width differs from the model's
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 image_size=(16, 24), patch_size=8, num_labels=5, pooler_output_size=24),
    "vit-ti-width": dict(hidden_size=192, num_hidden_layers=2, num_attention_heads=3, intermediate_size=768,
                         image_size=224, patch_size=16, num_labels=10),
}
VIT_CLASSES = ("ViTModel", "ViTForImageClassification")


@pytest.fixture(scope="module")
def vit_refs():
    return {(shape, cls): randomize(getattr(transformers, cls)(transformers.ViTConfig(**kw)))
            for shape, kw in VIT_SHAPES.items() for cls in VIT_CLASSES}


def vit_images(ref, seed=1):
    size = ref.config.image_size
    h, w = (size, size) if isinstance(size, int) else size
    return torch.randn(2, 3, h, w, generator=gen(seed))


def check_vit_outputs(ref, vit, cls: str, label: str) -> None:
    """Every layer's hidden states and the outputs of `vit` equal those of the HF model `ref` (`cls`)."""
    x = vit_images(ref)
    ours_h, hooks = block_outputs(vit.backbone.blocks)
    with torch.no_grad():
        out = ref(x, output_hidden_states=True)
        feats = vit.forward_features(x)
        logits = vit.head(feats)
    for h in hooks:
        h.remove()
    ref_hidden = out.hidden_states[1:]  # embeddings first, then each layer's output
    assert len(ref_hidden) == len(ours_h) == vit.config.depth
    for i, (a, b) in enumerate(zip(ours_h, ref_hidden)):
        assert_close(f"{label} layer {i} hidden states", a, b)
    if cls == "ViTModel":
        assert_close(f"{label} last_hidden_state", feats, out.last_hidden_state)
        assert_close(f"{label} pooler_output", logits, out.pooler_output)
    else:
        assert_close(f"{label} logits", logits, out.logits)
        with torch.no_grad():  # the plain forward: its last block computes the class token only
            assert_close(f"{label} forward logits", vit(x), out.logits)


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["fused", "explicit"])
@pytest.mark.parametrize("cls", VIT_CLASSES)
@pytest.mark.parametrize("shape", list(VIT_SHAPES))
def test_vit_outputs_equal_hf(vit_refs, shape, cls, impl):
    ref = vit_refs[shape, cls]
    check_vit_outputs(ref, af.ViT.from_hf(ref, attn_impl=impl), cls, f"HF {cls} {shape} {impl}")


@pytest.mark.slow
@pytest.mark.parametrize("forced", PRIVATE_KERNELS)
def test_vit_outputs_equal_hf_with_each_private_kernel(vit_refs, forced):
    """The kernels the plan may choose, forced in turn (heads of 64: a size the native attention takes)."""
    ref = vit_refs["vit-ti-width", "ViTForImageClassification"]
    vit = af.ViT.from_hf(ref)
    with private_kernel(vit, forced):
        check_vit_outputs(ref, vit, "ViTForImageClassification", f"HF ViT vit-ti-width {forced}")


@pytest.mark.parametrize("cls", VIT_CLASSES)
@pytest.mark.parametrize("shape", list(VIT_SHAPES))
def test_vit_round_trip_reloads_strictly(vit_refs, shape, cls):
    ref = vit_refs[shape, cls]
    vit = af.ViT.from_hf(ref)
    back = vit.to_hf(cls)
    assert type(back) is type(ref) and state_dicts_equal(back.state_dict(), ref.state_dict())
    # `back` was loaded with strict=True; a model the user built loads the state dict alike.
    fresh = type(ref)(ref.config).eval() if shape == "tiny" else back
    fresh.load_state_dict(hf.vit_to_hf_state_dict(vit, cls), strict=True)
    x = vit_images(ref)
    with torch.no_grad():
        key = "logits" if cls == "ViTForImageClassification" else "pooler_output"
        want = getattr(ref(x), key)
        assert torch.equal(getattr(fresh(x), key), want) and torch.equal(getattr(back(x), key), want)


def test_vit_model_without_pooler():
    ref = randomize(transformers.ViTModel(transformers.ViTConfig(**VIT_SHAPES["tiny"]), add_pooling_layer=False))
    vit = af.ViT.from_hf(ref)
    x = vit_images(ref)
    with torch.no_grad():
        out = ref(x)
        assert_close("HF ViTModel (no pooler) class token", vit(x), out.last_hidden_state[:, 0])
    vit.to_hf("ViTModel").load_state_dict(ref.state_dict(), strict=True)


def test_from_hf_takes_config_overrides():
    vit = af.ViT.from_hf(transformers.ViTModel(transformers.ViTConfig(**VIT_SHAPES["tiny"])), attn_impl="explicit")
    assert vit.config.attn_impl == "explicit"
    gpt = af.GPT.from_hf(transformers.GPT2LMHeadModel(gpt2_config(**GPT_SHAPES["tiny"])), attn_impl="explicit")
    assert gpt.config.attn_impl == "explicit"


def test_vit_preset_exports_to_hf():
    vit = af.ViT.from_config(dict(image_size=16, patch_size=8, in_chans=3, num_classes=3, width=32, depth=1,
                                  heads=2, mlp_hidden=64, norm_eps=1e-12)).eval()
    ref = vit.to_hf()
    x = torch.randn(2, 3, 16, 16, generator=gen(2))
    with torch.no_grad():
        assert_close("anyformer ViT -> HF logits", vit(x), ref(x).logits)
    with pytest.raises(ValueError, match="pool='mean'"):
        af.ViT.from_config({**vit.config.__dict__, "pool": "mean"}).to_hf()


# --------------------------------------------------------------------------------------------- GPT-2

GPT_SHAPES = {
    "tiny": dict(n_embd=32, n_layer=2, n_head=4, n_positions=32, vocab_size=61),
    "gpt2-width-2-layer": dict(n_embd=768, n_layer=2, n_head=12, n_positions=1024, vocab_size=50257),
}


def gpt2_config(**kw):
    eos = kw["vocab_size"] - 1  # special ids inside the vocabulary (transformers warns otherwise)
    return transformers.GPT2Config(**kw, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)


@pytest.fixture(scope="module")
def gpt_refs():
    return {shape: randomize(transformers.GPT2LMHeadModel(gpt2_config(**kw)), seed=i)
            for i, (shape, kw) in enumerate(GPT_SHAPES.items())}


def tokens(ref, batch=2, length=12, seed=3):
    return torch.randint(0, ref.config.vocab_size, (batch, length), generator=gen(seed))


def check_gpt_outputs(ref, gpt, label: str) -> None:
    """Every layer's hidden states and the logits of `gpt` equal those of the HF GPT-2 `ref`."""
    idx = tokens(ref)
    ours_h, hooks = block_outputs(gpt.backbone.blocks)
    with torch.no_grad():
        out = ref(idx, output_hidden_states=True)
        logits = gpt(idx)
    for h in hooks:
        h.remove()
    # GPT-2's last hidden state comes after ln_f; the others are the blocks' outputs.
    ref_hidden = out.hidden_states[1:]
    for i, (a, b) in enumerate(zip(ours_h[:-1], ref_hidden[:-1])):
        assert_close(f"{label} layer {i} hidden states", a, b)
    assert_close(f"{label} final hidden states", gpt.backbone.norm(ours_h[-1]), ref_hidden[-1])
    assert_close(f"{label} logits", logits, out.logits)


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["fused", "explicit"])
@pytest.mark.parametrize("shape", list(GPT_SHAPES))
def test_gpt_outputs_equal_hf(gpt_refs, shape, impl):
    gpt = af.GPT.from_hf(gpt_refs[shape], attn_impl=impl)
    assert gpt.lm_head.weight is gpt.tok_embed.weight  # still tied
    check_gpt_outputs(gpt_refs[shape], gpt, f"HF GPT-2 {shape} {impl}")


@pytest.mark.parametrize("forced", PRIVATE_KERNELS)
@pytest.mark.slow
def test_gpt_outputs_equal_hf_with_each_private_kernel(gpt_refs, forced):
    """The kernels the plan may choose, forced in turn (GPT-2's heads of 64, causal attention)."""
    gpt = af.GPT.from_hf(gpt_refs["gpt2-width-2-layer"])
    with private_kernel(gpt, forced):
        check_gpt_outputs(gpt_refs["gpt2-width-2-layer"], gpt, f"HF GPT-2 gpt2-width-2-layer {forced}")


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(GPT_SHAPES))
def test_gpt_round_trip_reloads_strictly(gpt_refs, shape):
    ref = gpt_refs[shape]
    gpt = af.GPT.from_hf(ref)
    back = gpt.to_hf()
    assert state_dicts_equal(back.state_dict(), ref.state_dict())
    assert back.lm_head.weight is back.transformer.wte.weight
    fresh = transformers.GPT2LMHeadModel(ref.config).eval() if shape == "tiny" else back
    fresh.load_state_dict(hf.gpt_to_hf_state_dict(gpt), strict=True)
    idx = tokens(ref, batch=1, length=6)
    with torch.no_grad():
        want = ref(idx).logits
        assert torch.equal(fresh(idx).logits, want) and torch.equal(back(idx).logits, want)


def test_gpt_reads_a_checkpoint_without_the_tied_head(gpt_refs):
    ref = gpt_refs["tiny"]
    sd = {k: v for k, v in ref.state_dict().items() if k != "lm_head.weight"}  # as safetensors stores it
    model = transformers.GPT2LMHeadModel(ref.config).eval()
    model.load_state_dict(sd, strict=False)
    gpt = af.GPT.from_hf(model)
    idx = tokens(ref)
    with torch.no_grad():
        assert_close("HF GPT-2 tied head from wte", gpt(idx), ref(idx).logits)


@pytest.mark.parametrize("shape", list(GPT_SHAPES))
def test_greedy_generation_equals_hf_generate(gpt_refs, shape):
    ref = gpt_refs[shape]
    gpt = af.GPT.from_hf(ref)
    eos = ref.config.eos_token_id
    new = 16 if shape == "tiny" else 6
    for seed in (4, 5):
        prompt = tokens(ref, batch=1, length=5, seed=seed)
        ours = gpt.generate(prompt, max_new_tokens=new, temperature=0)
        with torch.no_grad():
            theirs = ref.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                  max_new_tokens=new, pad_token_id=eos)
        # transformers stops at the end-of-text id; up to there the sequences must agree.
        n = theirs.shape[1]
        assert n == ours.shape[1] or theirs[0, -1] == eos
        assert torch.equal(ours[:, :n], theirs), f"greedy continuations differ:\n{ours}\n{theirs}"
        print(f"[parity] HF GPT-2 {shape} greedy generation: {n - prompt.shape[1]} tokens identical")


# --------------------------------------------------------------------------------------------- BERT

BERT_SHAPES = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=99,
                 max_position_embeddings=40),
    "bert-mini-width": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024),
}


@pytest.fixture(scope="module")
def bert_refs():
    return {shape: randomize(transformers.BertModel(transformers.BertConfig(**kw)), seed=i)
            for i, (shape, kw) in enumerate(BERT_SHAPES.items())}


def padded_batch(ref):
    ids = torch.randint(0, ref.config.vocab_size, (3, 14), generator=gen(6))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 4:] = 0
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    return ids, mask, types


@pytest.mark.parametrize("impl", ["fused", "explicit"])
@pytest.mark.parametrize("shape", list(BERT_SHAPES))
def test_bert_outputs_equal_hf(bert_refs, shape, impl):
    ref = bert_refs[shape]
    enc = af.TextEncoder.from_hf(ref, attn_impl=impl)
    ids, mask, types = padded_batch(ref)
    ours_h, hooks = block_outputs(enc.backbone.blocks)
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        hidden = enc(ids, mask, token_type_ids=types)
    for h in hooks:
        h.remove()
    real = mask.bool()  # padded positions are not compared: their values mean nothing
    for i, (a, b) in enumerate(zip(ours_h, out.hidden_states[1:])):
        assert_close(f"HF BERT {shape} {impl} layer {i} hidden states", a[real], b[real])
    assert_close(f"HF BERT {shape} {impl} last_hidden_state", hidden[real], out.last_hidden_state[real])
    assert_close(f"HF BERT {shape} {impl} pooler_output", enc.pool(hidden), out.pooler_output)


@pytest.mark.parametrize("shape", list(BERT_SHAPES))
def test_bert_round_trip_reloads_strictly(bert_refs, shape):
    ref = bert_refs[shape]
    enc = af.TextEncoder.from_hf(ref)
    back = hf_bert.text_encoder_to_hf(enc)
    assert state_dicts_equal(back.state_dict(), ref.state_dict())
    fresh = transformers.BertModel(ref.config).eval() if shape == "tiny" else back
    fresh.load_state_dict(hf_bert.text_encoder_to_hf_state_dict(enc), strict=True)
    ids, mask, _ = padded_batch(ref)
    with torch.no_grad():
        assert torch.equal(fresh(ids, attention_mask=mask).pooler_output, ref(ids, attention_mask=mask).pooler_output)


def test_mismatched_weights_are_named(bert_refs):
    ref = bert_refs["tiny"]
    sd = dict(ref.state_dict())
    del sd["encoder.layer.1.attention.self.key.bias"]
    sd["encoder.layer.0.attention.self.relative_bias"] = torch.zeros(3)
    sd["encoder.layer.0.intermediate.dense.weight"] = torch.zeros(65, 32)
    with pytest.raises(ValueError) as e:
        hf_bert.text_encoder_from_state_dict(sd, ref.config)
    msg = str(e.value)
    print(msg)
    assert "missing keys (1): encoder.layer.1.attention.self.key.bias" in msg
    assert "unexpected keys (1): encoder.layer.0.attention.self.relative_bias" in msg
    assert "encoder.layer.0.intermediate.dense.weight has shape (65, 32), expected (64, 32)" in msg


def test_unsupported_configs_are_refused_by_name():
    gpt2 = transformers.GPT2LMHeadModel(gpt2_config(**GPT_SHAPES["tiny"], scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        af.GPT.from_hf(gpt2)
    with pytest.raises(ValueError, match="position='rotary'"):
        af.GPT.from_config(dict(vocab_size=11, context=8, width=16, depth=1, heads=2, position="rotary")).to_hf()


def test_missing_reference_library_says_what_to_install(monkeypatch):
    vit = af.ViT.from_config(dict(image_size=16, patch_size=8, num_classes=2, width=16, depth=1, heads=2,
                                  mlp_hidden=32))
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install transformers"):
        vit.to_hf()
    monkeypatch.setitem(sys.modules, "timm", None)
    from anyformer.interop.timm import to_timm_model
    with pytest.raises(ImportError, match=r"pip install timm"):
        to_timm_model(vit)


@pytest.mark.slow
def test_no_reference_library_is_imported_at_import_time():
    code = ("import sys, anyformer, anyformer.interop, anyformer.interop.timm, anyformer.interop.hf, "
            "anyformer.interop.minilm\n"
            "loaded = [m for m in ('timm', 'transformers', 'tokenizers', 'torchvision') if m in sys.modules]\n"
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
