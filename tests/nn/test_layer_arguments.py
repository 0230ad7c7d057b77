"""Every argument of the attention layer, the block and the backbone reaches its effect, the
defaults are the documented ones, and every refusal reads as written: each test is a mutant of
nn/ (attention, transformer, mlp, attend, heads, positions) that survived the rest of the fast
suite (an argument dropped on its way down, a default changed, a message replaced), told apart on
values computed another way."""
from __future__ import annotations

import math

import pytest
import torch

from anyformer.nn import MLP, ClassifierHead, KVCache, LearnedPosition, RotaryEmbedding, Transformer, TransformerBlock
from anyformer.nn.attend import explicit, sdpa
from anyformer.nn.attention import MultiHeadAttention
from tests.refused import refused


# -- refusals, word for word -------------------------------------------------------------------------------

def test_the_layers_refuse_bad_settings_in_their_own_words():
    refused(ValueError, "an MLP needs at least one hidden layer, got layers=0", lambda: MLP(8, 16, layers=0))
    refused(ValueError, "width must be divisible by heads: got width=10, heads=4",
            lambda: MultiHeadAttention(10, 4))
    refused(ValueError, "unknown attention impl 'fast'; expected one of ('auto', 'fused', 'explicit')",
            lambda: MultiHeadAttention(8, 2, impl="fast"))
    refused(ValueError, "adaln=True modulates pre-norm blocks; it needs norm='pre'",
            lambda: TransformerBlock(8, 2, norm="post", adaln=True))


def test_the_attention_layer_refuses_calls_that_cannot_mean_anything():
    self_attn, cross_attn = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2, cross=True)
    x, cache = torch.randn(2, 3, 8), KVCache(1, 2, 2, 4, 8, torch.float32, "cpu")
    queries = "queries=n takes no causal mask, cache or per-query mask (key padding only)"
    refused(ValueError, queries, lambda: self_attn(x, queries=1, causal=True))
    refused(ValueError, queries, lambda: self_attn(x, queries=1, cache=cache))
    refused(ValueError, queries, lambda: self_attn(x, queries=1, mask=torch.ones(2, 3, 3, dtype=torch.bool)))
    refused(ValueError, "cross-attention needs a context tensor (B, M, D_c)", lambda: cross_attn(x))
    refused(ValueError, "this attention layer is self-attention; it takes no context", lambda: self_attn(x, x))


def test_masks_of_the_wrong_shape_are_refused_with_the_shape_that_came():
    attn, x = MultiHeadAttention(8, 2), torch.randn(2, 5, 8)
    refused(ValueError, "key-padding mask must have shape (B, Nk) = (2, 5), got (2, 4)",
            lambda: attn(x, mask=torch.ones(2, 4, dtype=torch.bool)))
    refused(ValueError, "mask must be (B, Nk), (B, Nq, Nk) or (B, H, Nq, Nk); got shape (2, 1, 1, 5, 5)",
            lambda: attn(x, mask=torch.ones(2, 1, 1, 5, 5, dtype=torch.bool)))


def test_the_blocks_and_backbone_refuse_misplaced_conditions_and_caches():
    x, cond = torch.randn(2, 3, 8), torch.randn(2, 8)
    adaln, plain = TransformerBlock(8, 2, adaln=True), TransformerBlock(8, 2)
    refused(ValueError, "this block is adaLN-modulated: give forward a condition cond of shape (B, D)",
            lambda: adaln(x))
    whole = "adaLN blocks are for generators of whole images: no KV cache, no queries=n"
    refused(ValueError, whole, lambda: adaln(x, cond=cond, cache=KVCache(1, 2, 2, 4, 8, torch.float32, "cpu")))
    refused(ValueError, whole, lambda: adaln(x, cond=cond, queries=1))
    refused(ValueError, "cond was given to a block built without adaln=True", lambda: plain(x, cond=cond))
    trunk = Transformer(8, 2, 2)
    refused(ValueError, "the cache holds 1 layers; this backbone has 2",
            lambda: trunk(x, cache=KVCache(1, 2, 2, 4, 8, torch.float32, "cpu")))


# -- defaults ----------------------------------------------------------------------------------------------

def test_attention_has_biases_everywhere_by_default_and_none_when_asked():
    self_attn, cross_attn = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2, cross=True, context_width=6)
    assert self_attn.qkv.bias is not None and self_attn.proj.bias is not None
    assert cross_attn.q.bias is not None and cross_attn.kv.bias is not None and cross_attn.proj.bias is not None
    assert cross_attn.kv.in_features == 6
    bare = MultiHeadAttention(8, 2, cross=True, bias=False)
    assert bare.q.bias is None and bare.kv.bias is None and bare.proj.bias is None
    assert self_attn.impl == "auto" and MultiHeadAttention(8, 2, impl="explicit").impl == "explicit"


def test_a_block_has_biases_affine_norms_and_no_attention_dropout_by_default():
    block = TransformerBlock(8, 2, cross=True)
    linears = [block.attn.qkv, block.attn.proj, block.cross_attn.q, block.cross_attn.kv, block.cross_attn.proj,
               block.mlp.fc1, block.mlp.fc2]
    assert all(layer.bias is not None for layer in linears)
    assert block.norm1.weight is not None and block.norm2.weight is not None
    assert block.attn.attn_dropout == 0.0 and block.cross_attn.attn_dropout == 0.0
    assert len(block.mlp.hidden) == 0  # mlp_layers=1: fc1 -> fc2
    bare = TransformerBlock(8, 2, cross=True, bias=False)
    assert all(layer.bias is None for layer in (bare.cross_attn.q, bare.cross_attn.kv, bare.mlp.fc1))
    assert TransformerBlock(8, 2, adaln=True).norm2.weight is None  # adaLN's norms have no affine of their own


def test_the_backbone_defaults_are_the_documented_ones():
    trunk = Transformer(8, 2, 2, rotary=True)
    block = trunk.blocks[0]
    assert len(block.mlp.hidden) == 0  # mlp_layers=1: one hidden layer, fc1 -> fc2
    assert block.norm1.eps == 1e-5 and block.norm2.eps == 1e-5 and trunk.norm.eps == 1e-5
    assert block.mlp_drop is None and block.attn.proj_drop is None and block.attn.attn_dropout == 0.0
    rope = block.attn.rotary
    assert rope is trunk.blocks[1].attn.rotary and rope.cos.shape[0] == 4096  # max_len: 4096 positions
    assert rope.cos.shape[-1] == 8 // 2 // 2  # D_h = width // heads, one angle per pair


def test_impl_reaches_every_attention_layer():
    trunk = Transformer(8, 2, 2, cross=True, impl="explicit")
    layers = [m for m in trunk.modules() if isinstance(m, MultiHeadAttention)]
    assert len(layers) == 4 and all(m.impl == "explicit" and m.attend is explicit for m in layers)
    assert all(m.attend is sdpa for m in Transformer(8, 2, 2, cross=True).modules()
               if isinstance(m, MultiHeadAttention))


@pytest.mark.parametrize("depth", [2, 3])
def test_drop_path_grows_linearly_to_the_rate_at_the_last_block(depth):
    trunk = Transformer(8, depth, 2, drop_path=0.3)
    assert [b.drop_path for b in trunk.blocks] == pytest.approx([0.3 * i / (depth - 1) for i in range(depth)])


# -- arguments reach their effect --------------------------------------------------------------------------

def _closed_form(attn: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D_h)) V per head, no mask."""
    B, N, D = x.shape
    q, k, v = attn.qkv(x).view(B, N, 3, attn.heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    w = (q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)).softmax(-1)
    return attn.proj((w @ v).transpose(1, 2).reshape(B, N, D))


def test_one_token_of_several_sequences_comes_back_one_token_each():
    torch.manual_seed(0)
    attn, x = MultiHeadAttention(8, 2).eval(), torch.randn(3, 1, 8)
    y = attn(x)
    assert y.shape == (3, 1, 8)
    torch.testing.assert_close(y, _closed_form(attn, x))


def test_attention_dropout_acts_in_training_only_on_every_path():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    for impl in ("auto", "explicit"):
        attn = MultiHeadAttention(8, 2, attn_dropout=0.5, impl=impl)
        plain = MultiHeadAttention(8, 2, impl=impl)
        plain.load_state_dict(attn.state_dict())
        torch.testing.assert_close(attn.eval()(x), plain.eval()(x))  # no dropout outside training
        assert not torch.allclose(attn.train()(x), plain(x))
        # A weights hook takes the written-out path: there too the dropout acts in training only.
        handle = attn.register_weights_hook(lambda w: None)
        assert not torch.allclose(attn.train()(x), plain(x))
        torch.testing.assert_close(attn.eval()(x), plain(x))
        handle.remove()


def test_projection_dropout_acts_in_training():
    torch.manual_seed(0)
    attn, x = MultiHeadAttention(8, 2, proj_dropout=0.5), torch.randn(2, 6, 8)
    y = attn.train()(x)
    assert (y == 0).float().mean() > 0.3  # about half the outputs dropped
    torch.testing.assert_close(attn.eval()(x), _closed_form(attn, x))


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_drops_attention_in_both_of_its_calls(causal):
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)
    mask = None if causal else torch.ones(2, 1, 5, 5, dtype=torch.bool)
    assert not torch.allclose(sdpa(q, k, v, mask, causal, 0.5), sdpa(q, k, v, mask, causal, 0.0))


def _cached_steps(attn: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor | None):
    """x's first 3 tokens through a cache of 8 positions, then the last 2: each call writes at the
    cache's position and attends over its whole buffer, masked (a key-padding mask covers the buffer)."""
    cache = KVCache(1, x.shape[0], attn.heads, attn.head_dim, 8, x.dtype, "cpu")
    first = attn(x[:, :3], cache=cache, causal=True, mask=mask)
    rest = attn(x[:, 3:], cache=cache, causal=True, mask=mask)
    return torch.cat([first, rest], 1)


@pytest.mark.parametrize("masked", [False, True])
def test_the_cache_attends_as_the_uncached_layer_with_the_callers_mask(masked):
    torch.manual_seed(0)
    attn, x = MultiHeadAttention(8, 2).eval(), torch.randn(2, 5, 8)
    mask = None
    if masked:  # key padding over the whole buffer: sequence 0 may not see its token 1
        mask = torch.ones(2, 8, dtype=torch.bool)
        mask[0, 1] = False
    cached = _cached_steps(attn, x, mask)
    whole = attn(x, causal=True, mask=None if mask is None else mask[:, :5])
    torch.testing.assert_close(cached[:, [0, 2, 3, 4]], whole[:, [0, 2, 3, 4]])
    if masked:  # the mask mattered: without it sequence 0's later tokens read token 1
        assert not torch.allclose(cached[0, 2:], _cached_steps(attn, x, None)[0, 2:])


def test_the_cache_lets_queries_see_their_own_keys_only_up_to_themselves():
    torch.manual_seed(0)
    attn, x = MultiHeadAttention(8, 2).eval(), torch.randn(1, 5, 8)
    steps = _cached_steps(attn, x, None)
    torch.testing.assert_close(steps, attn(x, causal=True))  # two new tokens: the second sees the first


def _padding_case(norm: str):
    """A backbone, tokens and a key-padding mask hiding the last two tokens of sequence 1."""
    torch.manual_seed(0)
    trunk = Transformer(8, 2, 2, norm=norm).eval()
    x = torch.randn(2, 6, 8)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    return trunk, x, mask


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_padded_tokens_change_nothing_the_others_see(norm):
    trunk, x, mask = _padding_case(norm)
    y = trunk(x, mask=mask)
    torch.testing.assert_close(y[1:, :4], trunk(x[1:, :4]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y[:1], trunk(x[:1]), atol=1e-5, rtol=1e-5)


def test_masked_context_tokens_change_nothing_in_cross_attention():
    torch.manual_seed(0)
    trunk = Transformer(8, 2, 2, cross=True).eval()
    x, context = torch.randn(1, 4, 8), torch.randn(1, 5, 8)
    context_mask = torch.tensor([[True, True, True, False, False]])
    y = trunk(x, context=context, context_mask=context_mask)
    torch.testing.assert_close(y, trunk(x, context=context[:, :3]), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(y, trunk(x, context=context), atol=1e-4)  # the mask mattered


def _asked_both_ways(trunk: Transformer, x: torch.Tensor, **kw):
    """The backbone's tokens called plainly and with return_attention (which must change nothing
    but hand the weights over)."""
    plain = trunk(x, **kw)
    tokens, weights = trunk(x, return_attention=True, **kw)
    assert len(weights) == trunk.depth
    return plain, tokens


def test_return_attention_passes_every_argument_down():
    torch.manual_seed(0)
    trunk = Transformer(8, 2, 2, cross=True).eval()
    x, context = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    context_mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    mask = torch.tensor([[True, True, True, True, False]] * 2)
    for kw in (dict(causal=True, context=context, context_mask=context_mask),
               dict(mask=mask, keep=2, context=context, context_mask=context_mask)):
        plain, tokens = _asked_both_ways(trunk, x, **kw)
        torch.testing.assert_close(tokens, plain)
        # Each argument changes the answer, so dropping one on the way down would be seen.
        for name in kw:
            if name != "context":
                dropped = trunk(x, **{k: v for k, v in kw.items() if k != name})
                assert dropped.shape != plain.shape or not torch.allclose(dropped, plain, atol=1e-5), name


def test_return_attention_passes_the_cache_down():
    torch.manual_seed(0)
    trunk = Transformer(8, 2, 2).eval()
    x = torch.randn(1, 5, 8)
    pair = []
    for asked in (False, True):
        cache = KVCache(2, 1, 2, 4, 8, torch.float32, "cpu")
        trunk(x[:, :3], cache=cache, causal=True)
        out = trunk(x[:, 3:], cache=cache, causal=True, return_attention=asked)
        pair.append(out[0] if asked else out)
        assert int(cache.position) == 5
    torch.testing.assert_close(pair[1], pair[0])
    torch.testing.assert_close(pair[0], trunk(x, causal=True)[:, 3:], atol=1e-5, rtol=1e-5)


def test_each_block_writes_its_own_layer_of_the_cache_at_its_position():
    """The backbone hands each block its layer index: a block that wrote another's layer (or every
    block the same one) would leave a layer empty, and the position moves on once per call."""
    torch.manual_seed(0)
    trunk = Transformer(8, 2, 2).eval()
    cache = KVCache(2, 1, 2, 4, 8, torch.float32, "cpu")
    cache.position.fill_(3)
    trunk(torch.randn(1, 2, 8), cache=cache, causal=True)
    assert int(cache.position) == 5
    for layer in cache.k:
        assert layer[:, :, 3:5].abs().sum() > 0 and not layer[:, :, :3].any() and not layer[:, :, 5:].any()
    assert not torch.equal(cache.k[0], cache.k[1])


def test_return_attention_passes_the_condition_down():
    torch.manual_seed(0)
    trunk = Transformer(8, 2, 2, adaln=True).eval()
    for block in trunk.blocks:  # open the gates: adaLN-Zero starts as the identity
        torch.nn.init.normal_(block.modulation.proj.weight, std=0.5)
    x, cond = torch.randn(2, 3, 8), torch.randn(2, 8)
    plain, tokens = _asked_both_ways(trunk, x, cond=cond)
    torch.testing.assert_close(tokens, plain)
    assert not torch.allclose(plain, trunk(x, cond=torch.zeros(2, 8)))


def test_a_four_dimensional_mask_is_taken_as_it_is():
    torch.manual_seed(0)
    attn, x = MultiHeadAttention(8, 2).eval(), torch.randn(2, 4, 8)
    per_query = torch.rand(2, 4, 4) > 0.3
    per_query[..., 0] = True  # every query sees at least one key
    torch.testing.assert_close(attn(x, mask=per_query[:, None]), attn(x, mask=per_query))
    reference = MultiHeadAttention(8, 2, impl="explicit").eval()
    reference.load_state_dict(attn.state_dict())
    torch.testing.assert_close(attn(x, mask=per_query), reference(x, mask=per_query))
    assert not torch.allclose(attn(x, mask=per_query), attn(x))


def test_the_classifier_head_reads_the_class_token_after_a_tanh_by_default():
    torch.manual_seed(0)
    head = ClassifierHead(8, 3, hidden=5)
    assert isinstance(head.pre_logits[1], torch.nn.Tanh)  # ViT-B's pre-logits
    tokens = torch.randn(2, 4, 8)
    torch.testing.assert_close(head(tokens), head.fc(torch.tanh(head.pre_logits[0](tokens[:, 0]))))
    mean = ClassifierHead(8, 3, pool="mean")  # one prefix token (the class token) left out by default
    torch.testing.assert_close(mean(tokens), mean.fc(tokens[:, 1:].mean(1)))
    refused(ValueError, "pool='cls' needs a class token; use pool='mean' without one",
            lambda: ClassifierHead(8, 3, num_prefix=0))


def test_rotary_positions_default_to_4096_positions_at_base_10000():
    rope = RotaryEmbedding(8)
    assert rope.cos.shape == (4096, 4)
    angle = 5 * 10000.0 ** (-2 / 8)  # position 5, second pair of channels
    assert rope.cos[5, 1].item() == pytest.approx(math.cos(angle), abs=1e-7)


def test_a_sequence_past_the_position_table_is_refused_with_its_length():
    table = LearnedPosition(6, 8)
    refused(ValueError, "sequence of 7 positions is longer than the position table (6); use a shorter input "
            "or a model with a longer context", lambda: table(torch.randn(1, 3, 8), 4))


def test_a_block_alone_writes_layer_0_of_a_cache_by_default():
    """A block called with a cache and no `layer=` (a one-block model) writes the cache's layer 0."""
    torch.manual_seed(0)
    block, x = TransformerBlock(8, 2).eval(), torch.randn(1, 3, 8)
    cache = KVCache(1, 1, 2, 4, 6, torch.float32, "cpu")
    torch.testing.assert_close(block(x, causal=True, cache=cache), block(x, causal=True))
    assert int(cache.position) == 3 and cache.k[0][:, :, :3].abs().sum() > 0
