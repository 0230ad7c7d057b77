"""The next token from a language model's logits: greedy, temperature, top-k and nucleus (top-p)
sampling (Holtzman et al. 2020)."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["filter_logits", "sample"]


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> Tensor:
    """(B, V) logits divided by the temperature (> 0), all but the top_k and all but the smallest set
    of tokens whose probabilities reach top_p set to -inf: softmax of them is what `sample` draws from."""
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cum - sorted_logits.softmax(dim=-1) >= top_p  # keep the smallest set reaching top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return logits


def sample(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
           generator: torch.Generator | None = None) -> Tensor:
    """(B, V) logits -> (B, 1) ids: greedy at temperature 0, else top-k / nucleus sampling."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = filter_logits(logits, temperature, top_k, top_p).softmax(dim=-1)
    # Drawn where the generator lives (the CLI's and the server's are CPU generators, which CUDA's
    # multinomial refuses), then moved to the logits: the same seed gives the same tokens on any device.
    device = logits.device if generator is None else generator.device
    return torch.multinomial(probs.to(device), 1, generator=generator).to(logits.device)
