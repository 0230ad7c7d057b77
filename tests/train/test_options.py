"""Each training option does what it says, against its closed form: the learning-rate schedule
(warm-up, cosine to a floor, constant), which parameters weight decay reaches, the optimiser's
betas, and the weight average's decay (ema = d ema + (1 - d) w, d ramping as (1 + n) / (10 + n))."""
import math

import pytest
import torch
from torch import nn

from anyformer.train import TrainConfig
from anyformer.train.ema import EMA
from anyformer.train.optim import lr_at, make_optimizer, param_groups


def config(**kw) -> TrainConfig:
    return TrainConfig(**{"lr": 1e-3, "warmup_steps": 10, **kw})


def test_the_warm_up_climbs_linearly_to_the_rate():
    cfg = config()
    assert [lr_at(s, 100, cfg) for s in (0, 4, 9)] == pytest.approx([1e-4, 5e-4, 1e-3])


def test_the_cosine_falls_from_the_rate_to_its_floor_and_stays_there():
    cfg = config(min_lr_ratio=0.1)
    floor, total = 1e-4, 110  # 100 cosine steps after 10 of warm-up
    assert lr_at(10, total, cfg) == pytest.approx(1e-3)
    assert lr_at(35, total, cfg) == pytest.approx(floor + (1e-3 - floor) * 0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_at(60, total, cfg) == pytest.approx((1e-3 + floor) / 2)
    assert lr_at(110, total, cfg) == pytest.approx(floor)
    assert lr_at(200, total, cfg) == pytest.approx(floor)  # past the end (a budget that shortened the run)


def test_the_floor_is_set_from_the_command_line():
    """`anyformer train --min-lr-ratio R` reaches TrainConfig.min_lr_ratio over the recipe's own value."""
    from anyformer.cli import parser
    from anyformer.cli.train import settings
    from anyformer.train import recipe_config
    asked = settings(parser().parse_args(["train", "mnist", "--min-lr-ratio", "0.1"]))
    assert recipe_config("mnist", **asked).min_lr_ratio == 0.1
    assert recipe_config("mnist", **settings(parser().parse_args(["train", "mnist"]))).min_lr_ratio == 0.0


def test_the_betas_are_set_from_the_command_line_and_checked():
    """`anyformer train --betas B1 B2` reaches TrainConfig.betas over the recipe's own; a rate outside [0, 1)
    is refused with both numbers named."""
    from anyformer.cli import parser
    from anyformer.cli.train import settings
    from anyformer.train import recipe_config
    asked = settings(parser().parse_args(["train", "mnist", "--betas", "0.8", "0.99"]))
    assert recipe_config("mnist", **asked).betas == (0.8, 0.99)
    assert recipe_config("mnist", **settings(parser().parse_args(["train", "mnist"]))).betas == (0.9, 0.999)
    with pytest.raises(ValueError, match=r"betas must be two numbers in \[0, 1\).*0\.9, 1\.0"):
        recipe_config("mnist", **settings(parser().parse_args(["train", "mnist", "--betas", "0.9", "1.0"])))


def test_a_constant_schedule_holds_the_rate_after_the_warm_up():
    cfg = config(schedule="constant")
    assert lr_at(5, 100, cfg) == pytest.approx(6e-4)
    assert [lr_at(s, 100, cfg) for s in (10, 50, 99, 150)] == pytest.approx([1e-3] * 4)


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.pos_embed = nn.Parameter(torch.zeros(1, 5, 3))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 3))
        self.frozen = nn.Parameter(torch.zeros(3, 3), requires_grad=False)


def names(model: nn.Module, params: list) -> set[str]:
    return {n for n, p in model.named_parameters() if any(p is q for q in params)}


def test_weight_decay_reaches_matrices_only_unless_decay_all():
    model = Tiny()
    decay, no_decay = param_groups(model, 0.05)
    assert names(model, decay["params"]) == {"fc.weight"} and decay["weight_decay"] == 0.05
    assert names(model, no_decay["params"]) == {"fc.bias", "norm.weight", "norm.bias", "pos_embed", "cls_token"}
    assert no_decay["weight_decay"] == 0.0
    every, none = param_groups(model, 0.05, decay_all=True)
    assert names(model, every["params"]) == {"fc.weight", "fc.bias", "norm.weight", "norm.bias", "pos_embed",
                                             "cls_token"} and not none["params"]


def test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group():
    model = Tiny()
    opt = make_optimizer(model, config(weight_decay=0.5, betas=(0.8, 0.95), lr=0.01))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.5, 0.0]
    assert all(g["betas"] == (0.8, 0.95) and g["lr"] == 0.01 for g in opt.param_groups)
    every = make_optimizer(Tiny(), config(decay_all=True))
    assert [len(g["params"]) for g in every.param_groups] == [6, 0]
    # Decoupled decay: with no gradient signal (zero grads), one step shrinks decayed weights by lr * wd.
    with torch.no_grad():
        model.fc.weight.fill_(1.0)
        model.fc.bias.fill_(1.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p) if p.requires_grad else None
    opt.step()
    assert torch.allclose(model.fc.weight, torch.full((3, 4), 1 - 0.01 * 0.5))
    assert torch.equal(model.fc.bias, torch.ones(3))


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_the_optimiser_runs_the_adamw_kernel_the_plan_chose(impl):
    """The plan measures "foreach" against "fused" (train/planning.py's adamw_kernel) and the
    optimiser must run the winner: torch's own default on CPU tensors is neither."""
    opt = make_optimizer(Tiny(), config(), impl)
    other = {"foreach": "fused", "fused": "foreach"}[impl]
    assert all(g[impl] is True and not g[other] for g in opt.param_groups)


def test_the_average_follows_its_closed_form():
    model = nn.Linear(2, 2)
    model.register_buffer("count", torch.zeros(()))
    ema = EMA(model, 0.9)  # not 0.5, where d and 1 - d agree and a swap of them would pass
    assert [ema.decay_at(n) for n in (0, 1, 100)] == pytest.approx([0.1, 2 / 11, 0.9])
    start = ema.model.weight.clone()
    with torch.no_grad():
        model.weight.add_(1.0)
        model.count.fill_(7)
    ema.update(model, 100)  # d = 0.9 (the ramp, 101 / 110, is past it): a tenth of the way to the weights
    assert torch.allclose(ema.model.weight, 0.9 * start + 0.1 * model.weight)
    assert ema.model.count.item() == 7  # buffers are copied, not averaged
    assert not any(p.requires_grad for p in ema.model.parameters())  # a copy the optimiser never sees
    for decay in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"ema decay must be in \(0, 1\)"):
            EMA(model, decay)


def test_a_cosine_of_one_step_reaches_its_floor_at_that_step():
    cfg = config(min_lr_ratio=0.1)  # 10 warm-up steps, then one cosine step
    assert lr_at(10, 11, cfg) == pytest.approx(1e-3) and lr_at(11, 11, cfg) == pytest.approx(1e-4)


def test_the_average_comes_back_from_its_state():
    model = Tiny()
    ema = EMA(model, 0.9)
    with torch.no_grad():
        model.fc.weight.add_(1.0)
    ema.update(model, 3)
    restored = EMA(Tiny(), 0.9)
    restored.load_state_dict(ema.state_dict())
    for (name, a), b in zip(ema.model.state_dict().items(), restored.model.state_dict().values()):
        assert torch.equal(a, b), name
