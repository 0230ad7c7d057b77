"""af.open_run: a run's model with its tokenizer, or its preprocessing and classes, from Python."""
import pytest
import torch

import anyformer as af
from anyformer.data import read_idx
from anyformer.data.images.preprocess import ImagePreprocess
from tests.conftest import SHARED_DATA

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n"


def test_a_language_model_run_encodes_decodes_and_generates_text(tmp_path):
    chars = "".join(sorted(set(TEXT)))
    gpt = af.GPT.preset("shakespeare-char", vocab_size=len(chars), context=64, width=32, depth=1, heads=2)
    gpt.save(tmp_path, extra={"data": {"kind": "text", "tokenizer": "char", "chars": chars}})
    run = af.open_run(tmp_path)
    ids = run.encode("hear me")
    assert ids.shape == (1, 7) and ids.dtype == torch.long and run.decode(ids[0]) == "hear me"
    assert ids[0].tolist() == [chars.index(c) for c in "hear me"]
    text = run.generate("hear", 12, temperature=0)
    expected = gpt.eval().generate(ids[:, :4], 12, temperature=0)[0]
    assert text == run.decode(expected) and text.startswith("hear") and len(text) == 16
    assert run.generate("hear", 12, seed=3, top_k=5) == run.generate("hear", 12, seed=3, top_k=5)
    assert run.preprocess is None and run.classes is None
    with pytest.raises(ValueError, match="not an image classifier run"):
        run.classify(tmp_path / "x.png")


def test_an_image_run_classifies_a_picture_as_its_model_does(tmp_path):
    from PIL import Image
    digits = torch.from_numpy(read_idx(SHARED_DATA / "mnist" / "t10k-images-idx3-ubyte.gz")[:64])[:, None]
    pre = ImagePreprocess.from_images(digits)
    vit = af.ViT.preset("vit-mnist", width=32, depth=1, heads=2, mlp_hidden=64, patch_size=7)
    classes = [f"digit {i}" for i in range(10)]
    vit.save(tmp_path, extra={"data": {"kind": "images", "classes": classes, "preprocess": pre.to_dict()}})
    Image.fromarray(digits[0, 0].numpy()).save(tmp_path / "d.png")
    run = af.open_run(tmp_path)
    top = run.classify(tmp_path / "d.png", top=3)
    with torch.no_grad():
        probs = vit.eval()(run.preprocess(run.preprocess.load(tmp_path / "d.png"))[None]).softmax(-1)[0]
    assert [c for c, _ in top] == [classes[i] for i in probs.topk(3).indices.tolist()]
    assert [p for _, p in top] == pytest.approx(probs.topk(3).values.tolist())
    with pytest.raises(ValueError, match="not a language model: it has no tokenizer"):
        run.encode("7")
    assert run.image_preprocess() is run.preprocess and run.meta["data"]["classes"] == classes
    # prepared=True: the model the commands and the server run, prepared by the speed plan; the same answers
    ready = af.open_run(tmp_path, prepared=True)
    assert ready.model is not run.model and not ready.model.training
    x = run.preprocess(run.preprocess.load(tmp_path / "d.png"))[None]
    with torch.no_grad():
        torch.testing.assert_close(ready.model(x), run.model(x), rtol=1e-4, atol=1e-5)


def test_a_run_without_images_has_no_image_preprocessing(tmp_path):
    chars = "abc"
    af.GPT.preset("shakespeare-char", vocab_size=3, context=8, width=16, depth=1, heads=2).save(
        tmp_path, extra={"data": {"kind": "text", "tokenizer": "char", "chars": chars}})
    with pytest.raises(ValueError, match=r"is not an image classifier run \(its data kind is 'text'\)"):
        af.open_run(tmp_path).image_preprocess()


def test_an_image_run_recording_too_little_still_opens_and_says_why_it_cannot_read_pictures(tmp_path):
    vit = af.ViT.preset("vit-mnist", width=32, depth=1, heads=2, mlp_hidden=64, patch_size=7)
    vit.save(tmp_path, extra={"data": {"kind": "images", "classes": list("0123456789"), "mean": [0.1], "std": [0.3]}})
    run = af.open_run(tmp_path, prepared=True)  # export and eval need no preprocessing: it opens
    assert run.preprocess is None and run.classes == list("0123456789")
    with pytest.raises(ValueError, match=r"missing \['channels', 'image_size'\]"):
        run.image_preprocess()
