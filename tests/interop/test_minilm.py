"""all-MiniLM-L6-v2's real weights in anyformer's TextEncoder: the same sentence embeddings as
Hugging Face's BertModel, padding-invariant, and meaningful."""
import pytest
import torch

import anyformer as af
from anyformer.interop import require_transformers
from anyformer.interop.minilm import (MINILM_SHA256, embed_sentences, file_sha256, load_minilm, minilm_path,
                                      tokenize)

from . import assert_close

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The quarterly earnings report showed a sharp decline in operating margins across all divisions.",
    "ok",
]
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()  # the packaged copy, its sha256 checked


@pytest.fixture(scope="module")
def hf_bert():
    transformers = require_transformers()  # a missing transformers fails here: CI installs it
    return transformers.BertModel.from_pretrained(str(minilm_path())).eval()


def hf_embeddings(bert, ids, mask):
    """sentence-transformers' recipe on the reference model: masked mean, then L2 normalisation."""
    with torch.no_grad():
        hidden = bert(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask[..., None].float()
    return torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)


def test_packaged_weights_are_the_expected_file():
    assert file_sha256(minilm_path() / "model.safetensors") == MINILM_SHA256


def test_loaded_model_and_tokenizer(minilm):
    model, tokenizer = minilm
    assert isinstance(model, af.TextEncoder) and not model.training
    c = model.config
    assert (c.width, c.depth, c.heads, c.mlp_hidden, c.vocab_size) == (384, 6, 12, 1536, 30522)
    ids, mask = tokenize(tokenizer, ["hello world", "a much longer sentence than the first one"])
    assert ids.shape == mask.shape and ids.shape[1] == int(mask.sum(1).max())  # padded to the longest
    assert ids[0, 0] == 101 and mask[0].tolist().count(0) > 0  # [CLS] first; padding masked


@pytest.mark.parametrize("impl", ["fused", "explicit"])
def test_embeddings_equal_hf_bert(hf_bert, impl):
    model, tokenizer = load_minilm(check_hash=False, attn_impl=impl)
    ours = embed_sentences(model, tokenizer, SENTENCES)
    ids, mask = tokenize(tokenizer, SENTENCES)
    theirs = hf_embeddings(hf_bert, ids, mask)
    assert ours.shape == (len(SENTENCES), 384)
    cosine = (ours * theirs).sum(-1)
    print(f"[parity] MiniLM {impl}: min cosine {cosine.min().item():.8f} (required >= {MIN_COSINE})")
    assert bool((cosine >= MIN_COSINE).all()), cosine
    assert_close(f"MiniLM {impl} sentence embeddings", ours, theirs)
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-6)


def test_padded_batch_equals_each_sentence_alone(minilm):
    model, tokenizer = minilm
    batch = embed_sentences(model, tokenizer, SENTENCES)
    alone = torch.cat([embed_sentences(model, tokenizer, [s]) for s in SENTENCES])
    assert_close("MiniLM padded batch vs one by one", batch, alone)
    assert bool(((batch * alone).sum(-1) >= MIN_COSINE).all())
    # A batch larger than batch_size is split and joined in order.
    assert_close("MiniLM split batches", embed_sentences(model, tokenizer, SENTENCES, batch_size=4), batch)


def test_similar_sentences_score_higher(minilm):
    model, tokenizer = minilm
    e = embed_sentences(model, tokenizer, SENTENCES)
    sim = e @ e.T
    for a, b, unrelated in [(0, 1, 9), (3, 6, 4), (7, 8, 2), (0, 1, 3)]:
        assert sim[a, b] > sim[a, unrelated] + 0.2, (SENTENCES[a], SENTENCES[b], SENTENCES[unrelated], sim)
    print(f"[quality] MiniLM: sim(eating food, eating bread) = {sim[0, 1]:.3f}, "
          f"sim(eating food, earnings report) = {sim[0, 9]:.3f}")


def test_bad_inputs_are_explained(minilm, tmp_path):
    model, tokenizer = minilm
    with pytest.raises(TypeError, match="list of sentences"):
        embed_sentences(model, tokenizer, "one string")
    assert embed_sentences(model, tokenizer, []).shape == (0, 384)
    with pytest.raises(FileNotFoundError, match="missing config.json, model.safetensors, tokenizer.json"):
        load_minilm(tmp_path)
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_bytes((minilm_path() / name).read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not the weights")
    with pytest.raises(ValueError, match="sha256"):
        load_minilm(tmp_path, check_hash=True)
