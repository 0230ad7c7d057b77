"""The command line: user errors are one line and exit code 2; commands work on a real run."""
import os
import subprocess
import sys

import pytest
from PIL import Image

from tests.cli_runner import run
from tests.conftest import REPO, SHARED_DATA


def run_process(*args):
    """`python -m anyformer ARGS` as a separate process: the entry point and the exit code a shell sees."""
    env = {**os.environ, "ANYFORMER_DATA": str(SHARED_DATA)}
    env.pop("ANYFORMER_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "anyformer", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)


def assert_user_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("anyformer: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.mark.slow
def test_recipes_lists_the_recipes():
    out = run_process("recipes")
    assert out.returncode == 0
    for name in ("mnist", "mnist-seed", "fashion-mnist", "cifar10"):
        assert name in out.stdout


@pytest.mark.slow
def test_unknown_recipe():
    assert_user_error(run_process("train", "imagenet-22k"), "unknown recipe 'imagenet-22k'", "mnist-seed")


@pytest.mark.slow
def test_no_such_dataset(tmp_path):
    assert_user_error(run("train", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")),
                      f"no dataset '{tmp_path / 'nowhere'}': expected one of mnist, fashion-mnist, cifar10")


@pytest.mark.slow
def test_unknown_model_and_option(tmp_path):
    assert_user_error(run("train", "--model", "vit-z/9", "--out", str(tmp_path / "r")), "unknown model preset 'vit-z/9'")
    assert_user_error(run("train", "--set", "colour=1", "--out", str(tmp_path / "r")), "unknown ViTConfig option")


@pytest.mark.slow
def test_eval_of_a_missing_run(tmp_path):
    assert_user_error(run("eval", str(tmp_path)), f"no model in {tmp_path}: expected {tmp_path / 'config.json'}")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny ViT trained by the command line for 150 steps on real MNIST: about 45% test accuracy,
    far from chance (10%), so that a prediction can be right or wrong. fp32, so that an independent
    computation in a test can reproduce its numbers."""
    out = tmp_path_factory.mktemp("cli") / "run"
    r = run("train", "--max-steps", "150", "--eval-every", "150", "--limit-train", "1920", "--limit-eval", "300",
            "--batch-size", "64", "--lr", "3e-3", "--warmup-steps", "10", "--augment", "none", "--amp", "none",
            "--set", "depth=2", "--set", "width=32", "--set", "heads=4", "--set", "mlp_hidden=64", "--set", "patch_size=7", "--set", "stem=patch",
            "--out", str(out), "--no-progress", "--threads", "1", "--no-plots")
    assert r.returncode == 0, r.stderr
    assert "test accuracy" in r.stdout
    return out


@pytest.fixture(scope="module")
def mnist_test(tmp_path_factory):
    """The real MNIST test split, read by the dataset loader."""
    from anyformer.data import load_image_dataset
    return load_image_dataset(str(SHARED_DATA / "mnist"), "test", cache_dir=str(tmp_path_factory.mktemp("cache")))


def normalised_as_trained(run_dir, images):
    """What training fed the model, computed here from config.json's statistics alone:
    (x - 255 mean) * (1 / (255 std)) in float32."""
    import torch
    from anyformer.models import read_config
    info = read_config(run_dir)["data"]
    mean = torch.tensor(info["mean"]).view(-1, 1, 1) * 255
    inv_std = 1 / (torch.tensor(info["std"]).view(-1, 1, 1) * 255)
    return (images.float() - mean) * inv_std


@pytest.mark.slow
def test_predict_prints_top_classes_for_any_image(trained_run, tmp_path):
    img = tmp_path / "digit.png"
    Image.new("RGB", (50, 40), (255, 255, 255)).save(img)  # any size and mode is converted
    r = run("predict", str(trained_run), str(img), "--top", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(",") == 1 and str(img) in r.stdout


@pytest.mark.slow
def test_predict_bad_image_file(trained_run, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    assert_user_error(run("predict", str(trained_run), str(bad)), f"cannot read image {bad}: not an image format",
                      "delete or replace the file")


@pytest.mark.slow
def test_predict_answers_every_readable_file_and_names_each_unreadable_one(trained_run, tmp_path):
    from anyformer.data import read_idx
    good = tmp_path / "good.png"
    Image.fromarray(read_idx(SHARED_DATA / "mnist" / "t10k-images-idx3-ubyte.gz")[0]).save(good)  # a real 7
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    r = run("predict", str(trained_run), str(good), str(bad), str(tmp_path / "missing.png"), str(good))
    assert r.returncode == 2
    assert r.stdout.count(f"{good}:") == 2, r.stdout  # the file after the bad ones is answered too
    errors = [line for line in r.stderr.strip().splitlines() if "warning" not in line]
    assert len(errors) == 3 and "bad.png" in errors[0] and "missing.png" in errors[1], r.stderr
    assert errors[2] == "anyformer: 2 of 4 files could not be read"


@pytest.mark.slow
def test_predict_on_real_digits_equals_the_models_own_answer(trained_run, mnist_test, tmp_path, capsys):
    """Real MNIST test digits as PNG files: each printed top 3 equals the model's own forward on the
    digit normalised as in training, and the top guesses are mostly right."""
    import torch
    import anyformer as af
    from anyformer.cli import main
    n = 40
    paths = []
    for i in range(n):
        paths.append(tmp_path / f"digit{i}.png")
        Image.fromarray(mnist_test.images[i, 0].numpy()).save(paths[-1])
    assert main(["predict", str(trained_run), *map(str, paths), "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == n
    model = af.load(trained_run)
    with torch.no_grad():
        probs = model(normalised_as_trained(trained_run, mnist_test.images[:n])).softmax(-1)
    right = 0
    for i, line in enumerate(lines):
        path, shown = line.split(": ")
        assert path == str(paths[i])
        guesses = [g.split(" ") for g in shown.split(", ")]
        top = probs[i].topk(3)
        assert [c for c, _ in guesses] == [mnist_test.classes[k] for k in top.indices.tolist()], line
        assert [float(p) for _, p in guesses] == pytest.approx(top.values.tolist(), abs=5e-4), line
        right += guesses[0][0] == mnist_test.classes[int(mnist_test.labels[i])]
    assert right >= 0.25 * n, f"{right}/{n} right: chance is 10%, the run scored about 45%"


@pytest.mark.slow
def test_eval_prints_what_an_independent_computation_gives(trained_run, mnist_test, capsys):
    """Loss and accuracy over the run's test slice, recomputed here from the weights, the test
    images and config.json's statistics alone."""
    import json
    import torch
    import torch.nn.functional as F
    import anyformer as af
    from anyformer.cli import main
    assert main(["eval", str(trained_run)]) == 0
    shown = json.loads(capsys.readouterr().out)
    n = json.loads((trained_run / "config.json").read_text())["train"]["limit_eval"]
    with torch.no_grad():
        logits = af.load(trained_run)(normalised_as_trained(trained_run, mnist_test.images[:n]))
    labels = mnist_test.labels[:n]
    loss = float(F.cross_entropy(logits, labels, reduction="sum").double()) / n
    accuracy = float((logits.argmax(-1) == labels).sum()) / n
    assert shown == {"eval_loss": pytest.approx(loss, abs=2e-6), "eval_accuracy": pytest.approx(accuracy, abs=1e-9)}
    summary = json.loads((trained_run / "summary.json").read_text())
    assert shown["eval_accuracy"] == pytest.approx(summary["test_accuracy"], abs=1e-6), "eval differs from training's"


@pytest.mark.slow
def test_attention_draws_what_viz_computes_for_the_digit(trained_run, mnist_test, tmp_path):
    """The command's picture, pixel for pixel, equals anyformer.viz's for the same digit normalised
    as in training."""
    import numpy as np
    import anyformer as af
    from anyformer import viz
    from anyformer.cli import main
    digit = tmp_path / "seven.png"
    Image.fromarray(mnist_test.images[0, 0].numpy()).save(digit)
    out = tmp_path / "attn.png"
    assert main(["attention", str(trained_run), str(digit), "--out", str(out), "--layers", "0", "1",
                 "--heads", "0", "1"]) == 0
    image = mnist_test.images[0]
    result = viz.image_attention(af.load(trained_run), normalised_as_trained(trained_run, image)[None], layers=[0, 1])
    expected = tmp_path / "expected.png"
    viz.plot_image_attention(image, result, expected, layers=[0, 1], heads=[0, 1], class_names=mnist_test.classes)
    with Image.open(out) as got, Image.open(expected) as want:
        assert got.width > 400 and got.height > 300
        assert got.size == want.size
        differ = int((np.asarray(got) != np.asarray(want)).any(-1).sum())
        assert differ == 0, f"{differ} pixels differ from viz's picture"


def test_attention_of_a_model_without_training_data_is_one_line(tmp_path, capsys):
    import anyformer as af
    from anyformer.cli import main
    af.ViT.preset("vit-mnist", depth=1, width=32, heads=4, mlp_hidden=32).save(tmp_path / "plain")
    Image.new("L", (28, 28)).save(tmp_path / "d.png")
    assert main(["attention", str(tmp_path / "plain"), str(tmp_path / "d.png"), "--out", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == (f"anyformer: error: {tmp_path / 'plain'} is not an image classifier run "
                                       f"(its data kind is None)\n")


def test_a_torchrun_worker_leaves_with_its_code_and_its_last_lines_flushed(tmp_path):
    """Under torchrun (TORCHELASTIC_RUN_ID set) `python -m anyformer` ends by os._exit, skipping the
    interpreter's teardown (cli.exit_process): the exit code and the buffered lines must still come out."""
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "job", "PYTHONPATH": str(REPO)}
    env.pop("ANYFORMER_DEBUG", None)
    missing = tmp_path / "nowhere.csv"
    r = subprocess.run([sys.executable, "-m", "anyformer", "train", "--data", str(missing)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("anyformer: error:") and str(missing) in r.stderr, r.stderr
    ok = subprocess.run([sys.executable, "-m", "anyformer", "doctor"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                        text=True, timeout=300)  # a pipe: stdout is block-buffered, as under torchrun's log files
    assert ok.returncode == 0 and len(ok.stdout.splitlines()) > 3, ok.stdout


@pytest.mark.parametrize("flags, calls", [([], 3), (["--concurrency", "1"], 2), (["--concurrency", "5"], 6)])
def test_serve_shares_the_cores_among_the_calls_that_may_run_at_once(monkeypatch, flags, calls):
    # the light lane's calls and the heavy lane's one, each with every core, asked for more threads than cores
    from anyformer import cli
    seen = {}

    def serve(args):  # the server itself is not started: what it was given is what is checked
        seen["args"] = args.threads
        return 0
    monkeypatch.setattr(cli.runtime, "configure", lambda threads=None: seen.update(threads=threads))
    monkeypatch.setattr(cli.serve, "serve", serve)
    cli.main(["serve", "some-run", *flags])
    assert seen["threads"] == seen["args"] == max(1, len(os.sched_getaffinity(0)) // calls)
    seen.clear()
    cli.main(["serve", "some-run", "--threads", "7", *flags])  # asked for: as asked
    assert seen["threads"] == 7
