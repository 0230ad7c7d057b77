"""A text classifier's ensemble (`members`): copies of the trained blocks and head on the shared frozen
blocks, each member's logits from token ids or from kept states alike, their mean the model's answer,
each member's own loss in training, and a run that trains, saves and answers with them (an option,
`--set members=N`: text_select.py round 9 found no gain)."""
import json

import pytest
import torch

import anyformer as af
from anyformer.cli import main
from anyformer.data.text.inputs import pad
from anyformer.models.text_classifier import TextClassifierConfig
from anyformer.train import textclass
from anyformer.train.textclass import _states, pad_states

from .test_text_classify import TOPICS, trained_twice
from .test_text_states import IDS, tiny


def test_the_answer_is_the_mean_of_the_members_logits_from_ids_or_from_kept_states():
    model = tiny(1, lexical=True, members=3)
    ids, mask = pad(IDS)
    with torch.no_grad():
        each = model(ids, mask, each=True)
        states = pad_states(_states(model, IDS, batch=2))
        each_from_states = model(*states, tokens=(ids, mask), each=True)
        answer = model(ids, mask)
        bag = model.bag(ids, mask)
    assert each.shape == (3, len(IDS), 3)
    torch.testing.assert_close(each_from_states, each, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(answer, each.mean(0))
    # the lexical term is shared: each member's logits hold it once
    torch.testing.assert_close(model._members(ids, mask) + bag, each)
    # the members are not one another: their own heads (and, once trained, their own blocks)
    assert not torch.allclose(each[0], each[1])


def test_sync_members_copies_the_trained_blocks_and_keeps_each_head():
    model = tiny(1, members=2)
    member = model.extra_members[0]
    trained = model.encoder.backbone.blocks[1:]
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(1.0)  # as loading pretrained weights does after the model is built
    head = member.head.weight.clone()
    model.sync_members()
    for mine, theirs in zip(member.blocks, trained):
        for (k, a), b in zip(mine.state_dict().items(), theirs.state_dict().values()):
            assert a.equal(b), k
    assert member.head.weight.equal(head) and not member.head.weight.equal(model.head.weight)
    assert all(p.requires_grad for p in member.parameters())
    assert len(member.blocks) == 1  # the blocks after the frozen one only


def test_one_member_is_the_plain_model_and_the_count_is_checked():
    one = tiny(1, lexical=True)
    assert one.extra_members is None
    ids, mask = pad(IDS)
    with torch.no_grad():
        assert one(ids, mask, each=True).shape == (1, len(IDS), 3)
        assert one(ids, mask).equal(one(ids, mask, each=True)[0])
    with pytest.raises(ValueError, match="members"):
        TextClassifierConfig(members=0)
    # each further member adds its trained blocks' share of the encoder's work
    three = tiny(1, members=3)
    enc = three.encoder.forward_flops(8)
    assert three.forward_flops(8) == pytest.approx(enc + 2 * enc / 2 + 2 * 16 * 3 * 3)


def test_a_run_with_members_trains_each_and_answers_with_their_mean(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(textclass, "minilm_available", lambda: False)  # the from-scratch path: seconds
    _, run = trained_twice(tmp_path, "--set", "members=2", "--seed", "5")
    opened = af.open_run(run)
    model = opened.model
    assert model.config.members == 2
    # both members were trained: the copy's blocks left the encoder's
    copy, own = model.extra_members[0].blocks[0], model.encoder.backbone.blocks[0]
    assert not torch.equal(copy.mlp.fc1.weight, own.mlp.fc1.weight)
    summary = json.loads((run / "summary.json").read_text())
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["eval_accuracy"] == pytest.approx(summary["val_accuracy"], abs=1e-6)
    assert opened.classify(["A storm, then rain all day"])[0][0][0] in TOPICS
