"""The documented defaults of the layers, and the dtype rotary positions come back in: a default
changed by accident changes every model built without that argument."""
import torch

from anyformer.nn import ConcatPosition, RotaryEmbedding, TimeEmbedding, Transformer, attention_weights
from anyformer.nn.conditioning import timestep_sinusoid


def test_the_time_sinusoid_spreads_t_over_a_thousand_positions_by_default():
    t = torch.tensor([0.3])
    torch.testing.assert_close(timestep_sinusoid(t, 8), timestep_sinusoid(t, 8, scale=1000.0, base=10000.0))
    emb = TimeEmbedding(16)
    assert emb.freq_dim == 256 and emb.mlp[0].in_features == 256 and emb.scale == 1000.0


def test_rotary_positions_start_at_zero_and_keep_the_inputs_dtype():
    rope = RotaryEmbedding(4, max_len=8)
    t = torch.randn(1, 1, 3, 4)
    torch.testing.assert_close(rope(t), rope(t, offset=0))
    torch.testing.assert_close(rope(t)[..., 0, :], t[..., 0, :])  # position 0 is not turned
    half = t.to(torch.bfloat16)
    assert rope(half).dtype == torch.bfloat16


def test_concatenated_positions_start_at_a_standard_deviation_of_0_02():
    torch.manual_seed(0)
    assert 0.018 < ConcatPosition(500, 40).pos_embed.std() < 0.022


def test_the_backbone_hands_over_every_layer_s_weights_by_default():
    trunk = Transformer(8, 3, 2).eval()
    x = torch.randn(1, 4, 8)
    with attention_weights(trunk) as weights:
        trunk(x)
    assert len(weights) == 3
