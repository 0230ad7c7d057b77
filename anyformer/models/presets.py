"""One preset table for every model family (big_vision style: a name -> the few numbers that differ).

Standard shapes: ViT from Dosovitskiy et al. (Ti/S from DeiT), GPT-2 from Radford et al.,
BERT-base from Devlin et al.
"""
from __future__ import annotations

from typing import Any

_VIT_224 = dict(image_size=224, in_chans=3, num_classes=1000)
_GPT2 = dict(vocab_size=50257, context=1024)

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # Vision Transformers: width, depth, heads, MLP hidden, patch.
    "vit-ti/16": ("vit", dict(_VIT_224, patch_size=16, width=192, depth=12, heads=3, mlp_hidden=768)),
    "vit-s/16": ("vit", dict(_VIT_224, patch_size=16, width=384, depth=12, heads=6, mlp_hidden=1536)),
    "vit-b/16": ("vit", dict(_VIT_224, patch_size=16, width=768, depth=12, heads=12, mlp_hidden=3072)),
    "vit-b/32": ("vit", dict(_VIT_224, patch_size=32, width=768, depth=12, heads=12, mlp_hidden=3072)),
    "vit-l/16": ("vit", dict(_VIT_224, patch_size=16, width=1024, depth=24, heads=16, mlp_hidden=4096)),
    "vit-h/14": ("vit", dict(_VIT_224, patch_size=14, width=1280, depth=32, heads=16, mlp_hidden=5120)),
    # The tiny ViT of Turner's 'An Introduction to Transformers' (2023), as written: patch 4, width 128, 8 blocks of 8 heads, MLP hidden 128,
    # no final norm, a one-hidden-layer GELU MLP on the class token, Keras' LayerNorm epsilon.
    "vit-mnist": ("vit", dict(image_size=28, in_chans=1, num_classes=10, patch_size=4, width=128, depth=8,
                              heads=8, mlp_hidden=128, head_hidden=128, head_activation="gelu",
                              final_norm=False, norm_eps=1e-3)),
    # The default MNIST model: a hybrid ViT (the ViT paper's section 3.1) whose 7x7 grid of tokens comes from
    # two 3x3 stride-2 convolutions instead of one 4x4 patch projection; width 64, 6 blocks of 4 heads, MLP 128
    # (0.21M parameters): on MNIST it reaches 99% in under half the epochs the same transformer on plain 4x4
    # patches needs to come close (measured: docs/results.md, 'Measurements behind the code's choices').
    # `--set stem=patch` gives the pure ViT.
    "vit-mnist-fast": ("vit", dict(image_size=28, in_chans=1, num_classes=10, patch_size=4, width=64, depth=6,
                                   heads=4, mlp_hidden=128, stem="conv")),
    # A small masked autoencoder for 28x28 grey images (2-core CPU sized): a 4-block ViT trunk of width 128 on
    # 4x4 patches (49; 12 stay visible at 75% masking) and a 2-block decoder of width 64. Its encoder is exactly
    # "vit-mae-mnist"'s trunk, so an MAE run's weights fine-tune that ViT (`--init-from`).
    "mae-mnist": ("mae", dict(image_size=28, in_chans=1, patch_size=4, width=128, depth=4, heads=4, mlp_hidden=256,
                              decoder_width=64, decoder_depth=2, decoder_heads=4, decoder_mlp_hidden=128)),
    "vit-mae-mnist": ("vit", dict(image_size=28, in_chans=1, num_classes=10, patch_size=4, width=128, depth=4,
                                  heads=4, mlp_hidden=256, position="sinusoidal", pool="mean")),
    # GPT-2 family: width, depth, heads (MLP 4x, tanh GELU, tied head).
    "gpt2": ("gpt", dict(_GPT2, width=768, depth=12, heads=12)),
    "gpt2-medium": ("gpt", dict(_GPT2, width=1024, depth=24, heads=16)),
    "gpt2-large": ("gpt", dict(_GPT2, width=1280, depth=36, heads=20)),
    "gpt2-xl": ("gpt", dict(_GPT2, width=1600, depth=48, heads=25)),
    # nanoGPT's shakespeare_char model: characters, 6 layers of 6 heads, width 384, context 256.
    "shakespeare-char": ("gpt", dict(vocab_size=65, context=256, width=384, depth=6, heads=6,
                                     dropout=0.2, bias=False, activation="gelu")),
    # Flow-matching generators (DiT with adaLN-Zero blocks): 28x28 grey digits or clothes, 10 classes.
    "dit-mnist": ("dit", dict(image_size=28, in_chans=1, num_classes=10, patch_size=4, width=192, depth=6,
                              heads=6, mlp_hidden=768)),
    # Time-series classifiers (`anyformer train series`): the data fixes channels, length and classes; the
    # recipe derives the patch from the length (anyformer/train/series.py).
    "series-small": ("series", dict(channels=1, length=128, patch_size=8, num_classes=2, width=64, depth=3,
                                    heads=4, mlp_hidden=128)),
    # Table models (`anyformer train --data table.csv`): the data fixes the columns and the outputs; the sizes
    # are derived from the table (anyformer/train/tables.py).
    "table-small": ("table", dict(numbers=2, categories=[4], task="classify", outputs=2, width=64, depth=3, heads=4,
                                  mlp_hidden=128)),
    # BERT-style encoders (post-norm).
    "bert-base": ("text-encoder", dict(width=768, depth=12, heads=12, mlp_hidden=3072)),
    "minilm-l6": ("text-encoder", dict(width=384, depth=6, heads=12, mlp_hidden=1536)),
    # Text classifiers (`anyformer train --data texts.csv`): all-MiniLM-L6-v2's shape (its weights loaded by the
    # task), or a small encoder trained from scratch on a BPE learned from the texts (anyformer/train/textclass.py).
    "minilm-classifier": ("text-classifier", dict(width=384, depth=6, heads=12, mlp_hidden=1536, pooler=False,
                                                  init="all-MiniLM-L6-v2")),
    "text-classifier-small": ("text-classifier", dict(vocab_size=8000, max_positions=128, width=256, depth=4,
                                                      heads=4, mlp_hidden=512, pooler=False)),
}


def presets_of(family: str) -> list[str]:
    return [name for name, (fam, _) in PRESETS.items() if fam == family]
