"""The derived settings of a labelled-text run (`anyformer train --data texts.csv` with no recipe): the
length texts are cut to, the batch, the passes, the model (the pretrained MiniLM encoder with its lower
blocks frozen as the data's size requires, or a TextEncoder from scratch) and the learning rate, each
said with its reason. The task itself is textclass.py."""
from __future__ import annotations

import math
from typing import Any

import torch

from ..data.split import holdout_fraction
from ..data.text.inputs import encode_texts
from ..data.text.labelled import describe_text_source, read_labelled_text
from . import textclass
from .text_choice import CHOOSE
from .textclass import BPE_PIECES, HELD_OUT_FILE, INSTALL_HINT, MINILM, class_names, minilm_tokenizer

MAX_TOKENS = 128       # the length texts are cut to: most reviews, tickets and messages fit; longer ones cost O(N^2)
# Chosen by 3-fold scores on fortunes by category (benchmarks/text_select.py, its rule written before its
# runs; docs/results.md, 'Labelled text'): the pretrained encoder's top 4 blocks trained for 2
# passes at 1e-4 (77.6% mean accuracy) against the top 2 for 3 passes at 2e-4 (76.5%) or 5e-5 (68.4%);
# TF-IDF + logistic regression 55.7% on the same folds.
TRAINED_LAYERS = 4
EPOCHS = 2
# ... but at least MIN_UPDATES optimiser steps: on small sets (fortunes-people, ~530 training texts a fold)
# 150 updates scored 82.8% against 76.1% for two passes (68 updates) and 81.7% for 300 (text_select.py round 2).
MIN_UPDATES = 150
LR_PRETRAINED, LR_SCRATCH = 1e-4, 5e-4
BATCH = 16
# The pretrained path adds a lexical term (a weight per word piece and class on the text's bag of pieces,
# models/text_classifier.py), learning at 1000x the encoder's rate: chosen by 3-fold scores on
# debian-sections and fortunes-people (text_select.py round 5), 84.4% mean accuracy against 83.1% without
# it (debian-sections +2.0 points, fortunes-people +0.5), where 30x and 100x had moved nothing (round 4).
# "choose" decides per run on its own training texts (text_choice.py): measured in round 10, not chosen
# (its trials chose the term on all 9 folds at about 3x the time).
LEXICAL: bool | str = True
# The linear head learns at 100x the encoder's rate (from small random weights, at 1e-4 it barely moves in
# 150 updates): chosen by the same 9 folds (text_select.py round 11), 77.7% mean accuracy against 77.1% at
# 1x and 77.6% at 10x (debian-sections +1.2 points, fortunes-people +0.5, debian-names -0.1).
HEAD_LR_SCALE = 100.0
# Seconds a run may spend training, and the token-blocks a second a trained MiniLM block goes through
# forward and backward on 2 CPU cores (measured in text_select.py's runs: 3,600 to 3,800 with a load average
# of 3-4 from other jobs on the machine, 2,400 at 6-7; the machine was never idle). Where the chosen blocks
# would take longer, more lower blocks are frozen (their states computed once, a third of a trained block's
# cost each), a plain function of the data's size, so that the same data gives the same run on any machine.
TIME_BUDGET_S = 240.0
BLOCK_TOKENS_PER_S = 3600.0


def frozen_for(tokens: int, epochs: float, depth: int = 6, trained: int = TRAINED_LAYERS) -> int:
    """Blocks to freeze so that `epochs` passes over `tokens` training tokens fit TIME_BUDGET_S: at least
    depth - trained; all of them (a head on fixed states) where nothing else fits."""
    for frozen in range(max(0, depth - trained), depth + 1):
        if tokens * (epochs * (depth - frozen) + frozen / 3) / BLOCK_TOKENS_PER_S <= TIME_BUDGET_S:
            return frozen
    return depth


def _kept(frozen: int, lengths: list[int], length: int, depth: int = 6, width: int = 384) -> str:
    """How the frozen blocks' states are kept (textclass.STATES_BYTES), said for the file's texts."""
    if frozen == depth:
        return "each text's mean state computed once"
    size = textclass.states_bytes(sum(min(n, length) for n in lengths), width)
    if size <= textclass.STATES_BYTES:
        return "their states computed once"
    return (f"their states computed again at every step: keeping them would take about {size / 1024 ** 3:.1f} GiB, "
            f"over {textclass.STATES_BYTES / 1024 ** 3:.0f}")


def _lexical(asked: dict[str, Any], default: bool | str) -> bool | str:
    """Whether the model adds the lexical term: as asked (`--set lexical=true|false`), else `default`;
    "choose" (`--set lexical=choose`) is answered before the run starts, on its training texts
    (text_choice.resolve_lexical, which says why)."""
    wanted = (asked.get("model_overrides") or {}).get("lexical", default)
    return CHOOSE if wanted == CHOOSE else bool(wanted)


def text_settings(data: str, asked: dict[str, Any], forced: bool = False) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(what the labelled text is, in one line; its run's settings; why each was derived). `forced`: the
    user said the data is labelled text (--task text), so a table's one column beside the label is its text."""
    source = describe_text_source(data, asked.get("label_column"), asked.get("text_column"), lone=forced)
    train, test = read_labelled_text(source)
    classes = class_names(train.labels)
    n = len(train)
    why: dict[str, str] = {}
    fraction = None
    n_train = n
    if test is None:
        labels = textclass.label_ids(train, classes)
        fraction = holdout_fraction(labels, asked.get("val_fraction"))
        held = sum(round(fraction * int(c)) for c in torch.bincount(labels) if c)
        why["val_fraction"] = (f"{fraction:.2f}: no test part, so a seeded share of each class is held out "
                               f"({held:,} of {n:,} texts, listed in the run's {HELD_OUT_FILE})")
        n_train = n - held
    pretrained = textclass.minilm_available()  # looked up at call time: tests stand in for a missing package
    length = int(asked.get("seq_len") or MAX_TOKENS)
    if pretrained:
        lengths = [len(x) for x in encode_texts(minilm_tokenizer(100_000), train.texts)]
    else:  # no tokenizer yet (it is learned from the training part): about 4 characters a token
        lengths = [2 + len(t) // 4 for t in train.texts]
    cut = sum(n_tok > length for n_tok in lengths)
    tokens = round(sum(min(n_tok, length) for n_tok in lengths) * n_train / max(1, n))
    why["seq_len"] = (f"{length}: texts are cut to their first {length} tokens ({cut:,} of {n:,} are longer"
                      f"{'' if pretrained else ', estimated'}; the longest is {max(lengths, default=0):,})")
    batch = int(asked.get("batch_size") or max(1, min(BATCH, n_train // 4)))
    why["batch_size"] = f"{batch}: at most {BATCH} texts, and at most a quarter of the {n_train:,} training texts"
    per_epoch = math.ceil(n_train / batch)
    epochs = max(EPOCHS, round(MIN_UPDATES / per_epoch, 2)) if MIN_UPDATES else EPOCHS
    why["epochs"] = (f"{epochs:g}: passes over the {n_train:,} training texts"
                     + (f", at least {MIN_UPDATES} updates" if MIN_UPDATES else ""))
    total = (int(asked["max_steps"]) if asked.get("max_steps") else
             max(1, round((asked.get("epochs") or epochs) * per_epoch)))
    warmup = max(1, total // 10)
    why["warmup_steps"] = f"{warmup}: a tenth of the run's {total:,} steps"
    eval_every = max(1, total // 3)
    why["eval_every"] = f"{eval_every}: 3 evaluations (none of them chooses anything)"
    overrides: dict[str, Any]
    if pretrained:
        frozen = frozen_for(tokens, total / max(1, per_epoch))
        lexical = _lexical(asked, LEXICAL)
        overrides = dict(init=MINILM, frozen_layers=frozen, max_positions=512, pooler=False, lexical=lexical,
                         head_lr_scale=HEAD_LR_SCALE)
        why["model"] = (f"minilm-classifier: the pretrained {MINILM} encoder (6 blocks, width 384) fine-tuned, the "
                        f"mean of its tokens into a linear head (learning at {HEAD_LR_SCALE:g}x the encoder's rate)"
                        + ({True: ", plus a linear term on the bag of word pieces", False: "",
                            CHOOSE: ", plus a linear term on the bag of word pieces where the lexical line "
                                    "says so"}[lexical]) + "; "
                        + (f"the embeddings and the first {frozen} of 6 blocks frozen "
                           f"({_kept(frozen, lengths, length)}), "
                           f"so that {total / max(1, per_epoch):.3g} passes over ~{tokens:,} training tokens fit about "
                           f"{TIME_BUDGET_S:.0f} s on 2 cores" if frozen else "every layer trained"))
        model, lr = "minilm-classifier", LR_PRETRAINED
    else:
        overrides = dict(init="random", max_positions=max(length, 128), pooler=False)
        if _lexical(asked, False) == CHOOSE:  # off by default here; chosen where asked
            overrides["lexical"] = CHOOSE
        why["model"] = (f"text-classifier-small: anyformer's own TextEncoder (4 blocks, width 256) from scratch with "
                        f"a BPE of up to {BPE_PIECES:,} pieces learned from the training texts; {INSTALL_HINT}")
        model, lr = "text-classifier-small", LR_SCRATCH
    why["lr"] = f"{lr:g}: {'fine-tuning a pretrained encoder' if pretrained else 'a model trained from scratch'}"
    skipped = source.skipped
    if skipped:
        why["skipped"] = "; ".join(f"{k!r} ({v})" for k, v in list(skipped.items())[:6]) + (
            f"; and {len(skipped) - 6} more" if len(skipped) > 6 else "")
    mean_chars = sum(len(t) for t in train.texts) / max(1, n)
    names = (source.text_column or "").split(",")
    column = (f"a text column {names[0]!r}" if len(names) == 1 else
              "text columns " + ", ".join(map(repr, names[:-1])) + f" and {names[-1]!r}, read as one text")
    where = (f"{column} ({mean_chars:,.0f} characters on average), label "
             f"{source.label_column!r}" if source.layout == "table" else
             f"{n:,} text files in {len(classes)} class folders ({mean_chars:,.0f} characters on average)")
    what = (f"labelled text: {where}, {len(classes)} classes, {n:,} texts"
            + (f" (and a test part of {len(test):,})" if test is not None else ""))
    values = dict(task="text-classify", model=model, data=data, label_column=source.label_column,
                  text_column=source.text_column,
                  val_fraction=fraction, batch_size=batch, epochs=epochs, seq_len=length, lr=lr, weight_decay=0.01,
                  warmup_steps=warmup, eval_every=eval_every, label_smoothing=0.0, grad_clip=1.0, amp="none",
                  compile=False, eval_batch_size=64, model_overrides=overrides)
    return what, values, why
