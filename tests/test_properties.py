"""Property-based tests: random valid configurations of the backbone, ViT, GPT and the text encoder
run forward and backward on tiny inputs with the right shapes, finite values, and a gradient for
every trainable parameter.

Derandomised and without an example database (here and for every hypothesis test: the profile in
tests/conftest.py), so that CI explores the same cases on every run and writes nothing.
"""
from typing import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import anyformer as af

SETTINGS = settings(max_examples=25)  # derandomised, no database, no deadline: tests/conftest.py


def test_hypothesis_is_derandomised_without_a_database():
    for s in (settings(), SETTINGS):  # the default every @settings inherits from, and this module's
        assert s.derandomize and s.database is None and s.deadline is None


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see tests/conftest.py


def assert_trains(model: torch.nn.Module, forward: Callable[[], torch.Tensor]) -> None:
    """In training mode a finite output and a finite gradient for every trainable parameter; in
    eval mode, where no branch is dropped at random, a gradient that is not all zeros: each
    parameter takes part in the output."""
    for training in (True, False):
        model.train(training)
        model.zero_grad(set_to_none=True)
        out = forward()
        assert torch.isfinite(out).all()
        out.float().square().mean().backward()
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            assert p.grad is not None, f"{name} gets no gradient"
            assert torch.isfinite(p.grad).all(), f"{name} gets a non-finite gradient"
            assert training or p.grad.count_nonzero() > 0, f"{name} gets an all-zero gradient"


@st.composite
def widths(draw, head_dims=(2, 4, 6, 8)):
    heads = draw(st.integers(1, 3))
    return heads * draw(st.sampled_from(head_dims)), heads


@SETTINGS
@given(data=st.data())
def test_backbone(data):
    width, heads = data.draw(widths())
    depth = data.draw(st.integers(1, 3))
    activation = data.draw(st.sampled_from(["gelu", "gelu_tanh", "relu", "tanh"]))
    # A narrow ReLU layer can be dead for every token (its weights then rightly get no gradient).
    mlp_hidden = data.draw(st.integers(8 if activation == "relu" else 1, 16))
    trunk = af.Transformer(
        width, depth, heads, mlp_hidden=mlp_hidden, mlp_layers=data.draw(st.integers(1, 2)),
        norm=data.draw(st.sampled_from(["pre", "post"])), final_norm=data.draw(st.booleans()),
        activation=activation, bias=data.draw(st.booleans()),
        layer_scale=data.draw(st.sampled_from([None, 0.1])), drop_path=data.draw(st.sampled_from([0.0, 0.2])),
        rotary=data.draw(st.booleans()) and width // heads % 2 == 0)
    B, N = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 6))
    x = torch.randn(B, N, width)
    mask = data.draw(st.sampled_from([None, "padding", "full"]))
    # Every query keeps a key to attend to (the first token, or itself), so no layer's attention
    # input can be cut off from the output entirely.
    padding = torch.rand(B, N) > 0.3
    padding[:, 0] = True
    mask = {None: None, "padding": padding, "full": (torch.rand(B, N, N) > 0.3) | torch.eye(N, dtype=torch.bool)}[mask]
    causal = data.draw(st.booleans())
    layers = data.draw(st.lists(st.integers(-depth, depth - 1), max_size=3))
    y, attn = trunk(x, causal=causal, mask=mask, return_attention=layers)
    assert y.shape == (B, N, width)
    assert [a.shape for a in attn] == [(B, heads, N, N)] * len(layers)
    assert all(torch.allclose(a.sum(-1)[a.sum(-1) > 0], torch.tensor(1.0), atol=1e-5) for a in attn)
    assert_trains(trunk, lambda: trunk(x, causal=causal, mask=mask, return_attention=layers)[0])
    trunk.eval()  # without stochastic depth the fused and explicit paths compute the same function
    with torch.no_grad():
        fused = trunk(x, causal=causal, mask=mask)
        for block in trunk.blocks:
            block.attn.impl = "explicit"
        explicit = trunk(x, causal=causal, mask=mask)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-4)


@SETTINGS
@given(data=st.data())
def test_vit(data):
    width, heads = data.draw(widths())
    position = data.draw(st.sampled_from(["learned", "concat", "sinusoidal", "none"]))
    class_token = data.draw(st.booleans())
    patch = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    grid = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    config = dict(
        image_size=[grid[0] * patch[0], grid[1] * patch[1]], patch_size=list(patch),
        in_chans=data.draw(st.integers(1, 3)), num_classes=data.draw(st.integers(1, 5)), width=width,
        depth=data.draw(st.integers(1, 2)), heads=heads, mlp_hidden=data.draw(st.integers(1, 16)),
        mlp_layers=data.draw(st.integers(1, 2)), position=position,
        pos_width=data.draw(st.integers(1, width - 1)) if position == "concat" else 0,
        class_token=class_token, num_registers=data.draw(st.integers(0, 2)),
        pool=data.draw(st.sampled_from(["cls", "mean"])) if class_token else "mean",
        head_hidden=data.draw(st.sampled_from([None, 4])), final_norm=data.draw(st.booleans()),
        layer_scale=data.draw(st.sampled_from([None, 0.1])), drop_path=data.draw(st.sampled_from([0.0, 0.1])))
    if position == "sinusoidal" and width % 4:
        # the constraint is named, not tripped over later
        with pytest.raises(ValueError, match=f"2-D sinusoidal positions need a width divisible by 4, got {width}"):
            af.ViT.from_config(config)
        return
    vit = af.ViT.from_config(config)
    B = data.draw(st.integers(1, 3))
    images = torch.randn(B, config["in_chans"], *config["image_size"])
    assert vit(images).shape == (B, config["num_classes"])
    assert_trains(vit, lambda: vit(images))


@SETTINGS
@given(data=st.data())
def test_gpt(data):
    width, heads = data.draw(widths())
    position = data.draw(st.sampled_from(["learned", "sinusoidal", "rotary", "none"]))
    context = data.draw(st.integers(2, 10))
    config = dict(vocab_size=data.draw(st.integers(2, 40)), context=context, width=width,
                  depth=data.draw(st.integers(1, 2)), heads=heads, position=position,
                  mlp_hidden=data.draw(st.sampled_from([None, 8])), bias=data.draw(st.booleans()),
                  tie_weights=data.draw(st.booleans()))
    if position == "rotary" and width // heads % 2 or position == "sinusoidal" and width % 2:
        expected = (f"rotary positions need an even head dimension, got {width // heads}" if position == "rotary"
                    else f"sinusoidal positions need an even width, got {width}")
        with pytest.raises(ValueError, match=expected):
            af.GPT.from_config(config)
        return
    gpt = af.GPT.from_config(config)
    B, T = data.draw(st.integers(1, 3)), data.draw(st.integers(1, context - 1))
    ids = torch.randint(0, config["vocab_size"], (B, T))
    assert gpt(ids).shape == (B, T, config["vocab_size"])
    assert_trains(gpt, lambda: gpt(ids))
    # The key/value cache is an optimisation only: greedy decoding is the same with and without it.
    new = context - T
    with_cache = gpt.generate(ids, new, temperature=0)
    assert with_cache.shape == (B, context)
    assert torch.equal(with_cache, gpt.generate(ids, new, temperature=0, use_cache=False))


@SETTINGS
@given(data=st.data())
def test_text_encoder(data):
    width, heads = data.draw(widths())
    enc = af.TextEncoder.from_config(dict(
        vocab_size=data.draw(st.integers(2, 30)), max_positions=8, width=width, depth=data.draw(st.integers(1, 2)),
        heads=heads, mlp_hidden=data.draw(st.integers(1, 16)), dropout=0.0, attn_dropout=0.0))
    B, N = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 8))
    ids = torch.randint(0, enc.config.vocab_size, (B, N))
    mask = (torch.rand(B, N) > 0.3).long()
    mask[:, 0] = 1  # at least one real token
    hidden = enc(ids, mask)
    assert hidden.shape == (B, N, width)
    assert enc.sentence_embedding(ids, mask).norm(dim=-1).sub(1).abs().max() < 1e-4
    assert_trains(enc, lambda: enc.pool(enc(ids, mask)))
