"""The flow-matching maths of `anyformer.models.flow`, each against the equation it implements:
the straight path and its velocity, the pixel mapping, the guidance mix, Euler and Heun steps, and
the sampler's contract (its defaults, its seeded noise, the device it runs on, its refusals).

The velocity model here is a linear field v(x, t, y) = a_y x + t b whose every value the tests
compute by hand, with a separate a for each class and for the null class, so that guidance and
Heun's second evaluation both change the numbers."""
import pytest
import torch
from torch import Tensor, nn

from anyformer.models import flow

SHAPE = (2, 3, 5)  # (C, H, W): all different, so that a swapped or dropped dimension shows


class LinearField(nn.Module):
    """v(x, t, y) = a_y x + t b, recording each call's (x, t, y)."""

    def __init__(self, num_classes: int = 2, scale: float = 1.0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.a = nn.Parameter(torch.randn(num_classes + 1, generator=gen) * scale)
        self.b = nn.Parameter(torch.randn(*SHAPE, generator=gen) * scale)
        self.num_classes = num_classes
        self.calls: list[tuple[Tensor, Tensor, Tensor]] = []

    @property
    def null_class(self) -> int:
        return self.num_classes

    def image_shape(self) -> tuple[int, int, int]:
        return SHAPE

    def forward(self, x, t, y):
        self.calls.append((x, t, y))
        return self.a[y].view(-1, 1, 1, 1) * x + t.view(-1, 1, 1, 1) * self.b



def field(model: LinearField, x: Tensor, t: float, y: Tensor) -> Tensor:
    """The field by hand, at one time t for the whole batch."""
    with torch.no_grad():
        return model.a[y].view(-1, 1, 1, 1) * x + t * model.b


def guided_by_hand(model: LinearField, x: Tensor, t: float, y: Tensor, w: float) -> Tensor:
    v_y = field(model, x, t, y)
    v_null = field(model, x, t, torch.full_like(y, model.null_class))
    return v_null + w * (v_y - v_null)


def integrate_by_hand(model: LinearField, x: Tensor, y: Tensor, steps: int, w: float, heun: bool) -> list[Tensor]:
    """x after each step from t = 1 to t = 0 in equal steps dt = -1/steps; Heun averages the
    velocities at both ends of each step but the last (which ends at t = 0 and stays Euler)."""
    dt, states = -1.0 / steps, []
    for k in range(steps):
        t, t_next = 1 - k / steps, 1 - (k + 1) / steps
        v = guided_by_hand(model, x, t, y, w)
        guess = x + dt * v
        if heun and k < steps - 1:
            guess = x + dt * (v + guided_by_hand(model, guess, t_next, y, w)) / 2
        x = guess
        states.append(x)
    return states


def noise_of_seed(n: int, seed: int) -> Tensor:
    return torch.randn(n, *SHAPE, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the path and the pixels
def test_interpolation_is_each_images_own_straight_line_from_data_to_noise():
    gen = torch.Generator().manual_seed(1)
    x, eps = torch.randn(3, *SHAPE, generator=gen), torch.randn(3, *SHAPE, generator=gen)
    t = torch.tensor([0.2, 0.55, 0.9])
    got = flow.interpolate(x, eps, t)
    for i in range(3):  # one image at a time: its own t, no broadcasting to get wrong
        torch.testing.assert_close(got[i], (1 - t[i].item()) * x[i] + t[i].item() * eps[i])


def test_the_velocity_target_is_the_derivative_of_the_path():
    gen = torch.Generator().manual_seed(2)
    x, eps = torch.randn(2, *SHAPE, generator=gen), torch.randn(2, *SHAPE, generator=gen)
    t0, t1 = torch.tensor([0.3, 0.6]), torch.tensor([0.5, 0.7])
    # The path is straight: its difference quotient over any interval is exactly the velocity.
    quotient = (flow.interpolate(x, eps, t1) - flow.interpolate(x, eps, t0)) / (t1 - t0).view(-1, 1, 1, 1)
    torch.testing.assert_close(quotient, flow.velocity_target(x, eps))
    torch.testing.assert_close(flow.velocity_target(x, eps), eps - x)


def test_pixels_map_each_level_of_minus_one_one_back_to_its_uint8_level():
    levels = torch.arange(256, dtype=torch.float64)
    centres = levels / 127.5 - 1  # the inverse of level = (x + 1) * 127.5
    for offset in (-0.3, 0.0, 0.3):  # within half a level of its centre, a pixel rounds back to it
        x = (centres + offset / 127.5).float()
        assert torch.equal(flow.to_uint8(x), levels.to(torch.uint8))
    outside = flow.to_uint8(torch.tensor([-3.0, -1.01, 1.01, 4.0]))
    assert outside.tolist() == [0, 0, 255, 255] and outside.dtype == torch.uint8


# ---------------------------------------------------------------- refusals
def test_labels_that_are_not_a_1d_integer_tensor_are_named_in_the_error():
    with pytest.raises(TypeError, match=r"labels must be a 1-D integer tensor, got torch\.int64 of shape \(1, 2\)"):
        flow.check_labels(torch.tensor([[0, 1]]), 3)
    with pytest.raises(TypeError, match=r"got torch\.float32 of shape \(2,\)"):
        flow.check_labels(torch.tensor([0.0, 1.0]), 3)
    with pytest.raises(TypeError, match=r"got torch\.bool of shape \(1,\)"):
        flow.check_labels(torch.tensor([True]), 3)
    with pytest.raises(TypeError, match=r"labels must be a 1-D integer tensor, got list$"):
        flow.check_labels([0, 1], 3)
    checked = flow.check_labels(torch.tensor([2, 0], dtype=torch.int32), 3)
    assert checked.dtype == torch.int64 and checked.tolist() == [2, 0]


@pytest.mark.parametrize("steps", [0, -2, True, 2.5, "3"])
def test_steps_must_be_a_positive_integer(steps):
    with pytest.raises(ValueError, match=rf"steps must be a positive integer, got {steps!r}$"):
        flow.sample(LinearField(), torch.tensor([0]), steps=steps, seed=0)


@pytest.mark.parametrize("cfg", [-0.5, True, "2", float("nan")])
def test_the_guidance_scale_must_be_a_number_of_at_least_zero(cfg):
    with pytest.raises(ValueError, match=rf"cfg \(the guidance scale\) must be a number >= 0, got {cfg!r}$"):
        flow.sample(LinearField(), torch.tensor([0]), steps=1, cfg=cfg, seed=0)


@pytest.mark.parametrize("steps, cfg", [(1, 0), (1, 0.5), (2, 0.0)])
def test_one_step_and_guidance_scales_below_one_are_accepted(steps, cfg):
    # cfg = 0 is the unconditional model alone; 0 < cfg < 1 interpolates towards it.
    model = LinearField()
    images = flow.sample(model, torch.tensor([1, 0]), steps=steps, cfg=cfg, seed=3, method="euler")
    expected = integrate_by_hand(model, noise_of_seed(2, 3), torch.tensor([1, 0]), steps, cfg, heun=False)[-1]
    assert images.shape == (2, *SHAPE)
    assert (images.int() - flow.to_uint8(expected).int()).abs().max() <= 1  # float rounding: one level


# ---------------------------------------------------------------- guidance and the integrators
def test_guidance_extrapolates_from_the_unconditional_velocity():
    model = LinearField()
    x, y = torch.randn(3, *SHAPE, generator=torch.Generator().manual_seed(4)), torch.tensor([0, 1, 1])
    for w in (0.0, 0.5, 2.5):
        with torch.no_grad():
            got = flow.guided_velocity(model, x, 0.4, y, w)
        torch.testing.assert_close(got, guided_by_hand(model, x, 0.4, y, w))
    # Scale one is the conditional velocity itself, from one pass over the batch alone.
    model.calls.clear()
    with torch.no_grad():
        torch.testing.assert_close(flow.guided_velocity(model, x, 0.4, y, 1.0), field(model, x, 0.4, y))
    assert [len(call[2]) for call in model.calls] == [3]


def test_guidance_asks_the_model_at_the_time_given_on_the_images_device():
    model = LinearField().to("meta")
    x, y = torch.empty(2, *SHAPE, device="meta"), torch.tensor([0, 1], device="meta")
    for w in (1.0, 3.0):
        model.calls.clear()
        flow.guided_velocity(model, x, 0.25, y, w)
        (_, t, _), = model.calls
        assert t.device.type == "meta" and t.shape == (2 if w == 1.0 else 4,)


@pytest.mark.parametrize("method", ["euler", "heun"])
def test_integration_follows_euler_or_heun_steps_from_t1_to_t0(method):
    model = LinearField()
    noise, y = noise_of_seed(3, 5), torch.tensor([0, 1, 2])  # 2: the null class as a label
    with torch.no_grad():
        got = flow.integrate(model, noise, y, 4, 1.75, method)
    torch.testing.assert_close(got, integrate_by_hand(model, noise, y, 4, 1.75, heun=method == "heun")[-1])


def test_heun_and_euler_differ_and_one_heun_step_is_an_euler_step():
    # Heun's correction is skipped on the step that ends at t = 0, so with one step they agree.
    model = LinearField()
    noise, y = noise_of_seed(2, 6), torch.tensor([1, 0])
    with torch.no_grad():
        heun, euler = (flow.integrate(model, noise, y, 3, 2.0, m) for m in ("heun", "euler"))
        assert not torch.allclose(heun, euler, atol=1e-3)
        assert torch.equal(flow.integrate(model, noise, y, 1, 2.0, "heun"), flow.integrate(model, noise, y, 1, 2.0, "euler"))


def test_integration_yields_each_step_and_ends_where_integrate_does():
    model = LinearField()
    noise, y = noise_of_seed(2, 7), torch.tensor([0, 1])
    with torch.no_grad():
        steps = list(flow.integrate_steps(model, noise, y, 3, 1.5, "heun"))
        assert torch.equal(steps[-1], flow.integrate(model, noise, y, 3, 1.5, "heun"))
    by_hand = integrate_by_hand(model, noise, y, 3, 1.5, heun=True)
    assert len(steps) == len(by_hand) == 3
    for x, expected in zip(steps, by_hand):
        torch.testing.assert_close(x, expected)


@pytest.mark.parametrize("method, times", [
    ("euler", [1, 2 / 3, 1 / 3]),
    ("heun", [1, 2 / 3, 2 / 3, 1 / 3, 1 / 3]),  # each step's start, then its end but for the last step
])
def test_the_model_is_asked_at_equally_spaced_times(method, times):
    # Three steps: 2/3 and 1/3 are where a float32 grid would miss the float32 nearest to k/3.
    model = LinearField()
    with torch.no_grad():
        flow.integrate(model, noise_of_seed(1, 8), torch.tensor([0]), 3, 1.0, method)
    asked = [call[1] for call in model.calls]
    assert all(t.dtype == torch.float32 for t in asked)
    assert [t.item() for t in asked] == [torch.tensor(t, dtype=torch.float32).item() for t in times]


# ---------------------------------------------------------------- the sampler
@pytest.mark.parametrize("method", ["euler", "heun"])
def test_samples_are_the_integrated_noise_of_the_seed_as_uint8(method):
    model = LinearField(scale=0.8)
    labels = torch.tensor([0, 1, 1, 0])
    images = flow.sample(model, labels, steps=3, cfg=2.0, seed=11, method=method)
    with torch.no_grad():
        expected = flow.to_uint8(flow.integrate(model, noise_of_seed(4, 11), labels, 3, 2.0, method))
    assert images.dtype == torch.uint8 and torch.equal(images, expected)
    # The two methods give different images here, so the method asked for is the one used.
    other = flow.sample(model, labels, steps=3, cfg=2.0, seed=11, method="heun" if method == "euler" else "euler")
    assert not torch.equal(images, other)


@pytest.mark.parametrize("entry", ["sample", "sample_steps"])
def test_sampler_defaults_are_fifty_heun_steps_without_guidance(entry):
    model = LinearField()
    labels = torch.tensor([0, 1, 0])
    if entry == "sample":
        images = flow.sample(model, labels, seed=2)
    else:
        *nones, images = flow.sample_steps(model, labels, seed=2)
        assert nones == [None] * 50
    # Heun: two passes a step but one on the last, each over the 3 labels alone (cfg = 1: no null pass).
    assert len(model.calls) == 2 * 50 - 1 and all(len(y) == 3 for _, _, y in model.calls)
    assert torch.equal(images, flow.sample(LinearField(), labels, steps=50, cfg=1.0, seed=2, method="heun"))


def test_sampler_runs_on_the_models_device():
    # A model on the meta device: noise and labels must be moved there, and the guidance times too.
    model = LinearField().to("meta").train()
    stepper = flow.sample_steps(model, torch.tensor([0, 1]), steps=3, cfg=2.0, seed=0, method="euler")
    assert next(stepper) is None and next(stepper) is None
    assert not model.training  # sampling runs the model in eval mode ...
    stepper.close()
    assert model.training      # ... and gives it back in the mode it was in
    assert len(model.calls) == 2
    for x, t, y in model.calls:
        assert (x.device.type, t.device.type, y.device.type) == ("meta", "meta", "meta")


def test_no_labels_give_no_images_of_the_models_shape():
    model = LinearField()
    images = flow.sample(model, torch.zeros(0, dtype=torch.long), steps=2, seed=0)
    assert images.shape == (0, *SHAPE) and images.dtype == torch.uint8
    assert model.calls == []
