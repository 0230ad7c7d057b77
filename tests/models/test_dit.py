"""The DiT generator and its flow-matching sampler."""
import pytest
import torch

import anyformer as af
from anyformer.models.flow import interpolate, to_uint8, velocity_target

TINY = dict(image_size=8, in_chans=1, patch_size=2, num_classes=3, width=32, depth=2, heads=4, mlp_hidden=64,
            time_freq_dim=16)


@pytest.fixture
def dit():
    model = af.DiT.from_config(TINY)
    with torch.no_grad():  # open the zero-initialised gates and head, so samples depend on everything
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def test_untrained_dit_predicts_zero_and_the_forward_shapes(dit):
    x, t, y = torch.randn(3, 1, 8, 8), torch.tensor([0.01, 0.5, 1.0]), torch.tensor([0, 1, 3])
    # The zero-initialised head outputs 0: the velocity itself (predict="v"), or the clean image
    # x^ = 0, whose velocity on the path is (x_t - x^) / t, with t floored at 0.05 (predict="x").
    assert torch.equal(af.DiT.from_config(TINY)(x, t, y), torch.zeros_like(x))
    expected = x / torch.tensor([0.05, 0.5, 1.0]).view(3, 1, 1, 1)
    assert torch.allclose(af.DiT.from_config({**TINY, "predict": "x"})(x, t, y), expected)
    assert dit(x, 0.5, torch.tensor([0, 1, 3])).shape == (3, 1, 8, 8)  # one time for all, the null class


def test_sampler_is_deterministic_for_a_seed(dit):
    labels = torch.tensor([0, 1, 2, 2])
    a = dit.sample(labels, steps=4, cfg=2.0, seed=7)
    b = dit.sample(labels, steps=4, cfg=2.0, seed=7)
    c = dit.sample(labels, steps=4, cfg=2.0, seed=8)
    assert a.dtype == torch.uint8 and a.shape == (4, 1, 8, 8)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_guidance_at_scale_one_is_the_conditional_model_alone(dit):
    labels = torch.tensor([0, 2, 1])
    calls = []
    real = dit.forward
    dit.forward = lambda x, t, y: (calls.append(len(y)), real(x, t, y))[1]
    guided = dit.sample(labels, steps=3, cfg=1.0, seed=1, method="euler")
    assert calls == [3, 3, 3]  # one batch of the three conditional passes per step, no null pass
    calls.clear()
    dit.sample(labels, steps=3, cfg=2.0, seed=1, method="euler")
    assert calls == [6, 6, 6]  # conditional and unconditional in ONE batch
    dit.forward = real
    # By hand: Euler from t = 1 to 0 with the conditional velocity.
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for t in (1.0, 2 / 3, 1 / 3):
            x = x - (1 / 3) * dit(x, torch.full((3,), t), labels)
    assert (guided.int() - to_uint8(x).int()).abs().max() <= 1  # float rounding may move a pixel by one level


def test_guidance_scale_changes_the_samples(dit):
    labels = torch.tensor([0, 1])
    assert not torch.equal(dit.sample(labels, steps=3, cfg=1.0, seed=0), dit.sample(labels, steps=3, cfg=3.0, seed=0))


@pytest.mark.parametrize("method", ["euler", "heun"])
def test_euler_and_heun_give_uint8_images_of_the_model_shape(dit, method):
    out = dit.sample(torch.tensor([1, 0, 2, 1, 0]), steps=2, cfg=1.5, seed=0, method=method)
    assert out.shape == (5, 1, 8, 8) and out.dtype == torch.uint8


def test_bad_requests_are_refused_in_one_line(dit):
    with pytest.raises(ValueError, match=r"class labels must lie in \[0, 3\).*got values in \[0, 3\]"):
        dit.sample(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"class labels must lie in \[0, 3\)"):
        dit.sample(torch.tensor([-1]))
    with pytest.raises(TypeError, match="labels must be a 1-D integer tensor"):
        dit.sample(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="unknown sampling method 'rk4'"):
        dit.sample(torch.tensor([0]), method="rk4")
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        dit.sample(torch.tensor([0]), steps=0)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\] \(3 = no class\)"):
        dit(torch.randn(1, 1, 8, 8), 0.5, torch.tensor([4]))


def test_save_and_load_round_trip(dit, tmp_path):
    dit.save(tmp_path / "g")
    loaded = af.load(tmp_path / "g")
    assert type(loaded) is af.DiT and loaded.config == dit.config
    labels = torch.tensor([2, 0])
    assert torch.equal(loaded.sample(labels, steps=3, cfg=2.0, seed=3), dit.sample(labels, steps=3, cfg=2.0, seed=3))


def test_flow_convention_and_pixel_mapping():
    x, eps = torch.full((1, 1, 2, 2), -1.0), torch.ones(1, 1, 2, 2)
    assert torch.equal(interpolate(x, eps, torch.tensor([0.0])), x)
    assert torch.equal(interpolate(x, eps, torch.tensor([1.0])), eps)
    assert torch.equal(velocity_target(x, eps), eps - x)  # d/dt of (1 - t) x + t eps
    assert to_uint8(torch.tensor([-2.0, -1.0, 0.0, 1.0, 5.0])).tolist() == [0, 0, 128, 255, 255]


def test_forward_flops_equal_a_flop_counter_on_the_forward():
    from torch.utils.flop_counter import FlopCounterMode
    model = af.DiT.from_config({**TINY, "attn_impl": "explicit"}).eval()
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 1, 8, 8), torch.rand(1), torch.tensor([1]))
    assert counter.get_total_flops() == model.forward_flops() > 0


@pytest.mark.parametrize("method", ["euler", "heun"])
def test_the_sampler_follows_the_straight_path_to_the_data(method):
    # If all data were one image x0, the exact velocity at (x_t, t) is (x_t - x0) / t: the ODE from
    # any noise must land on x0 (any step count: the path is straight), and guidance must not move it.
    from anyformer.models.flow import sample
    x0 = torch.linspace(-1, 1, 16).view(1, 1, 4, 4)

    class Exact(torch.nn.Module):
        null_class = 2

        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(()))

        def image_shape(self):
            return (1, 4, 4)

        def forward(self, x, t, y):
            return (x - x0) / t.clamp_min(1e-6).view(-1, 1, 1, 1)
    images = sample(Exact(), torch.tensor([0, 1, 1]), steps=3, cfg=2.5, seed=0, method=method)
    assert torch.equal(images, to_uint8(x0).expand(3, -1, -1, -1))
