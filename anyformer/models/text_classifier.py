"""Text classifier: a BERT-style TextEncoder, the mean of its real tokens' states, and a linear head.

The mean of the tokens, not BERT's [CLS] pooler: all-MiniLM-L6-v2 was trained as a sentence encoder
through exactly that mean (sentence-transformers), so a pretrained encoder starts with a useful
sentence vector under the head. `frozen_layers` keeps the embeddings and the first blocks fixed (no
gradient, no optimiser state), where fine-tuning every layer would not fit the run's time.

`lexical` adds a linear term on the bag of the text's word pieces to the logits (the "wide" half of
Cheng et al.'s 2016 wide & deep): one weight per piece and class, what a linear model on word counts
learns, for classes that hang on a few exact words (names, titles) which a pretrained sentence vector
blurs. Its weights start at zero and learn `lexical_lr_scale` times the encoder's learning rate: from
zero, at a fine-tuning rate, they would barely move in a run's few hundred steps. `lexical_pairs` buckets
add the same on adjacent pairs of pieces (hashed, as Vowpal Wabbit and fastText hash their n-grams): the
word bigrams a TF-IDF model reads ("new york", "not good"), without a vocabulary of pairs to build.

`prior` adds a fitted TF-IDF + logistic regression on the token 1-2 grams (nn/tfidf.py, fitted by
train/text_prior.py; `prior_features` of them), times a learned factor `prior_scale` (from 1, at
`prior_lr_scale` times the encoder's rate): the network learns what the linear model misses, and how far
to trust it. In training the task gives `prior=`, each text's logits from a fit that never saw it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
from torch import Tensor, nn

from ..nn.dropout import Dropout
from ..nn.tfidf import TfidfLinear
from .base import Model, check_sizes
from .text_encoder import TextEncoder, TextEncoderConfig


@dataclass
class TextClassifierConfig(TextEncoderConfig):
    num_classes: int = 2
    head_dropout: float = 0.1
    frozen_layers: int = 0          # the embeddings and this many first blocks take no gradient (0: none)
    init: str = "random"            # where the encoder's weights started: "random" or "all-MiniLM-L6-v2"
    lexical: bool = False           # a linear term on the bag of word pieces, added to the logits
    # 1000x: chosen over 30x, 100x and 300x (benchmarks/text_select.py rounds 4 and 5, on CHOOSE sets only)
    lexical_lr_scale: float = 1000.0
    lexical_pairs: int = 0          # hash buckets for adjacent pairs of pieces in the lexical term (0: none)
    prior: bool = False             # a fitted TF-IDF + logistic regression's logits, scaled, added to the logits
    prior_features: int = 0         # its 1-2 grams (set from the training texts by the task)
    prior_lr_scale: float = 100.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_sizes(self, ("num_classes",))
        if self.lexical_pairs < 0 or (self.lexical_pairs and not self.lexical):
            raise ValueError(f"lexical_pairs must be 0, or a number of buckets with lexical on; got "
                             f"{self.lexical_pairs} with lexical={self.lexical}")
        for name in ("lexical_lr_scale", "prior_lr_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.prior_features < 0:
            raise ValueError(f"prior_features must be 0 or more, got {self.prior_features}")
        if not 0 <= self.frozen_layers <= self.depth:
            raise ValueError(f"frozen_layers must lie in [0, depth={self.depth}], got {self.frozen_layers}")

    def encoder_config(self) -> TextEncoderConfig:
        own = {f.name for f in fields(TextEncoderConfig)}
        return TextEncoderConfig(**{k: v for k, v in asdict(self).items() if k in own})


class TextClassifier(Model):
    """`model(input_ids, attention_mask)` -> (B, classes) logits."""

    family = "text-classifier"
    config_class = TextClassifierConfig

    def __init__(self, config: TextClassifierConfig) -> None:
        super().__init__()
        self.config = c = config
        self.encoder = TextEncoder(c.encoder_config())
        self.head_drop = Dropout(c.head_dropout) if c.head_dropout > 0 else None
        self.head = nn.Linear(c.width, c.num_classes)
        with torch.no_grad():
            self.head.weight.normal_(0, 0.02)
            self.head.bias.zero_()
        self.lexical = nn.Embedding(c.vocab_size, c.num_classes) if c.lexical else None
        self.lexical_pairs = nn.Embedding(c.lexical_pairs, c.num_classes) if c.lexical_pairs else None
        for table in (self.lexical, self.lexical_pairs):
            if table is not None:
                nn.init.zeros_(table.weight)
        self.prior = TfidfLinear(c.prior_features, c.num_classes, c.vocab_size) if c.prior else None
        self.prior_scale = nn.Parameter(torch.ones(())) if c.prior else None
        self.freeze(c.frozen_layers)

    @property
    def lr_scales(self) -> dict[str, float]:
        """Parameters (by name prefix) that learn at a multiple of the run's learning rate (train/optim.py)."""
        c = self.config
        return {name: scale for name, scale, part in (("lexical.", c.lexical_lr_scale, self.lexical),
                                                      ("lexical_pairs.", c.lexical_lr_scale, self.lexical_pairs),
                                                      ("prior_scale", c.prior_lr_scale, self.prior))
                if part is not None}

    @property
    def backbone(self) -> nn.Module:
        """The encoder's blocks, where every model keeps them."""
        return self.encoder.backbone

    def freeze(self, layers: int) -> None:
        """No gradient for the embeddings and the first `layers` blocks (none where `layers` is 0)."""
        e = self.encoder
        for module in (e.tok_embed, e.pos, e.type_embed, e.embed_norm):
            module.requires_grad_(layers == 0)
        for i, block in enumerate(e.backbone.blocks):
            block.requires_grad_(i >= layers)
        if e.pooler is not None:
            e.pooler.requires_grad_(False)  # unused by this model

    def pooled(self, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        if attention_mask is None:
            return hidden.mean(1)
        m = attention_mask.to(hidden.dtype)[..., None]
        return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)

    def bag(self, token_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """(B, classes): the lexical term, the sum of the real tokens' weights over the square root of their
        count (a long text is not louder than a short one, and one telling word still counts), plus the
        same over adjacent pairs of real tokens where `lexical_pairs` is on."""
        real = torch.ones_like(token_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        out = _mean_root(self.lexical(token_ids), real)
        if self.lexical_pairs is not None:
            pairs = pair_buckets(token_ids, self.config.lexical_pairs)
            out = out + _mean_root(self.lexical_pairs(pairs), real[:, 1:] & real[:, :-1])
        return out

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, *,
                tokens: tuple[Tensor, Tensor] | None = None, prior: Tensor | None = None) -> Tensor:
        """input_ids (B, N) int64 token ids -> (B, classes) logits. A float (B, N, D) in their place is the
        tokens' states after the frozen blocks (`frozen_states`): training computes those once, since
        they never change, and runs the trained blocks alone on them; the lexical term and the prior then
        read `tokens`, the texts' (token ids, attention mask). `prior` (B, classes) stands for the prior's
        logits (training's out-of-fold ones). Attention weights (token 0 is [CLS]):
        `nn.attention_weights(model, layers)` around the call."""
        logits = self._deep(input_ids, attention_mask)
        if self.lexical is None and self.prior is None:
            return logits
        ids, mask = (input_ids, attention_mask) if tokens is None else tokens
        if ids.is_floating_point() and (self.lexical is not None or prior is None):
            raise ValueError("a lexical or prior model given states needs tokens=(token ids, attention mask)")
        if self.lexical is not None:
            logits = logits + self.bag(ids, mask).to(logits.dtype)
        if self.prior is not None:
            prior = self.prior(ids, mask) if prior is None else prior
            logits = logits + self.prior_scale * prior.to(logits.dtype)
        return logits

    def _deep(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        if input_ids.is_floating_point():
            mask = None if attention_mask is None else attention_mask.bool()
            hidden = input_ids
            for block in self.encoder.backbone.blocks[self.config.frozen_layers:]:
                hidden = block(hidden, mask=mask)
        else:
            hidden = self.encoder(input_ids, attention_mask)
        x = self.pooled(hidden, attention_mask)
        return self.head(x if self.head_drop is None else self.head_drop(x))

    @torch.no_grad()
    def frozen_states(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(B, N, D): the tokens after the embeddings and the frozen blocks, in eval mode (no dropout)."""
        e = self.encoder
        x, mask = e._embed(input_ids, attention_mask, None)
        for block in e.backbone.blocks[:self.config.frozen_layers]:
            x = block(x, mask=mask)
        return x

    def forward_flops(self, seq_len: int | None = None) -> float:
        return self.encoder.forward_flops(seq_len) + 2.0 * self.config.width * self.config.num_classes


def pair_buckets(token_ids: Tensor, buckets: int) -> Tensor:
    """(B, N - 1): each adjacent pair (a, b) of token ids hashed to a bucket, (a * 1000003 + b) mod buckets:
    the multiplier, a prime above any vocabulary's size, keeps (a, b) and (b, a) apart."""
    a, b = token_ids[:, :-1].long(), token_ids[:, 1:].long()
    return torch.remainder(a * 1_000_003 + b, buckets)


def _mean_root(weights: Tensor, real: Tensor) -> Tensor:
    """(B, classes): the real positions' (B, N, classes) weights summed, over the square root of their count."""
    m = real.to(weights.dtype)[..., None]
    return (weights * m).sum(1) / m.sum(1).clamp_min(1.0).sqrt()
