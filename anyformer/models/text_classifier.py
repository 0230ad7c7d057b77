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

`head_init="probe"` starts the head from a logistic regression fitted on the training texts' sentence
vectors before fine-tuning (LP-FT; the task fits it: train/text_probe.py), not from small random weights.

`members` makes the trained part a deep ensemble (Lakshminarayanan et al. 2017): beside the encoder's own
trained blocks and head, `extra_members` holds members - 1 copies of them (each from the same weights,
`sync_members`, with its own head and dropout), on the shared frozen blocks and the shared lexical term.
Each member learns from its own loss (`forward(..., each=True)` gives every member's logits); the model's
answer is their mean logits. Attention maps show the first member (the encoder's own blocks).
"""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields

import torch
from torch import Tensor, nn

from ..nn.dropout import Dropout
from ..nn.tfidf import TfidfLinear
from .base import Model, check_sizes
from .text_encoder import TextEncoder, TextEncoderConfig


HEAD_INITS = ("random", "probe")


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
    head_lr_scale: float = 1.0      # the linear head's (each member's) multiple of the encoder's rate
    head_init: str = "random"       # the head's start: "random" (std 0.02) or "probe" (train/text_probe.py)
    layer_lr_decay: float = 1.0     # block i of D learns at decay^(D - 1 - i) times the rate (the embeddings decay^D)
    members: int = 1                # an ensemble of this many trained tops (blocks after the frozen ones, and head)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_sizes(self, ("num_classes", "members"))
        if not isinstance(self.lexical, bool):  # "choose" is the derivation's to answer (train/text_choice.py)
            raise ValueError(f"lexical must be true or false (or, for a run derived from its data, choose), "
                             f"got {self.lexical!r}")
        if self.lexical_pairs < 0 or (self.lexical_pairs and not self.lexical):
            raise ValueError(f"lexical_pairs must be 0, or a number of buckets with lexical on; got "
                             f"{self.lexical_pairs} with lexical={self.lexical}")
        for name in ("lexical_lr_scale", "prior_lr_scale", "head_lr_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.layer_lr_decay <= 1:
            raise ValueError(f"layer_lr_decay must lie in (0, 1], got {self.layer_lr_decay}")
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"head_init must be one of {', '.join(HEAD_INITS)}, got {self.head_init!r}")
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
        self.extra_members = (nn.ModuleList(Member(self.encoder.backbone.blocks[c.frozen_layers:], c.width,
                                                   c.num_classes) for _ in range(c.members - 1))
                              if c.members > 1 else None)
        self.freeze(c.frozen_layers)

    @property
    def lr_scales(self) -> dict[str, float]:
        """Parameters (by name prefix) that learn at a multiple of the run's learning rate (train/optim.py)."""
        c = self.config
        scales = {name: scale for name, scale, part in (("lexical.", c.lexical_lr_scale, self.lexical),
                                                        ("lexical_pairs.", c.lexical_lr_scale, self.lexical_pairs),
                                                        ("prior_scale", c.prior_lr_scale, self.prior))
                  if part is not None}
        if c.head_lr_scale != 1.0:  # at 1 the head stays in the common groups: the optimiser as before
            scales["head."] = c.head_lr_scale
            scales.update({f"extra_members.{i}.head.": c.head_lr_scale for i in range(c.members - 1)})
        if c.layer_lr_decay != 1.0:  # layer-wise rate decay (ULMFiT, ELECTRA): lower blocks move less
            for i in range(c.depth):
                scales[f"encoder.backbone.blocks.{i}."] = c.layer_lr_decay ** (c.depth - 1 - i)
            for k in range(c.members - 1):  # a member's block j is the encoder's block frozen_layers + j
                for j in range(c.depth - c.frozen_layers):
                    scales[f"extra_members.{k}.blocks.{j}."] = c.layer_lr_decay ** (c.depth - 1 - c.frozen_layers - j)
            scales["encoder."] = c.layer_lr_decay ** c.depth  # the embeddings (after the blocks: first match wins)
        return scales

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

    @torch.no_grad()
    def sync_members(self) -> None:
        """Every member's blocks set to the encoder's trained blocks (after pretrained weights are loaded)."""
        for member in self.extra_members or ():
            for mine, theirs in zip(member.blocks, self.encoder.backbone.blocks[self.config.frozen_layers:]):
                mine.load_state_dict(theirs.state_dict())

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
                tokens: tuple[Tensor, Tensor] | None = None, prior: Tensor | None = None,
                each: bool = False) -> Tensor:
        """input_ids (B, N) int64 token ids -> (B, classes) logits (with `each`, (members, B, classes): every
        member's). A float (B, N, D) in their place is the tokens' states after the frozen blocks
        (`frozen_states`): training computes those once, since they never change, and runs the trained
        blocks alone on them; the lexical term and the prior then read `tokens`, the texts' (token ids,
        attention mask). `prior` (B, classes) stands for the prior's logits (training's out-of-fold ones).
        Attention weights (token 0 is [CLS]): `nn.attention_weights(model, layers)` around the call."""
        logits = self._members(input_ids, attention_mask)
        if self.lexical is not None or self.prior is not None:
            ids, mask = (input_ids, attention_mask) if tokens is None else tokens
            if ids.is_floating_point() and (self.lexical is not None or prior is None):
                raise ValueError("a lexical or prior model given states needs tokens=(token ids, attention mask)")
            if self.lexical is not None:
                logits = logits + self.bag(ids, mask).to(logits.dtype)
            if self.prior is not None:
                prior = self.prior(ids, mask) if prior is None else prior
                logits = logits + self.prior_scale * prior.to(logits.dtype)
        return logits if each else mean_of_members(logits)

    def _deep(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """(B, classes): the network's logits alone (no lexical term, no prior), the members' mean."""
        return mean_of_members(self._members(input_ids, attention_mask))

    def _members(self, input_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """(members, B, classes): each member's network logits."""
        f = self.config.frozen_layers
        if input_ids.is_floating_point():
            hidden, mask = input_ids, None if attention_mask is None else attention_mask.bool()
            first = _top(self.encoder.backbone.blocks[f:], hidden, mask)
        elif self.extra_members is None:
            first = self.encoder(input_ids, attention_mask)
        else:  # the frozen blocks once, shared by every member
            e = self.encoder
            hidden, mask = e._embed(input_ids, attention_mask, None)
            hidden = _top(e.backbone.blocks[:f], hidden, mask)
            first = _top(e.backbone.blocks[f:], hidden, mask)
        out = [self._head(self.head, first, attention_mask)]
        for member in self.extra_members or ():
            out.append(self._head(member.head, _top(member.blocks, hidden, mask), attention_mask))
        return torch.stack(out)

    def _head(self, head: nn.Linear, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
        x = self.pooled(hidden, attention_mask)
        return head(x if self.head_drop is None else self.head_drop(x))

    @torch.no_grad()
    def frozen_states(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(B, N, D): the tokens after the embeddings and the frozen blocks, in eval mode (no dropout)."""
        e = self.encoder
        x, mask = e._embed(input_ids, attention_mask, None)
        for block in e.backbone.blocks[:self.config.frozen_layers]:
            x = block(x, mask=mask)
        return x

    def forward_flops(self, seq_len: int | None = None) -> float:
        """The encoder's, each further member's share of it (its blocks after the frozen ones), and the heads."""
        c = self.config
        encoder = self.encoder.forward_flops(seq_len)
        members = (c.members - 1) * encoder * (c.depth - c.frozen_layers) / c.depth
        return encoder + members + 2.0 * c.width * c.num_classes * c.members


class Member(nn.Module):
    """One more member of an ensemble: its own copy of the trained blocks, and its own head."""

    def __init__(self, blocks: nn.ModuleList, width: int, classes: int) -> None:
        super().__init__()
        self.blocks = copy.deepcopy(blocks)
        self.head = nn.Linear(width, classes)
        with torch.no_grad():
            self.head.weight.normal_(0, 0.02)
            self.head.bias.zero_()


def _top(blocks: nn.ModuleList, hidden: Tensor, mask: Tensor | None) -> Tensor:
    for block in blocks:
        hidden = block(hidden, mask=mask)
    return hidden


def mean_of_members(logits: Tensor) -> Tensor:
    """(B, classes) from (members, B, classes): the mean, and one member's logits as they are."""
    return logits[0] if len(logits) == 1 else logits.mean(0)


def pair_buckets(token_ids: Tensor, buckets: int) -> Tensor:
    """(B, N - 1): each adjacent pair (a, b) of token ids hashed to a bucket, (a * 1000003 + b) mod buckets:
    the multiplier, a prime above any vocabulary's size, keeps (a, b) and (b, a) apart."""
    a, b = token_ids[:, :-1].long(), token_ids[:, 1:].long()
    return torch.remainder(a * 1_000_003 + b, buckets)


def _mean_root(weights: Tensor, real: Tensor) -> Tensor:
    """(B, classes): the real positions' (B, N, classes) weights summed, over the square root of their count."""
    m = real.to(weights.dtype)[..., None]
    return (weights * m).sum(1) / m.sum(1).clamp_min(1.0).sqrt()
