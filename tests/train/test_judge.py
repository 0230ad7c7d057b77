"""The judge of generated images: the Fréchet distance against closed forms, and a tiny classifier
trained here on real MNIST scoring real digits (consistency = its accuracy; the floor small, noise far)."""
import shutil

import pytest
import torch

import anyformer as af
from anyformer.data import ImageDataset
from anyformer.train.judge import Judge, frechet_distance

from .conftest import make_trainer, tiny_config


# ---------------------------------------------------------------------- Fréchet closed forms
def exact_moments(n: int, mean: torch.Tensor, var: torch.Tensor, seed: int) -> torch.Tensor:
    """n points whose sample mean is exactly `mean` and unbiased covariance exactly diag(var)."""
    a = torch.randn(n, mean.numel(), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    q, _ = torch.linalg.qr(a - a.mean(dim=0))  # orthonormal columns, each still of zero mean
    return mean + q * (n - 1) ** 0.5 * var.sqrt()


def test_frechet_of_a_set_with_itself_is_zero():
    x = torch.randn(300, 16, dtype=torch.float64) @ torch.randn(16, 16, dtype=torch.float64)
    assert frechet_distance(x, x) == pytest.approx(0, abs=1e-9)


def test_frechet_of_diagonal_gaussians_is_the_closed_form():
    f64 = dict(dtype=torch.float64)
    mu_a, mu_b = torch.tensor([0.0, 1.0, -2.0, 0.5], **f64), torch.tensor([1.0, 1.0, 0.0, 0.0], **f64)
    var_a, var_b = torch.tensor([1.0, 4.0, 0.25, 9.0], **f64), torch.tensor([4.0, 1.0, 1.0, 0.01], **f64)
    a, b = exact_moments(200, mu_a, var_a, seed=1), exact_moments(500, mu_b, var_b, seed=2)
    expected = float(((mu_a - mu_b) ** 2).sum() + ((var_a.sqrt() - var_b.sqrt()) ** 2).sum())  # 5.25 + 10.66
    assert expected == pytest.approx(15.91)
    assert frechet_distance(a, b) == pytest.approx(expected, rel=1e-9)


def test_frechet_is_symmetric_and_unmoved_by_a_rotation_and_shift_of_both_sets():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(400, 8, generator=g, dtype=torch.float64) @ torch.randn(8, 8, generator=g, dtype=torch.float64)
    b = torch.randn(250, 8, generator=g, dtype=torch.float64) @ torch.randn(8, 8, generator=g, dtype=torch.float64) + 1
    rotation, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    shift = torch.randn(8, generator=g, dtype=torch.float64) * 5
    d = frechet_distance(a, b)
    assert d > 1  # the two covariances do not commute: a case the diagonal test does not reach
    assert frechet_distance(b, a) == pytest.approx(d, rel=1e-9)
    assert frechet_distance(a @ rotation + shift, b @ rotation + shift) == pytest.approx(d, rel=1e-9)


def test_frechet_refuses_bad_feature_sets():
    with pytest.raises(ValueError, match=r"feats_a: expected features \(N, F\) with N >= 2, got shape \(1, 4\)"):
        frechet_distance(torch.zeros(1, 4), torch.zeros(5, 4))
    with pytest.raises(ValueError, match="feature sets differ in width: 4 and 3"):
        frechet_distance(torch.randn(5, 4), torch.randn(5, 3))
    with pytest.raises(ValueError, match="feats_b: features must be finite"):
        frechet_distance(torch.randn(5, 4), torch.full((5, 4), float("nan")))


# ---------------------------------------------------------------------- a real judge
MNIST_CLASSES = [str(i) for i in range(10)]


@pytest.fixture(scope="module")
def judge_run(tmp_path_factory, mnist_slice, one_thread):
    """A tiny ViT trained for 180 steps on 2,000 real MNIST digits: a weak but real classifier."""
    tmp = tmp_path_factory.mktemp("judge")
    make_trainer(tiny_config(tmp, max_steps=180, eval_every=180), mnist_slice).run()
    return tmp / "run"


@pytest.fixture(scope="module")
def judge(judge_run, mnist_slice):
    train, test = mnist_slice
    return Judge.load(judge_run, channels=1, image_size=(28, 28), classes=MNIST_CLASSES,
                      train=ImageDataset(train.images[:2000], train.labels[:2000], train.classes, train.name),
                      test=ImageDataset(test.images[:500], test.labels[:500], test.classes, test.name))


@pytest.mark.slow
def test_real_test_images_are_consistent_exactly_as_often_as_the_judge_is_accurate(judge, judge_run):
    test = judge.test
    scores = judge.score(test.images, test.labels)
    # the accuracy computed apart from the judge: the run's own model, preprocessing and forward pass
    model = af.load(judge_run)
    x = judge.preprocess(test.images)
    with torch.no_grad():
        accuracy = float((model(x).argmax(-1) == test.labels).double().mean())
    assert 0.2 < accuracy < 1  # a real (chance is 0.1), imperfect classifier: consistency is not trivially 0 or 1
    assert scores["judge_accuracy"] == pytest.approx(accuracy)
    assert scores["class_consistency"] == pytest.approx(accuracy)
    assert scores["n"] == 500
    assert scores["frechet"] == pytest.approx(0, abs=1e-6)  # the test set against itself


@pytest.mark.slow
def test_the_floor_is_small_and_positive_and_noise_is_far_above_it(judge):
    g = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (200, 1, 28, 28), generator=g, dtype=torch.uint8)
    labels = torch.arange(200) % 10
    scores = judge.score(noise, labels)
    assert 0 < scores["frechet_floor"] < scores["frechet"] / 5
    assert judge.floor(200) == scores["frechet_floor"]  # seeded: the same draw every time
    assert judge.floor(1000) < judge.floor(50)  # the bias shrinks as the sample grows
    assert scores["class_consistency"] < 0.5  # noise is no digit asked for


@pytest.mark.slow
def test_a_shuffled_label_lowers_consistency_not_frechet(judge):
    test = judge.test
    right = judge.score(test.images[:300], test.labels[:300])
    wrong = judge.score(test.images[:300], (test.labels[:300] + 1) % 10)
    assert wrong["class_consistency"] < right["class_consistency"] / 2
    assert wrong["frechet"] == right["frechet"]


@pytest.mark.slow
def test_load_refuses_what_is_not_a_matching_classifier_run(judge_run, tmp_path):
    ok = dict(channels=1, image_size=(28, 28), classes=MNIST_CLASSES)

    def refused(run, match, **kw):
        with pytest.raises(ValueError, match=match) as e:
            Judge.load(run, **{**ok, **kw})
        assert "\n" not in str(e.value)  # one line, for the CLI to print as it is

    refused(judge_run, r"sees 28x28 images, the generator makes 32x32 ones", image_size=32)
    refused(judge_run, r"sees 1-channel images, the generator makes 3-channel ones", channels=3)
    refused(judge_run, r"knows the classes \['0', .*'9'\], the generator \['a', 'b'\]", classes=["a", "b"])
    af.GPT.from_config(dict(vocab_size=16, context=8, width=16, depth=1, heads=2)).save(tmp_path / "lm")
    refused(tmp_path / "lm", r"is a 'gpt' run, not an image classifier")
    af.ViT.preset("vit-mnist", depth=1).save(tmp_path / "bare")  # a model, not a training run: no data section
    refused(tmp_path / "bare", "is not an image classifier run: its config.json lacks the data section")
    refused(tmp_path / "nothing", r"is not a run directory: expected .*config.json")
    shutil.copytree(judge_run, tmp_path / "no-weights", ignore=shutil.ignore_patterns("model.safetensors"))
    refused(tmp_path / "no-weights", r"has no weights: expected .*model.safetensors")


@pytest.mark.slow
def test_score_refuses_bad_images_and_labels(judge):
    images, labels = judge.test.images[:4], judge.test.labels[:4]
    with pytest.raises(TypeError, match=r"expected uint8 images \(N, C, H, W\), got a torch.float32 tensor"):
        judge.score(images.float(), labels)
    with pytest.raises(ValueError, match=r"expected images of shape \(N, 1, 28, 28\) for this judge, got \(4, 1, 28, 27\)"):
        judge.score(images[..., :27], labels)
    with pytest.raises(TypeError, match=r"expected int64 labels \(4,\), one per image, got a torch.int64 tensor of shape \(3,\)"):
        judge.score(images, labels[:3])
    with pytest.raises(ValueError, match=r"expected labels in 0..9, got 0..10"):
        judge.score(images, torch.tensor([0, 1, 2, 10]))
    with pytest.raises(ValueError, match="expected at least 2 images to fit a covariance, got 1"):
        judge.score(images[:1], labels[:1])
