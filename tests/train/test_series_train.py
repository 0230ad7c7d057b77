"""A short `series` run on a real archive dataset (BasicMotions: 6 channels, 4 classes, 40 series
each side), then `eval`, `predict` and `attention` on it, and bad inputs answered in one line."""
import json

import numpy as np
import pytest
import torch

from anyformer.cli import main
from anyformer.data.series.dataset import load_series_splits
from anyformer.train import Trainer, recipe_config


@pytest.fixture(scope="module")
def series_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("series") / "run"
    cfg = recipe_config("series", data="BasicMotions", max_steps=80, eval_every=80, out=str(out),
                        progress=False, threads=1, plan="stock")
    summary = Trainer(cfg).run()
    return out, summary


def test_training_beats_chance_clearly_and_writes_the_run(series_run):
    out, summary = series_run
    assert summary["test_accuracy"] >= 0.75, summary  # chance is 0.25 (4 balanced classes)
    for name in ("config.json", "model.safetensors", "summary.json", "confusion.png", "attention.png"):
        assert (out / name).is_file(), name
    data = json.loads((out / "config.json").read_text())["data"]
    assert data["kind"] == "series" and data["classes"] == ["Standing", "Running", "Walking", "Badminton"]
    assert data["preprocess"]["kind"] == "series-standardise" and len(data["preprocess"]["mean"]) == 6
    assert data["derived"]["batch"] == 10  # a quarter of the 40 training series


def test_eval_scores_the_run_as_trained(series_run, capsys):
    out, summary = series_run
    assert main(["eval", str(out)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["eval_accuracy"] == pytest.approx(summary["test_accuracy"], abs=1e-6)


def test_predict_a_csv_and_an_npy_equals_the_model_on_the_test_series(series_run, tmp_path, capsys):
    out, _ = series_run
    _, test = load_series_splits("BasicMotions")
    np.savetxt(tmp_path / "s0.csv", test.values[0].numpy().T, delimiter=",", header="a,b,c,d,e,f", comments="")
    np.save(tmp_path / "s1.npy", test.values[1].numpy())
    assert main(["predict", str(out), str(tmp_path / "s0.csv"), str(tmp_path / "s1.npy"), "--top", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    model = __import__("anyformer").load(out)
    pre = __import__("anyformer.data.series.dataset", fromlist=["SeriesPreprocess"]).SeriesPreprocess.from_info(
        json.loads((out / "config.json").read_text())["data"])
    with torch.no_grad():
        expected = model(pre(test.values[:2], test.lengths[:2]), test.lengths[:2]).argmax(-1).tolist()
    names = ["Standing", "Running", "Walking", "Badminton"]
    assert [l.split(": ")[1].split()[0] for l in lines] == [names[k] for k in expected]


def test_attention_draws_the_series(series_run, tmp_path, capsys):
    out, _ = series_run
    _, test = load_series_splits("BasicMotions")
    np.save(tmp_path / "s.npy", test.values[3].numpy())
    assert main(["attention", str(out), str(tmp_path / "s.npy"), "--out", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 1000


@pytest.mark.parametrize("content, fragment", [
    (np.zeros((3, 100)), "has no axis of 6 channels; this model takes 6 channel(s)"),
    (np.full((6, 100), np.nan), "NaN at channel 0, step 0"),
])
def test_bad_series_to_predict_is_one_line(series_run, tmp_path, capsys, content, fragment):
    out, _ = series_run
    np.save(tmp_path / "bad.npy", content)
    assert main(["predict", str(out), str(tmp_path / "bad.npy")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("anyformer: error: ") and fragment in err[0], err


def test_malformed_ts_to_train_is_one_line(tmp_path, capsys):
    (tmp_path / "P_TRAIN.ts").write_text("@classLabel true a b\n@data\n1,2,3:a\n1,2,x:b\n")
    (tmp_path / "P_TEST.ts").write_text("@classLabel true a b\n@data\n1,2,3:a\n")
    assert main(["train", "series", "--data", str(tmp_path), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"anyformer: error: {tmp_path / 'P_TRAIN.ts'}:4: 'x' in channel 0 is not a number; "
                   f"expected comma-separated decimal values"]


def test_sizes_are_derived_from_the_data_alone():
    from anyformer.train.series import derive
    gunpoint = derive(50, 1, 150, "across", batch_cap=64)
    # 10-step patches every 5 steps (30 tokens, each overlapping the next by half), 4 updates an epoch.
    assert (gunpoint["patch_size"], gunpoint["patch_stride"], gunpoint["batch"], gunpoint["width"]) == (10, 5, 13, 64)
    assert gunpoint["difference"] is True
    vowels = derive(270, 12, 26, "channel", batch_cap=64)
    assert (vowels["patch_size"], vowels["patch_stride"], vowels["batch"]) == (20, 10, 64)  # the batch capped
    italy = derive(67, 1, 24, "across", batch_cap=64)
    assert (italy["patch_size"], italy["patch_stride"]) == (2, 1)  # a short series: a token every step
    assert derive(36, 1, 251, "across", batch_cap=64)["batch"] == 9
    big = derive(8000, 1, 500, "across", batch_cap=64)
    assert (big["width"], big["depth"], big["batch"]) == (128, 4, 64)


def test_per_series_normalisation_is_chosen_by_the_config_and_saved_with_the_run():
    from anyformer.train.series import SeriesClassification
    cfg = recipe_config("series", data="BasicMotions", normalize="series", threads=1)
    task = SeriesClassification(cfg, torch.device("cpu"))
    assert task.run_info()["preprocess"]["per_series"] is True
    valid = task.values[0, :, : int(task.lengths[0])]
    torch.testing.assert_close(valid.mean(-1), torch.zeros(6), atol=1e-5, rtol=0)  # each channel of each series
    plain = SeriesClassification(recipe_config("series", data="BasicMotions", threads=1), torch.device("cpu"))
    assert plain.run_info()["preprocess"]["per_series"] is False


def test_the_kernel_stem_takes_every_channel_and_the_runs_seed():
    from anyformer.train.series import derive
    sizes = derive(270, 12, 26, "channel", batch_cap=64, stem="kernels", seed=7)
    # Patches along time only (the kernels mix the channels), no difference channels, the seed's kernels.
    assert (sizes["patching"], sizes["patch_stride"], sizes["patch_size"]) == ("across", 1, 2)
    assert (sizes["stem"], sizes["difference"], sizes["position"], sizes["kernel_seed"]) == ("kernels", False,
                                                                                              "learned", 7)
    assert derive(50, 1, 150, "across", 64, "kernels", 0)["batch"] == 13


def _short_kernel_run(out, **kw):
    cfg = recipe_config("series", data="GunPoint", max_steps=12, eval_every=12, out=str(out), progress=False,
                        threads=1, plan="stock", plots=False, **kw)
    summary = Trainer(cfg).run()
    return summary, __import__("anyformer").load(out).state_dict()


def test_kernel_features_computed_once_or_per_batch_train_the_same(tmp_path, monkeypatch):
    """The stem is fixed, so features kept from the start and features computed for each batch are the
    same numbers: the two runs end with the same weights and the same score."""
    import anyformer.train.series as series_task
    kept, kept_weights = _short_kernel_run(tmp_path / "kept")
    monkeypatch.setattr(series_task, "CACHE_BYTES", 0)
    each, each_weights = _short_kernel_run(tmp_path / "each")
    assert kept["test_accuracy"] == each["test_accuracy"]
    for name, value in kept_weights.items():
        torch.testing.assert_close(each_weights[name], value, atol=1e-5, rtol=1e-5, msg=name)
    config = json.loads((tmp_path / "kept" / "config.json").read_text())
    assert config["config"]["stem"] == "kernels" and config["config"]["pool"] == "mean"


def test_a_series_run_on_the_linear_stem_still_trains_and_predicts(tmp_path, capsys):
    out = tmp_path / "patches"
    cfg = recipe_config("series", data="GunPoint", max_steps=12, eval_every=12, out=str(out), progress=False,
                        threads=1, plan="stock", plots=False, model_overrides={"stem": "patches", "pool": "cls"})
    Trainer(cfg).run()
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["stem"] == "patches" and config["data"]["derived"]["difference"] is True
    _, test = load_series_splits("GunPoint")
    np.save(tmp_path / "s.npy", test.values[0].numpy())
    capsys.readouterr()
    assert main(["predict", str(out), str(tmp_path / "s.npy"), "--top", "1"]) == 0
    assert capsys.readouterr().out.strip().split(": ")[1].split()[0] in ("1", "2")  # GunPoint's classes
