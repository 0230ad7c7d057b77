"""Floor 1: the building blocks, pure torch.nn modules."""
from .attend import ATTENTION_FUNCTIONS
from .attention import ATTENTION_IMPLS, KVCache, MultiHeadAttention, attention_explicit
from .conditioning import (AdaLNModulation, ClassEmbedding, FinalAdaLN, TimeEmbedding, modulate,
                           timestep_sinusoid)
from .embeddings import ClassToken, LinearEmbedding, PatchEmbedding, TokenEmbedding
from .dropout import Dropout
from .columns import NUMBER_EMBEDDINGS, CategoryEmbedding, NumberEmbedding
from .heads import ClassifierHead, LMHead, PatchOutput, RegressionHead
from .mlp import MLP, ConvMLP, GridMixing
from .positions import (POSITION_KINDS, ConcatPosition, LearnedPosition, RotaryEmbedding,
                        SinusoidalPosition, sinusoidal_1d, sinusoidal_2d)
from .transformer import (LayerScale, Transformer, TransformerBlock, attention_weights, backbone_of, drop_path,
                          init_weights)

__all__ = [
    "ATTENTION_FUNCTIONS", "ATTENTION_IMPLS", "KVCache", "MultiHeadAttention", "attention_explicit",
    "ClassToken", "LinearEmbedding", "PatchEmbedding", "TokenEmbedding",
    "ClassifierHead", "LMHead", "PatchOutput", "RegressionHead", "NUMBER_EMBEDDINGS", "CategoryEmbedding",
    "NumberEmbedding", "MLP", "ConvMLP", "GridMixing", "Dropout",
    "POSITION_KINDS", "ConcatPosition", "LearnedPosition", "RotaryEmbedding", "SinusoidalPosition",
    "sinusoidal_1d", "sinusoidal_2d", "LayerScale", "Transformer", "TransformerBlock", "attention_weights",
    "backbone_of", "drop_path", "init_weights", "AdaLNModulation", "ClassEmbedding", "FinalAdaLN", "TimeEmbedding", "modulate",
    "timestep_sinusoid",
]
