"""A lean GPT in the style of nanoGPT's model.py, written for the benchmarks as the "what a careful
single-file implementation reaches" reference. Not a copy: the same architecture and the same
choices (pre-norm blocks, fused QKV, SDPA attention, tied embeddings, dropout after the
embeddings, on the attention matrix and on both residual branches), in our own words.

Parameter names follow nanoGPT (and so GPT-2): transformer.wte / wpe / h.i.{ln_1, attn.c_attn,
attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj} / ln_f, lm_head; every weight is an nn.Linear layout
(out, in), so loading another implementation's weights is a renaming.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class RefConfig:
    vocab_size: int = 65
    block_size: int = 256
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    attn_dropout: float | None = None  # dropout on the attention matrix; None: same as `dropout` (nanoGPT)
    bias: bool = True                  # biases in the linears and LayerNorms, as GPT-2
    gelu: str = "none"                 # "none": exact erf GELU (nanoGPT); "tanh": GPT-2's approximation


class SelfAttention(nn.Module):
    def __init__(self, c: RefConfig) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.attn_p = c.dropout if c.attn_dropout is None else c.attn_dropout
        self.resid_dropout = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.attn_p if self.training else 0.0)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c: RefConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU(approximate=c.gelu)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c: RefConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.attn = SelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.mlp = MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class RefGPT(nn.Module):
    def __init__(self, c: RefConfig) -> None:
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout),
            h=nn.ModuleList(Block(c) for _ in range(c.n_layer)),
            ln_f=nn.LayerNorm(c.n_embd, bias=c.bias),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied: one matrix reads and writes tokens
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled by depth
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        T = idx.shape[1]
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# anyformer GPT parameter name (per block) -> nanoGPT's
_BLOCK_NAMES = {"norm1": "ln_1", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj", "norm2": "ln_2",
                "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj"}


def state_dict_from_anyformer(weights: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """An anyformer GPT's state dict (learned positions, biases, tied head) renamed for RefGPT."""
    sd = {"transformer.wte.weight": weights["tok_embed.weight"],
          "transformer.wpe.weight": weights["pos.pos_embed"][0],
          "transformer.ln_f.weight": weights["backbone.norm.weight"],
          "transformer.ln_f.bias": weights["backbone.norm.bias"],
          "lm_head.weight": weights["tok_embed.weight"]}
    for i in range(n_layer):
        for ours, theirs in _BLOCK_NAMES.items():
            for p in ("weight", "bias"):
                sd[f"transformer.h.{i}.{theirs}.{p}"] = weights[f"backbone.blocks.{i}.{ours}.{p}"]
    return sd
