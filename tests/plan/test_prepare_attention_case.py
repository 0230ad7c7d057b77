"""The key `plan.prepare` asks the planner about an attention call by (`_attention_case`): the
layout (packed, views, cache), the keys a cached or static-cache call attends over, a mask, dropout
in training only, autocast's precision."""
from __future__ import annotations

import torch

from anyformer.nn import KVCache, RotaryEmbedding

from .prepare_doubles import F32, case, door, planned_attention


def test_a_plain_self_attention_call_is_keyed_whole_packed():
    attn, x = planned_attention(), torch.randn(3, 5, 16)
    assert door._attention_case(attn, x) == case()
    assert door._attention_case(attn, x, causal=True) == case(causal=True)


def test_a_mask_or_fewer_queries_take_the_views_layout():
    attn, x = planned_attention(), torch.randn(3, 5, 16)
    padding = torch.ones(3, 5, dtype=torch.bool)
    assert door._attention_case(attn, x, mask=padding) == case(masked=True, layout="views")
    assert door._attention_case(attn, x, queries=1) == case(q_len=1, layout="views")
    assert door._attention_case(attn, x, queries=9) == case(layout="views")  # at most all of them query


def test_a_rotary_or_cross_attention_layer_takes_the_views_layout():
    rotary = planned_attention(rotary=RotaryEmbedding(8, 32))
    assert door._attention_case(rotary, torch.randn(3, 5, 16), causal=True) == case(causal=True, layout="views")
    cross = planned_attention(cross=True, context_width=6)
    assert door._attention_case(cross, torch.randn(3, 5, 16), torch.randn(3, 7, 6)) == case(k_len=7, layout="views")


def test_a_locality_layer_is_keyed_masked_in_the_views_layout():
    """It masks its own diagonal and scales q between the projection and attention."""
    attn, x = planned_attention(locality=True), torch.randn(3, 5, 16)
    assert door._attention_case(attn, x) == case(masked=True, layout="views")
    assert door._attention_case(attn, x, queries=1) == case(q_len=1, masked=True, layout="views")


def test_a_cached_call_attends_over_the_whole_cache_masked():
    """Whatever the cache's position, a call reads every position of its buffer, with its own mask in
    place of the causal one."""
    attn, cache = planned_attention(), KVCache(1, 3, 2, 8, 16, F32, "cpu")
    assert door._attention_case(attn, torch.randn(3, 5, 16), causal=True, cache=cache) == \
        case(k_len=16, masked=True, layout="cache")
    cache.position.fill_(5)
    assert door._attention_case(attn, torch.randn(3, 1, 16), causal=True, cache=cache) == \
        case(q_len=1, k_len=16, masked=True, layout="cache")


def test_attention_dropout_counts_in_training_only():
    x = torch.randn(3, 5, 16)
    dropping = planned_attention(attn_dropout=0.1)
    assert door._attention_case(dropping, x) == case()  # eval: no dropout
    assert door._attention_case(dropping.train(), x) == case(layout="views", dropout=True)
    assert door._attention_case(planned_attention().train(), x) == case()  # training without any


def test_under_autocast_the_case_has_autocasts_precision():
    attn, x = planned_attention(), torch.randn(3, 5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # packed still: the native kernel takes a bf16 projection whole (computed in fp32)
        assert door._attention_case(attn, x) == case(dtype=torch.bfloat16)
