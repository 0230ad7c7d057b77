"""The states after a text classifier's frozen blocks, kept once for training: the same logits as the
model computes from the token ids, one vector a text where every block is frozen, and none kept where
they would pass the memory rule (the frozen blocks then run at every step, and the run still trains)."""
import json
from pathlib import Path

import pytest
import torch

from anyformer.cli import main
from anyformer.data.text.inputs import pad
from anyformer.models.text_classifier import TextClassifier, TextClassifierConfig
from anyformer.train import textclass
from anyformer.train.textclass import _states, pad_states

from .test_text_classify import FAST, texts


def tiny(frozen: int, lexical: bool = False, moved: bool = True, **config) -> TextClassifier:
    torch.manual_seed(0)
    cfg = TextClassifierConfig(**{**dict(vocab_size=50, max_positions=32, width=16, depth=2, heads=2, mlp_hidden=32,
                                         num_classes=3, frozen_layers=frozen, head_dropout=0.0, lexical=lexical),
                                  **config})
    model = TextClassifier(cfg).eval()
    if lexical and moved:  # weights away from their zero start, so that the term counts
        with torch.no_grad():
            model.lexical.weight.normal_()
    return model


IDS = [[2, 5, 7, 3], [2, 9, 3], [2, 11, 12, 13, 14, 15, 3], [2, 3]]


@pytest.mark.parametrize("frozen", [1, 2])
def test_kept_states_give_the_logits_of_the_token_ids(frozen):
    model = tiny(frozen)
    every = frozen == model.config.depth
    states = _states(model, IDS, batch=2, mean=every)
    if every:  # one vector a text: its mean state
        assert all(s.shape == (1, 16) for s in states)
    else:
        assert [s.shape[0] for s in states] == [len(x) for x in IDS]
    with torch.no_grad():
        from_ids = model(*pad(IDS))
        from_states = model(*pad_states(states))
    torch.testing.assert_close(from_states, from_ids, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("frozen", [1, 2])
def test_the_lexical_term_reads_the_same_pieces_beside_kept_states(frozen):
    model = tiny(frozen, lexical=True)
    states = _states(model, IDS, batch=2, mean=frozen == model.config.depth)
    with torch.no_grad():
        from_ids = model(*pad(IDS))
        from_states = model(*pad_states(states), tokens=pad(IDS))
        deep = model._deep(*pad(IDS))
    torch.testing.assert_close(from_states, from_ids, rtol=1e-5, atol=1e-5)
    # the term itself: each real piece's weights summed, over the square root of the text's length
    ids = torch.tensor(IDS[1])
    torch.testing.assert_close(from_ids[1] - deep[1], model.lexical.weight[ids].sum(0) / len(IDS[1]) ** 0.5)
    with pytest.raises(ValueError, match="needs tokens"):
        model(*pad_states(states))


def test_the_lexical_term_starts_at_zero_and_learns_at_its_own_rate():
    from anyformer.train.optim import param_groups
    model = tiny(0, lexical=True, moved=False, lexical_lr_scale=30)
    assert torch.count_nonzero(model.lexical.weight) == 0
    groups = param_groups(model, 0.01)
    scaled = [g for g in groups if "lr_scale" in g]
    assert [(g["lr_scale"], g["weight_decay"], len(g["params"])) for g in scaled] == [(30, 0.01, 1)]
    assert scaled[0]["params"][0] is model.lexical.weight
    assert sum(len(g["params"]) for g in groups) == sum(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="lexical_lr_scale"):
        TextClassifierConfig(lexical=True, lexical_lr_scale=0)


def test_the_head_learns_at_its_own_rate_and_each_members_head_too():
    from anyformer.train.optim import param_groups
    plain = tiny(0, members=2)
    assert plain.lr_scales == {}  # at 1x the head stays in the common groups: the optimiser as before
    assert not any("lr_scale" in g for g in param_groups(plain, 0.01))
    model = tiny(0, members=2, head_lr_scale=10)
    groups = param_groups(model, 0.01)
    scaled: dict[tuple, set] = {}
    for g in groups:
        if "lr_scale" in g:
            scaled.setdefault((g["lr_scale"], g["weight_decay"]), set()).update(id(p) for p in g["params"])
    heads = (model.head, model.extra_members[0].head)
    assert scaled == {(10, 0.01): {id(h.weight) for h in heads}, (10, 0.0): {id(h.bias) for h in heads}}
    assert sum(len(g["params"]) for g in groups) == sum(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="head_lr_scale must be positive, got -1"):
        TextClassifierConfig(head_lr_scale=-1)


def test_each_block_learns_at_its_layer_decayed_rate_and_each_members_copy_as_its_block():
    from anyformer.train.optim import param_groups
    model = tiny(1, members=2, layer_lr_decay=0.5)  # depth 2: block 0 frozen, block 1 trained (and its copy)
    rate = {id(p): g.get("lr_scale", 1.0) for g in param_groups(model, 0.01) for p in g["params"]}
    assert {rate[id(p)] for p in model.encoder.backbone.blocks[1].parameters()} == {1.0}  # the top block: 0.5^0
    assert {rate[id(p)] for p in model.extra_members[0].blocks[0].parameters()} == {1.0}  # its copy
    assert not any(id(p) in rate for p in model.encoder.backbone.blocks[0].parameters())  # frozen: no group
    every = tiny(0, layer_lr_decay=0.5)
    rate = {id(p): g.get("lr_scale", 1.0) for g in param_groups(every, 0.01) for p in g["params"]}
    assert {rate[id(p)] for p in every.encoder.backbone.blocks[0].parameters()} == {0.5}
    assert rate[id(every.encoder.tok_embed.weight)] == 0.25 and rate[id(every.head.weight)] == 1.0
    with pytest.raises(ValueError, match=r"layer_lr_decay must lie in \(0, 1\], got 1.5"):
        TextClassifierConfig(layer_lr_decay=1.5)


def test_the_pair_term_adds_each_adjacent_pair_of_real_pieces_in_its_bucket():
    from anyformer.models.text_classifier import pair_buckets
    from anyformer.train.optim import param_groups
    model = tiny(0, lexical=True, moved=False, depth=1, lexical_pairs=97)
    assert torch.count_nonzero(model.lexical_pairs.weight) == 0
    with torch.no_grad():
        model.lexical.weight.normal_()
        model.lexical_pairs.weight.normal_()
        ids, mask = pad(IDS)
        term = model(ids, mask) - model._deep(ids, mask)
    for i, text in enumerate(IDS):  # padding makes no pairs: only the text's own n - 1
        pairs = [(a * 1_000_003 + b) % 97 for a, b in zip(text, text[1:])]
        want = (model.lexical.weight[text].sum(0) / len(text) ** 0.5
                + model.lexical_pairs.weight[pairs].sum(0) / len(pairs) ** 0.5)
        torch.testing.assert_close(term[i], want, rtol=1e-5, atol=1e-5)
    assert pair_buckets(torch.tensor([[5, 7]]), 97) != pair_buckets(torch.tensor([[7, 5]]), 97)  # order counts
    scaled = [p for g in param_groups(model, 0.01) if g.get("lr_scale") == 1000.0 for p in g["params"]]
    assert {id(p) for p in scaled} == {id(model.lexical.weight), id(model.lexical_pairs.weight)}
    with pytest.raises(ValueError, match="lexical_pairs"):
        TextClassifierConfig(lexical=False, lexical_pairs=8)


def test_the_memory_rule_counts_four_bytes_a_value():
    assert textclass.states_bytes(1000, 384) == 1000 * 384 * 4


@pytest.mark.slow
def test_states_over_the_rule_are_not_kept_and_the_run_still_trains(tmp_path, monkeypatch):
    monkeypatch.setattr(textclass, "minilm_available", lambda: False)
    monkeypatch.setattr(textclass, "STATES_BYTES", 0)
    kept: list[bool] = []
    fit = textclass.TextClassification.fit_model

    def spy(self, model):
        fit(self, model)
        kept.append(self.train_states is not None)
    monkeypatch.setattr(textclass.TextClassification, "fit_model", spy)
    texts(8).to_csv(tmp_path / "texts.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "texts.csv"), "--out", str(tmp_path / "run"), "--max-steps", "3",
                 "--set", "frozen_layers=1", *FAST]) == 0
    assert kept == [False]
    summary = json.loads(Path(tmp_path / "run" / "summary.json").read_text())
    assert 0.0 <= summary["val_accuracy"] <= 1.0
