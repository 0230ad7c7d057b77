"""timm <-> anyformer ViT: equal outputs, strict round trips, resampling as timm does, named errors."""
import pytest
import torch

import anyformer as af
from anyformer.interop import require_timm
from anyformer.interop.timm import timm_kwargs, to_timm_model

from . import PRIVATE_KERNELS, assert_close, block_outputs, private_kernel, randomize, state_dicts_equal

timm = require_timm()  # a missing timm fails here: CI installs it (scripts/install_peers.sh)
from timm.layers import resample_abs_pos_embed  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402

TINY = dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3, num_classes=7)
# Non-square images, register tokens, layer scale, mean pooling: the less common options.
TINY_REG = dict(img_size=(32, 48), patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=5,
                reg_tokens=2, init_values=0.1, global_pool="avg", fc_norm=False)
SHAPES = {"tiny": TINY, "tiny_reg_nonsquare": TINY_REG, "vit_tiny_patch16_224": "vit_tiny_patch16_224"}


def blank(spec, **kw):
    """A timm ViT, its init skipped (torch's trunc_normal_ is slow on CPU): for weights loaded next."""
    if isinstance(spec, str):
        return timm.create_model(spec, pretrained=False, weight_init="skip", **kw).eval()
    return VisionTransformer(**{**spec, **kw}, weight_init="skip").eval()


def make(spec, seed=0, **kw):
    """A timm ViT with random weights everywhere."""
    return randomize(blank(spec, **kw), seed)


def images(model, seed=1):
    h, w = model.patch_embed.img_size
    batch = 1 if h * w > 64 * 64 else 2  # keep the standard-size model cheap on CI's two cores
    return torch.randn(batch, 3, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def refs():
    return {name: make(spec) for name, spec in SHAPES.items()}


def check_outputs(ref, vit, label: str) -> None:
    """Every block's hidden states, the features, the head's logits and the plain forward's logits
    of `vit` equal those of the timm model `ref`."""
    x = images(ref)
    ours_h, hooks = block_outputs(vit.backbone.blocks)
    ref_h, ref_hooks = block_outputs(ref.blocks)
    with torch.no_grad():
        feats, ref_feats = vit.forward_features(x), ref.forward_features(x)
        for h in hooks + ref_hooks:
            h.remove()
        logits, ref_logits = vit.head(feats), ref.forward_head(ref_feats)
    assert len(ours_h) == len(ref_h) == len(ref.blocks)
    for i, (a, b) in enumerate(zip(ours_h, ref_h)):
        assert_close(f"{label} block {i} hidden states", a, b)
    assert_close(f"{label} features", feats, ref_feats)
    assert_close(f"{label} logits", logits, ref_logits)
    with torch.no_grad():  # the plain forward: its last block computes the class token only
        assert_close(f"{label} forward logits", vit(x), ref_logits)


@pytest.mark.parametrize("impl", ["fused", "explicit"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_outputs_equal_timm(refs, shape, impl):
    check_outputs(refs[shape], af.ViT.from_timm(refs[shape], attn_impl=impl), f"timm {shape} {impl}")


@pytest.mark.slow
@pytest.mark.parametrize("forced", PRIVATE_KERNELS)
def test_outputs_equal_timm_with_each_private_kernel(refs, forced):
    """The kernels the plan may choose, forced in turn (heads of 16: the native attention's size)."""
    vit = af.ViT.from_timm(refs["tiny"])
    with private_kernel(vit, forced):
        check_outputs(refs["tiny"], vit, f"timm tiny {forced}")


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_round_trip_reloads_strictly(refs, shape):
    ref = refs[shape]
    vit = af.ViT.from_timm(ref)
    sd = vit.to_timm()
    fresh = blank(SHAPES[shape])  # same architecture, other weights
    fresh.load_state_dict(sd, strict=True)
    assert state_dicts_equal(fresh.state_dict(), ref.state_dict())
    built = to_timm_model(vit)  # built from anyformer's config alone
    assert state_dicts_equal(built.state_dict(), ref.state_dict())
    x = images(ref)
    with torch.no_grad():
        ref_out = ref(x)
        assert torch.equal(fresh(x), ref_out) and torch.equal(built(x), ref_out)
        back = af.ViT.from_timm(fresh)
        assert torch.equal(back(x), vit(x))


def test_from_state_dict_needs_only_shapes_and_hints(refs):
    x = images(refs["tiny"])
    vit = af.ViT.from_timm(refs["tiny"].state_dict(), heads=3)
    with torch.no_grad():
        assert_close("timm tiny from state dict", vit(x), refs["tiny"](x))
    ref = refs["vit_tiny_patch16_224"]
    vit = af.ViT.from_timm(ref.state_dict())  # heads default width // 64 = 3: right for ViT-Ti
    assert vit.config.heads == 3 and vit.config.image_size == (224, 224)
    ref = refs["tiny_reg_nonsquare"]
    vit = af.ViT.from_timm(ref.state_dict(), heads=4, source_grid=(4, 6), pool="mean")
    with torch.no_grad():
        assert_close("timm tiny_reg from state dict", vit(images(ref)), ref(images(ref)))


@pytest.mark.parametrize("shape,new_size", [("tiny", (48, 64)), ("tiny_reg_nonsquare", (24, 56)),
                                            ("vit_tiny_patch16_224", (160, 192))])
def test_new_image_size_matches_timm_resampling(refs, shape, new_size):
    ref = refs[shape]
    vit = af.ViT.from_timm(ref, image_size=new_size)
    ph, pw = ref.patch_embed.patch_size
    grid = (new_size[0] // ph, new_size[1] // pw)
    # timm's own way: resample the table with timm and load it into a timm model built at the new size.
    sd = ref.state_dict()
    sd["pos_embed"] = resample_abs_pos_embed(sd["pos_embed"], new_size=grid, old_size=ref.patch_embed.grid_size,
                                             num_prefix_tokens=ref.num_prefix_tokens)
    spec = SHAPES[shape]
    at_size = blank(spec, img_size=new_size) if isinstance(spec, str) else blank({**spec, "img_size": new_size})
    at_size.load_state_dict(sd, strict=True)
    x = images(at_size, seed=3)
    assert x.shape[-2:] == new_size
    assert_close(f"timm {shape} resampled position table", vit.pos.pos_embed, at_size.pos_embed, tol=1e-6)
    with torch.no_grad():
        feats, ref_feats = vit.forward_features(x), at_size.forward_features(x)
        assert_close(f"timm {shape} at {new_size} features", feats, ref_feats)
        assert_close(f"timm {shape} at {new_size} logits", vit.head(feats), at_size.forward_head(ref_feats))
    at_size.load_state_dict(vit.to_timm(), strict=True)  # the resampled model goes back too


def test_headless_timm_model_gives_pooled_features():
    ref = make({**TINY, "num_classes": 0})
    vit = af.ViT.from_timm(ref)
    x = images(ref)
    with torch.no_grad():
        assert_close("timm headless pooled features", vit(x), ref(x))
    ref.load_state_dict(vit.to_timm(head=False), strict=True)
    assert timm_kwargs(vit, head=False)["num_classes"] == 0


def test_mismatched_weights_are_named(refs):
    good = refs["tiny"].state_dict()
    sd = dict(good)
    del sd["blocks.1.attn.qkv.bias"]
    sd["blocks.0.attn.q_norm.weight"] = torch.ones(16)
    sd["blocks.0.mlp.fc2.weight"] = torch.zeros(48, 100)
    with pytest.raises(ValueError) as e:
        af.ViT.from_timm(sd, heads=3)
    msg = str(e.value)
    print(msg)
    assert "missing keys (1): blocks.1.attn.qkv.bias" in msg
    assert "unexpected keys (1): blocks.0.attn.q_norm.weight" in msg
    assert "blocks.0.mlp.fc2.weight has shape (48, 100), expected (48, 192)" in msg
    with pytest.raises(ValueError, match=r"missing keys \(1\): pos_embed"):
        af.ViT.from_timm({k: v for k, v in good.items() if k != "pos_embed"})


def test_unsupported_timm_variants_are_refused_by_name():
    with pytest.raises(ValueError, match="fc_norm"):
        af.ViT.from_timm(VisionTransformer(**{**TINY, "global_pool": "avg"}, weight_init="skip"))
    with pytest.raises(ValueError, match="no_embed_class"):
        af.ViT.from_timm(VisionTransformer(**TINY, no_embed_class=True, weight_init="skip"))
    with pytest.raises(ValueError, match="no timm VisionTransformer equivalent.*sinusoidal"):
        af.ViT.from_config(dict(image_size=16, patch_size=8, num_classes=2, width=16, depth=1, heads=2,
                                mlp_hidden=32, position="sinusoidal")).to_timm()
    with pytest.raises(ValueError, match="no timm VisionTransformer equivalent: mlp_conv"):
        af.ViT.from_config(dict(image_size=16, patch_size=8, num_classes=2, width=16, depth=1, heads=2,
                                mlp_hidden=32, mlp_conv=3)).to_timm()
    with pytest.raises(ValueError, match="no timm VisionTransformer equivalent: pool='attention'"):
        af.ViT.from_config(dict(image_size=16, patch_size=8, num_classes=2, width=16, depth=1, heads=2,
                                mlp_hidden=32, class_token=False, pool="attention")).to_timm()
