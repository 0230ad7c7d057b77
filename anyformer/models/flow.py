"""Flow matching (rectified flow): a straight path from each image to its own noise, and the ODE
that carries noise back along the learned velocity.

Convention (SiT, minRF), for data x in [-1, 1] and noise eps ~ N(0, I), t in [0, 1]:

    x_t = (1 - t) x + t eps          t = 0: the data, t = 1: pure noise
    v   = dx_t / dt = eps - x        what the model learns to predict from (x_t, t, y)

Sampling integrates dx/dt = v from t = 1 down to t = 0 with Euler or Heun steps; classifier-free
guidance uses v = v_null + w (v_y - v_null), both velocities from one batch.
"""
from __future__ import annotations

from typing import Iterator, Protocol

import torch
from torch import Tensor

METHODS = ("euler", "heun")
CHUNK = 256  # images denoised at once: bounds memory, not the result (the noise is drawn up front)


class VelocityModel(Protocol):
    """What the sampler needs: `model(x_t (B, C, H, W), t (B,), y (B,)) -> v (B, C, H, W)`, the
    null class's index, and the image shape."""

    def __call__(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor: ...

    @property
    def null_class(self) -> int: ...

    def image_shape(self) -> tuple[int, int, int]: ...


def interpolate(x: Tensor, eps: Tensor, t: Tensor) -> Tensor:
    """x_t = (1 - t) x + t eps, with t (B,) broadcast over (B, C, H, W)."""
    t = t.view(-1, *([1] * (x.dim() - 1)))
    return (1 - t) * x + t * eps


def velocity_target(x: Tensor, eps: Tensor) -> Tensor:
    """dx_t/dt along the straight path: eps - x."""
    return eps - x


def to_uint8(x: Tensor) -> Tensor:
    """Pixels trained in [-1, 1] back to uint8 [0, 255]: clamped, then rounded."""
    return ((x.float() + 1) * 127.5).clamp_(0, 255).round_().to(torch.uint8)


def check_labels(labels: Tensor, num_classes: int) -> Tensor:
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
        got = f"{labels.dtype} of shape {tuple(labels.shape)}" if isinstance(labels, Tensor) else type(labels).__name__
        raise TypeError(f"labels must be a 1-D integer tensor, got {got}")
    if labels.numel():
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"class labels must lie in [0, {num_classes}) (the model's {num_classes} classes); "
                             f"got values in [{lo}, {hi}]")
    return labels.long()


def _check_options(steps: int, cfg: float, method: str) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if isinstance(cfg, bool) or not isinstance(cfg, (int, float)) or not cfg >= 0:
        raise ValueError(f"cfg (the guidance scale) must be a number >= 0, got {cfg!r}")
    if method not in METHODS:
        raise ValueError(f"unknown sampling method {method!r}; expected one of {METHODS}")


def guided_velocity(model: VelocityModel, x: Tensor, t: float, y: Tensor, cfg: float) -> Tensor:
    """v_null + w (v_y - v_null), the conditional and unconditional passes in one batch; w == 1
    is the conditional velocity alone (one pass)."""
    tt = torch.full((x.shape[0],), t, device=x.device)
    if cfg == 1:
        return model(x, tt, y).float()
    null = torch.full_like(y, model.null_class)
    v_y, v_null = model(torch.cat([x, x]), torch.cat([tt, tt]), torch.cat([y, null])).float().chunk(2)
    return v_null + cfg * (v_y - v_null)


def integrate(model: VelocityModel, noise: Tensor, y: Tensor, steps: int, cfg: float, method: str) -> Tensor:
    """From t = 1 (noise) to t = 0 (data) in `steps` equal steps of dt = -1/steps.
    Heun: an Euler guess, then the average of the velocities at both ends (two passes a step), except
    on the last step, which ends at t = 0: logit-normal training rarely shows the model t near 0, so
    that step stays Euler (as EDM's sampler does at sigma = 0)."""
    for x in integrate_steps(model, noise, y, steps, cfg, method):
        pass
    return x


def integrate_steps(model: VelocityModel, noise: Tensor, y: Tensor, steps: int, cfg: float,
                    method: str) -> Iterator[Tensor]:
    """`integrate` one step at a time: yields x after each of the `steps` steps (the last is the result)."""
    x = noise
    times = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64).tolist()
    for t, t_next in zip(times[:-1], times[1:]):
        dt = t_next - t
        v = guided_velocity(model, x, t, y, cfg)
        guess = x + dt * v
        if method == "heun" and t_next > 0:
            guess = x + dt * 0.5 * (v + guided_velocity(model, guess, t_next, y, cfg))
        x = guess
        yield x


def sample(model: VelocityModel, labels: Tensor, *, steps: int = 50, cfg: float = 1.0, seed: int | None = None,
           method: str = "heun") -> Tensor:
    """Images (N, C, H, W) uint8 of the classes `labels` (N,). The same seed gives the same images:
    the noise is drawn on the CPU from its own generator, whatever the device."""
    for out in sample_steps(model, labels, steps=steps, cfg=cfg, seed=seed, method=method):
        pass
    return out


def sample_steps(model: VelocityModel, labels: Tensor, *, steps: int = 50, cfg: float = 1.0,
                 seed: int | None = None, method: str = "heun") -> Iterator[Tensor | None]:
    """`sample` one ODE step at a time, for a caller that may stop between steps (a server whose
    client left): yields None after each step of each chunk, then the images, the same bits as
    `sample`'s. Each step runs in inference mode on its own, not across a yield, so the steps may
    be taken on different threads (inference mode is per thread)."""
    _check_options(steps, cfg, method)
    labels = check_labels(labels, model.null_class)
    c, h, w = model.image_shape()
    gen = torch.Generator()
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    noise = torch.randn(len(labels), c, h, w, generator=gen)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        for i in range(0, len(labels), CHUNK):
            chunk = integrate_steps(model, noise[i:i + CHUNK].to(device), labels[i:i + CHUNK].to(device),
                                    steps, float(cfg), method)
            while True:
                with torch.inference_mode():
                    x = next(chunk, None)
                if x is None:
                    break
                last = x
                yield None
            out.append(to_uint8(last).cpu())
    finally:
        model.train(was_training)
    yield torch.cat(out) if out else torch.empty(0, c, h, w, dtype=torch.uint8)
