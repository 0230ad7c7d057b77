"""anyformer: one transformer backbone, input heads that turn any data into tokens, output heads
that turn tokens into answers."""
from .models import GPT, PRESETS, TextEncoder, ViT, load
from .nn import (MLP, ClassifierHead, ClassToken, LinearEmbedding, LMHead, MultiHeadAttention,
                 PatchEmbedding, PatchOutput, TokenEmbedding, Transformer, TransformerBlock)

__version__ = "0.1.0"

__all__ = ["GPT", "PRESETS", "TextEncoder", "ViT", "load", "MLP", "ClassifierHead", "ClassToken",
           "LinearEmbedding", "LMHead", "MultiHeadAttention", "PatchEmbedding", "PatchOutput",
           "TokenEmbedding", "Transformer", "TransformerBlock", "__version__"]
