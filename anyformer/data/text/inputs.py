"""A text classifier run's inputs and answers: its saved tokenizer (tokenizer.json, truncation included),
texts into padded token ids, and texts into class probabilities. What train, eval, predict, serve and
open_run share, so that a text is read exactly as training read it."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

__all__ = ["TOKENIZER_FILE", "classify_texts", "encode_texts", "pad", "saved_tokenizer", "text_probabilities"]

TOKENIZER_FILE = "tokenizer.json"


def saved_tokenizer(run_dir: str | Path) -> Any:
    from tokenizers import Tokenizer
    path = Path(run_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a text classifier run keeps its tokenizer there")
    return Tokenizer.from_file(str(path))


def encode_texts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(list(texts))]


def pad(ids: list[list[int]]) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask) (B, longest), padded with 0 ([PAD] in both tokenizers)."""
    n = max((len(x) for x in ids), default=1)
    out = torch.zeros(len(ids), n, dtype=torch.long)
    mask = torch.zeros(len(ids), n, dtype=torch.long)
    for i, x in enumerate(ids):
        out[i, :len(x)] = torch.tensor(x, dtype=torch.long)
        mask[i, :len(x)] = 1
    return out, mask


@torch.no_grad()
def text_logits(model: nn.Module, tokenizer: Any, texts: list[str], batch: int = 64) -> Tensor:
    """(len(texts), classes) float32 logits of texts, in batches of similar length (less padding)."""
    ids = encode_texts(tokenizer, texts)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.zeros(len(ids), model.config.num_classes)
    for k in range(0, len(order), batch):
        part = order[k:k + batch]
        x, m = pad([ids[i] for i in part])
        out[part] = model(x, m).float()
    return out




def text_probabilities(model: nn.Module, tokenizer: Any, texts: Sequence[str], batch: int = 64) -> Tensor:
    """(len(texts), classes) float32 class probabilities."""
    return text_logits(model, tokenizer, list(texts), batch).softmax(-1)


def classify_texts(model: nn.Module, tokenizer: Any, classes: Sequence[str], texts: Sequence[str],
                   top: int = 3) -> list[list[tuple[str, float]]]:
    """Each text's `top` classes with their probabilities, best first."""
    if isinstance(texts, str):
        raise TypeError("expected a list of texts, got one string; wrap it in a list")
    bad = next((t for t in texts if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(f"expected texts (str), got {type(bad).__name__}")
    probs = text_probabilities(model, tokenizer, texts)
    best = probs.topk(min(top, probs.shape[1]), dim=-1) if len(texts) else None
    return [[(classes[i], p) for p, i in zip(v, k)] for v, k in zip(best.values.tolist(), best.indices.tolist())] \
        if best is not None else []
