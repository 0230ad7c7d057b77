"""The series transformer's refusals, word for word: settings out of range or that do not go
together, sizes that are not positive integers, and inputs of the wrong shape, length or dtype; the
edges of each allowed range accepted."""

import pytest
import torch

from anyformer.models import SeriesConfig

from .series_by_hand import build, exactly

# --- configuration -------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    (dict(patching="diagonal"), "unknown patching 'diagonal'; expected one of ('across', 'channel')"),
    (dict(position="absolute"), "unknown position 'absolute'; expected one of ('learned', 'sinusoidal', 'rotary')"),
    (dict(patching="channel", position="rotary"),
     "position='rotary' rotates by token order, which per-channel patching does not keep in time; "
     "use learned or sinusoidal positions with patching='channel'"),
    (dict(stem="conv"), "unknown stem 'conv'; expected one of ('patches', 'kernels')"),
    (dict(pool="max"), "unknown pool 'max'; expected one of ('cls', 'mean')"),
    (dict(stem="kernels", patching="channel"),
     "stem='kernels' reads every channel in each kernel and makes its own slopes; "
     "it takes patching='across' and difference=False"),
    (dict(stem="kernels", difference=True),
     "stem='kernels' reads every channel in each kernel and makes its own slopes; "
     "it takes patching='across' and difference=False"),
    (dict(token_drop=1.0), "token_drop must be in [0, 1), got 1.0"),
    (dict(token_drop=-0.25), "token_drop must be in [0, 1), got -0.25"),
    (dict(patch_size=8, patch_stride=9), "patch_stride must be in [1, patch_size=8] (or null), got 9"),
    (dict(patch_size=8, patch_stride=0), "patch_stride must be in [1, patch_size=8] (or null), got 0"),
])
def test_refused_settings_say_exactly_what_is_wrong(settings, message):
    with pytest.raises(ValueError, match=exactly(message)):
        SeriesConfig(**settings)


@pytest.mark.parametrize("name", ["channels", "length", "patch_size", "num_classes", "width", "depth", "heads",
                                  "mlp_hidden", "kernel_features"])
def test_every_size_must_be_a_positive_integer(name):
    with pytest.raises(ValueError, match=exactly(f"{name} must be a positive integer, got 0")):
        SeriesConfig(**{name: 0})


@pytest.mark.parametrize("settings", [
    dict(position="rotary", patching="across"), dict(position="sinusoidal", patching="channel"),
    dict(position="learned", patching="channel"), dict(stem="kernels"),
    dict(token_drop=0.0), dict(token_drop=0.999),
    dict(patch_size=8, patch_stride=1), dict(patch_size=8, patch_stride=8), dict(patch_size=8, patch_stride=None),
])
def test_the_edges_of_each_allowed_range_are_accepted(settings):
    config = SeriesConfig(**settings)
    assert config.stride == (settings.get("patch_stride") or config.patch_size)


# --- refusals of wrong inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("series, lengths, error, message", [
    (torch.zeros(2, 3, 23, 1), None, ValueError,
     "expected series of shape (B, 3, T) (channels fixed at 3), got (2, 3, 23, 1)"),
    (torch.zeros(2, 4, 23), None, ValueError, "expected series of shape (B, 3, T) (channels fixed at 3), got (2, 4, 23)"),
    (torch.zeros(2, 3, 24), None, ValueError, "series of 24 steps is longer than the 23 this model takes"),
    (torch.ones(2, 3, 23, dtype=torch.int64), None, TypeError,
     "series must be a floating-point tensor, got dtype torch.int64"),
    (torch.zeros(2, 3, 23), torch.full((2, 1), 23), ValueError, "lengths must have shape (2,), got (2, 1)"),
    (torch.zeros(2, 3, 23), torch.full((3,), 23), ValueError, "lengths must have shape (2,), got (3,)"),
])
def test_wrong_inputs_are_refused_with_the_exact_reason(series, lengths, error, message):
    model = build()
    with pytest.raises(error, match=exactly(message)):
        model(series, lengths)
