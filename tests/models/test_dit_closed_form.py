"""The DiT against its equations, computed here from its parameters with plain torch ops:

    c = TimeEmbedding(t) + ClassEmbedding(y)
    z0 = patchify(x_t) E + E_pos (fixed 2-D sinusoids, or learned);  z_l = adaLN-block(z_{l-1}, c)
    out = unpatchify(adaLN(z_L, c) W + b);  v = out (predict="v") or (x_t - out) / max(t, 0.05) ("x")

The configuration is chosen so that a dropped or defaulted setting shows: a non-square image, a
norm eps far from the defaults, an MLP that is not 4x wide, a time sinusoid narrower than 256, and
every zero-initialised gate, shift, scale and head randomised before comparing."""
import math

import pytest
import torch
import torch.nn.functional as F

import anyformer as af
from anyformer.models import flow
from anyformer.models.dit import T_MIN, DiTConfig
from anyformer.models.mae import patchify
from anyformer.nn.heads import unpatchify

# A 8x4 image in 2x2 patches: a 4x2 grid of 8 tokens.
CONFIG = dict(image_size=(8, 4), in_chans=2, patch_size=2, num_classes=3, width=16, depth=2, heads=2,
              mlp_hidden=24, time_freq_dim=6, norm_eps=0.25, attn_impl="explicit")
GRID = (4, 2)


def make_dit(seed: int = 0, **overrides) -> af.DiT:
    """A DiT whose every parameter is random (N(0, 0.3^2) added), the adaLN zeros included."""
    torch.manual_seed(seed)
    model = af.DiT.from_config({**CONFIG, **overrides})
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


def inputs(batch: int = 3, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 2, 8, 4, generator=gen)
    t = torch.tensor([0.02, 0.5, 0.93])[:batch]
    y = torch.tensor([2, 0, 3])[:batch]  # 3: the null class
    return x, t, y


def sinusoid_table(length: int, dim: int) -> torch.Tensor:
    """(length, dim): sin(p w_i) on even channels, cos(p w_i) on odd ones, w_i = 10000^(-2i/dim)."""
    table = torch.zeros(length, dim, dtype=torch.float64)
    for p in range(length):
        for i in range(dim // 2):
            angle = p * 10000 ** (-2 * i / dim)
            table[p, 2 * i], table[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table


def grid_sinusoids(grid: tuple[int, int], dim: int) -> torch.Tensor:
    """(H*W, dim), row-major: the first half of the channels encode the row, the second the column."""
    rows, cols = sinusoid_table(grid[0], dim // 2), sinusoid_table(grid[1], dim // 2)
    return torch.stack([torch.cat([rows[r], cols[c]]) for r in range(grid[0]) for c in range(grid[1])]).float()


def condition_by_hand(model: af.DiT, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """c = MLP([cos(1000 t f_k), sin(1000 t f_k)]) + E[y], f_k = 10000^(-k/half), k < half."""
    half = model.config.time_freq_dim // 2
    freq = torch.tensor([10000 ** (-k / half) for k in range(half)])
    angles = 1000 * t[:, None] * freq[None]
    first, second = model.time_embed.mlp[0], model.time_embed.mlp[2]
    h = F.silu(torch.cat([angles.cos(), angles.sin()], dim=-1) @ first.weight.T + first.bias)
    return h @ second.weight.T + second.bias + model.class_embed.weight[y]


def layer_norm(z: torch.Tensor, eps: float) -> torch.Tensor:
    mean, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
    return (z - mean) / (var + eps).sqrt()


def attention(h: torch.Tensor, qkv: torch.nn.Linear, proj: torch.nn.Linear, heads: int) -> torch.Tensor:
    B, N, D = h.shape
    q, k, v = (h @ qkv.weight.T + qkv.bias).split(D, dim=-1)
    split = lambda u: u.view(B, N, heads, D // heads).transpose(1, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(D // heads)).softmax(-1)
    return (weights @ v).transpose(1, 2).reshape(B, N, D) @ proj.weight.T + proj.bias


def forward_by_hand(model: af.DiT, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """The network's output (before predict="x"'s division), from its parameters."""
    cfg, eps = model.config, model.config.norm_eps
    c = condition_by_hand(model, t, y)
    conv = model.patch_embed.proj
    z = patchify(x, cfg.patch_size) @ conv.weight.flatten(1).T + conv.bias + pos
    for block in model.backbone.blocks:
        mod = block.modulation.proj
        b1, s1, g1, b2, s2, g2 = (F.silu(c) @ mod.weight.T + mod.bias).chunk(6, dim=-1)
        h = layer_norm(z, eps) * (1 + s1[:, None]) + b1[:, None]
        z = z + g1[:, None] * attention(h, block.attn.qkv, block.attn.proj, cfg.heads)
        h = layer_norm(z, eps) * (1 + s2[:, None]) + b2[:, None]
        mlp = F.gelu(h @ block.mlp.fc1.weight.T + block.mlp.fc1.bias) @ block.mlp.fc2.weight.T + block.mlp.fc2.bias
        z = z + g2[:, None] * mlp
    final = model.final.modulation.proj
    shift, scale = (F.silu(c) @ final.weight.T + final.bias).chunk(2, dim=-1)
    z = layer_norm(z, eps) * (1 + scale[:, None]) + shift[:, None]
    head = model.head.proj
    return unpatchify(z @ head.weight.T + head.bias, cfg.patch_size, GRID)


# ---------------------------------------------------------------- the configuration
def test_unknown_position_or_prediction_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown DiT position 'rotary'; expected one of \('sinusoidal', 'learned'\)"):
        DiTConfig(**{**CONFIG, "position": "rotary"})
    with pytest.raises(ValueError, match=r"unknown DiT prediction 'eps'; expected one of \('x', 'v'\)"):
        DiTConfig(**{**CONFIG, "predict": "eps"})


def test_the_blocks_are_built_from_the_config():
    model = make_dit()
    assert model.backbone.norm is None  # the final adaLN is the only norm after the blocks
    for block in model.backbone.blocks:
        assert block.mlp.fc1.out_features == CONFIG["mlp_hidden"]
        assert block.norm1.eps == block.norm2.eps == CONFIG["norm_eps"]
    assert model.final.norm.eps == CONFIG["norm_eps"]
    assert model.time_embed.mlp[0].in_features == CONFIG["time_freq_dim"]


def test_fixed_positions_are_the_2d_sinusoids_of_the_patch_grid():
    model = make_dit()
    assert not any(name.startswith("pos.") for name, _ in model.named_parameters())  # fixed, not learned
    torch.testing.assert_close(model.pos.table[0], grid_sinusoids(GRID, CONFIG["width"]))


def test_learned_positions_are_one_trained_vector_per_patch():
    model = make_dit(position="learned")
    assert model.pos.pos_embed.shape == (1, GRID[0] * GRID[1], CONFIG["width"])
    assert model.pos.pos_embed.requires_grad
    x, t, y = inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(x, t, y), forward_by_hand(model, x, t, y, model.pos.pos_embed[0]))


# ---------------------------------------------------------------- initialisation
def test_time_mlp_starts_at_a_normal_of_std_002():
    torch.manual_seed(0)
    model = af.DiT.from_config({**CONFIG, "width": 64, "time_freq_dim": 64})
    for layer in (model.time_embed.mlp[0], model.time_embed.mlp[2]):
        w = layer.weight
        assert 0.018 < w.std().item() < 0.022
        assert w.abs().max().item() > 2 * 0.02  # a plain normal: not truncated at two standard deviations


def test_patch_embedding_starts_xavier_uniform_over_the_flattened_kernel():
    torch.manual_seed(0)
    model = af.DiT.from_config({**CONFIG, "width": 64, "patch_size": 4, "image_size": 8})
    w = model.patch_embed.proj.weight  # (D, C, p, p): fan_out D, fan_in C p p
    bound = math.sqrt(6 / (64 + 2 * 4 * 4))
    assert w.abs().max().item() <= bound and w.abs().max().item() > 0.95 * bound
    assert torch.equal(model.patch_embed.proj.bias, torch.zeros(64))


# ---------------------------------------------------------------- the forward pass
def test_condition_is_the_time_embedding_plus_the_class_row():
    model = make_dit()
    _, t, y = inputs()
    with torch.no_grad():
        torch.testing.assert_close(model.condition(t, y), condition_by_hand(model, t, y))


def test_velocity_is_the_adaln_transformer_over_the_patches():
    model = make_dit()
    x, t, y = inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(x, t, y), forward_by_hand(model, x, t, y, grid_sinusoids(GRID, 16)))


def test_predicting_x_gives_the_velocity_from_the_clean_image_with_t_floored():
    v_model, x_model = make_dit(predict="v"), make_dit(predict="x")
    x_model.load_state_dict(v_model.state_dict())
    x, t, y = inputs()
    with torch.no_grad():
        clean = v_model(x, t, y)  # the same network's raw output: here read as the clean image
        expected = (x - clean) / torch.clamp(t, min=T_MIN).view(-1, 1, 1, 1)
        torch.testing.assert_close(x_model(x, t, y), expected)
        # Times come in as float32 whatever their dtype: a float64 t leaves the velocity float32.
        assert x_model(x, t.double(), y).dtype == torch.float32
        # One number is every image's time.
        torch.testing.assert_close(x_model(x, 0.5, y), x_model(x, torch.full((3,), 0.5), y))


def test_the_forward_pass_runs_where_the_images_are():
    model = make_dit().to("meta")
    out = model(torch.empty(2, 2, 8, 4, device="meta"), 0.5, torch.tensor([0, 1], device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 2, 8, 4)


def test_bad_inputs_are_refused_with_what_was_expected():
    model = make_dit()
    x, t, y = inputs(batch=3)  # 3 images of 2 channels: the batch is not the channel count
    with pytest.raises(ValueError, match=r"expected images \(B, 2, 8, 4\), got \(3, 2, 4, 8\)"):
        model(x.transpose(-2, -1), t, y)
    with pytest.raises(ValueError, match=r"expected images \(B, 2, 8, 4\), got \(3, 8, 4\)"):
        model(x[:, 0], t, y)
    with pytest.raises(ValueError, match=r"one label per image \(3\), got t \(2,\) and y \(3,\)"):
        model(x, t[:2], y)
    with pytest.raises(ValueError, match=r"one label per image \(3\), got t \(3,\) and y \(1,\)"):
        model(x, t, y[:1])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\] \(3 = no class\); got values in \[-1, 2\]"):
        model(x, t, torch.tensor([-1, 2, 0]))


# ---------------------------------------------------------------- sampling and cost
def test_sample_defaults_to_fifty_heun_steps_without_guidance():
    model = make_dit()
    labels = torch.tensor([1, 0])
    calls = []
    real = model.forward
    model.forward = lambda x, t, y: (calls.append(len(y)), real(x, t, y))[1]
    images = model.sample(labels, seed=4)
    assert calls == [2] * (2 * 50 - 1)  # Heun: two passes a step, one on the last; no null-class pass
    model.forward = real
    assert torch.equal(images, flow.sample(model, labels, steps=50, cfg=1.0, seed=4, method="heun"))


def test_forward_flops_count_the_matmuls_of_a_non_square_image():
    from torch.utils.flop_counter import FlopCounterMode
    model = make_dit()
    x, t, y = inputs(batch=1)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x, t, y)
    n = GRID[0] * GRID[1]
    assert counter.get_total_flops() == model.forward_flops() == model.forward_flops(seq_len=n)
    with pytest.raises(ValueError, match=r"seq_len must be 8 \(the patch tokens of a \(8, 4\) image\), got 9"):
        model.forward_flops(seq_len=9)
