"""Lookup tables and buffers read back: the token table and the ids it refuses, the patch grid it
checks, the LM head (tied or its own, with its bias), and a KV cache's dtype, device and masks."""
import pytest
import torch

from anyformer.models.gpt import GPT, GPTConfig
from anyformer.nn import LMHead, PatchEmbedding, TokenEmbedding
from anyformer.nn.attention import KVCache


def test_token_ids_of_every_integer_dtype_read_the_same_rows():
    emb = TokenEmbedding(300, 4)
    ids = torch.tensor([[0, 7, 255]])
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        torch.testing.assert_close(emb(ids.to(dtype)), emb.weight[[0, 7, 255]][None])


@pytest.mark.parametrize("ids,seen", [([[-1, 3]], r"\[-1, 3\]"), ([[0, 10]], r"\[0, 10\]"), ([[-2, 12]], r"\[-2, 12\]")])
def test_token_ids_outside_the_table_are_named(ids, seen):
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, 10\); got values in {seen}"):
        TokenEmbedding(10, 4)(torch.tensor(ids))


def test_token_ids_of_the_wrong_shape_are_named():
    assert TokenEmbedding(10, 4)(torch.tensor([[0, 9]])).shape == (1, 2, 4)  # the last row is in range
    with pytest.raises(ValueError, match=r"token ids must have shape \(B, T\), got \(3,\)"):
        TokenEmbedding(10, 4)(torch.tensor([1, 2, 3]))


@pytest.mark.parametrize("size", [(8, 6), (6, 8)])
def test_an_image_that_does_not_tile_into_patches_is_named_whichever_side_is_off(size):
    embed = PatchEmbedding((4, 4), 1, 8)
    with pytest.raises(ValueError, match=rf"image size {size[0]}x{size[1]} is not divisible by the patch size 4x4"):
        embed(torch.randn(1, 1, *size))
    assert embed.grid(8, 12) == (2, 3)
    with pytest.raises(ValueError, match="image size 12x8 is not divisible by the patch size 4x3"):
        PatchEmbedding((4, 3), 1, 8)(torch.randn(1, 1, 12, 8))  # the height tiles; the width does not


def test_the_lm_head_is_x_times_its_table_plus_its_bias():
    torch.manual_seed(0)
    head = LMHead(4, 6, bias=True)
    assert head.weight.shape == (6, 4) and 0.01 < head.weight.std() < 0.03  # N(0, 0.02)
    assert torch.equal(head.bias, torch.zeros(6))
    with torch.no_grad():
        head.bias.normal_()
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(head(x), x @ head.weight.T + head.bias)
    assert LMHead(4, 6).bias is None
    emb = TokenEmbedding(6, 4)
    assert LMHead(4, 6, tie_to=emb).weight is emb.weight
    with pytest.raises(ValueError, match=r"cannot tie LM head \(7, 4\) to an embedding of shape \(6, 4\)"):
        LMHead(4, 7, tie_to=emb)


def test_a_kv_cache_holds_zeros_of_its_dtype_on_its_device():
    cache = KVCache(3, 2, 3, 4, 5, dtype=torch.float64, device="meta")
    assert len(cache.k) == len(cache.v) == cache.layers == 3 and cache.max_len == 5
    for t in cache.k + cache.v:
        assert t.shape == (2, 3, 5, 4) and t.dtype == torch.float64 and t.device.type == "meta"
    assert len({id(t) for t in cache.k + cache.v}) == 6  # a buffer of its own each
    assert cache.position.device.type == "meta" and cache.position.dtype == torch.long
    fresh = KVCache(1, 1, 1, 2, 3, dtype=torch.bfloat16, device="cpu")
    assert fresh.k[0].dtype == torch.bfloat16 and not fresh.k[0].any() and not fresh.v[0].any()
    assert int(fresh.position) == 0


def test_an_update_makes_its_positions_and_mask_on_the_caches_device():
    cache = KVCache(1, 1, 1, 2, 6, dtype=torch.float32, device="meta")
    k = torch.empty(1, 1, 2, 2, device="meta")
    keys, values, mask = cache.update(0, k, k)
    assert mask.device.type == "meta" and mask.shape == (2, 6)
    cache = KVCache(1, 1, 1, 2, 6, dtype=torch.float32, device="cpu")
    cache.position.fill_(3)
    k = torch.ones(1, 1, 2, 2)
    _, _, mask = cache.update(0, k, 2 * k)
    assert mask.tolist() == [[True] * 4 + [False], [True] * 5]  # each new token sees up to itself (eager: cut there)
    assert cache.k[0][0, 0, 3:5].eq(1).all() and cache.v[0][0, 0, 3:5].eq(2).all() and not cache.k[0][0, 0, :3].any()


def test_generation_steps_run_the_lm_head_on_the_last_position_alone():
    # The head is a (D x V) product per position: a step that ran it on a whole window would be
    # up to context times dearer, for the same logits.
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=11, context=8, width=16, depth=1, heads=2)).eval()
    rows = []
    hook = gpt.lm_head.register_forward_pre_hook(lambda m, args: rows.append(args[0].shape[1]))
    try:
        gpt.generate(torch.tensor([[1, 2, 3]]), 10, temperature=0)  # past the context: the window slides
    finally:
        hook.remove()
    assert rows == [1] * 10


def test_the_linear_embedding_is_one_shared_map_with_a_bias_unless_told():
    from anyformer.nn import LinearEmbedding
    emb = LinearEmbedding(3, 4)
    x = torch.randn(2, 5, 3)
    torch.testing.assert_close(emb(x), x @ emb.proj.weight.T + emb.proj.bias)
    assert LinearEmbedding(3, 4, bias=False).proj.bias is None
    with pytest.raises(ValueError, match=r"expected vectors of shape \(B, N, 3\), got \(2, 5, 4\)"):
        emb(torch.randn(2, 5, 4))
