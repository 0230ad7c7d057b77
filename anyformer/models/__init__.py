"""Floor 2: complete models, their configs, the preset table, save and load."""
from .base import REGISTRY, Model, load, read_config
from .dit import DiT, DiTConfig
from .gpt import GPT, GPTConfig
from .sampling import sample
from .mae import MAE, MAEConfig
from .presets import PRESETS, presets_of
from .series import SeriesConfig, SeriesTransformer
from .tabular import TableConfig, TableTransformer
from .text_classifier import TextClassifier, TextClassifierConfig
from .text_encoder import TextEncoder, TextEncoderConfig
from .vit import ViT, ViTConfig

__all__ = ["REGISTRY", "Model", "load", "read_config", "GPT", "GPTConfig", "sample", "PRESETS",
           "presets_of", "TextEncoder", "TextEncoderConfig", "ViT", "ViTConfig",
           "DiT", "DiTConfig", "MAE", "MAEConfig", "SeriesConfig", "SeriesTransformer",
           "TableConfig", "TableTransformer", "TextClassifier", "TextClassifierConfig"]
