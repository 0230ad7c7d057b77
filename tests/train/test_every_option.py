"""Every TrainConfig option pinned (issue 44): a test that fails when the library ignores the option
(behaves as if its default were given) or inverts it. OPTION_PINS names, for each option, the tests
that failed when it was ignored or inverted by hand (docs/testing.md, "Every training option pinned");
the tests below are those the rest of the suite lacked. Each checks the option's effect on something
observable: the step's gradient, the batch the loader gave, the chunks scored, the files a run wrote."""
from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file
from torch import nn

from anyformer.data import random_affine, random_crop_flip
from anyformer.train import Interrupted, Trainer, TrainConfig
from anyformer.train import trainer as trainer_module
from anyformer.train.batches import epoch_order, step_generator
from anyformer.train.build import TRUNK, build_model
from anyformer.train.distributed import Distributed
from anyformer.train.resume import extended_settings
from anyformer.train.tasks import ImageClassification

from .conftest import interrupt_at, make_trainer, tiny_config, torchrun_env

REPO = Path(__file__).resolve().parents[2]

# Each option -> the tests that fail when the library ignores or inverts it (node ids; a parametrised
# test by its function's name). Verified by hand: the option replaced at each place the library reads
# it by its default (ignored) or its opposite (inverted), the tests run, the change reverted.
OPTION_PINS: dict[str, list[str]] = {
    # Bookkeeping: the recipe's name is the default run directory and is recorded in summary.json.
    "recipe": ["tests/train/test_every_option.py::test_recipe_names_the_default_run_directory_and_the_summary"],
    "task": ["tests/train/test_tasks.py::test_an_unknown_task_is_named_with_the_known_ones"],
    "model": ["tests/train/test_every_option.py::test_the_model_is_the_preset_named_with_its_overrides"],
    "model_overrides": ["tests/train/test_every_option.py::test_the_model_is_the_preset_named_with_its_overrides"],
    "data": ["tests/train/test_user_images.py::test_a_folder_without_a_test_split_holds_out_a_seeded_stratified_share"],
    "out": ["tests/train/test_every_option.py::test_out_is_where_the_run_writes"],
    "epochs": ["tests/train/test_every_option.py::test_epochs_and_max_steps_set_the_length_of_the_run"],
    "max_steps": ["tests/train/test_every_option.py::test_epochs_and_max_steps_set_the_length_of_the_run"],
    "batch_size": ["tests/train/test_preprocess.py::test_the_classification_task_feeds_the_model_through_it",
                   "tests/train/test_lm.py::test_evaluation_uses_the_same_windows_and_shards_add_up"],
    "grad_accum": ["tests/train/test_every_option.py::test_grad_accum_splits_the_step_into_that_many_chunks"],
    "lr": ["tests/train/test_trainer.py::test_warmup_then_cosine",
           "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "min_lr_ratio": ["tests/train/test_options.py::test_the_cosine_falls_from_the_rate_to_its_floor_and_stays_there"],
    "weight_decay": [
        "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "decay_all": [
        "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "betas": ["tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "schedule": ["tests/train/test_options.py::test_a_constant_schedule_holds_the_rate_after_the_warm_up"],
    "warmup_steps": ["tests/train/test_options.py::test_the_warm_up_climbs_linearly_to_the_rate"],
    "label_smoothing": ["tests/train/test_every_option.py::test_label_smoothing_reaches_the_loss"],
    "grad_clip": ["tests/train/test_every_option.py::test_grad_clip_caps_the_gradient_norm_the_step_used"],
    "augment": ["tests/train/test_every_option.py::test_augment_transforms_the_batch_as_named"],
    "normalize": ["tests/train/test_preprocess.py::test_the_classification_task_feeds_the_model_through_it",
                  "tests/train/test_series_train.py::"
                  "test_per_series_normalisation_is_chosen_by_the_config_and_saved_with_the_run"],
    "eval_every": ["tests/train/test_every_option.py::test_eval_every_sets_the_steps_that_are_scored"],
    "eval_batch_size": ["tests/train/test_every_option.py::test_eval_batch_size_is_the_size_of_each_scored_chunk"],
    "limit_train": ["tests/train/test_every_option.py::test_limits_cut_the_splits_to_their_first_examples",
                    "tests/train/test_user_images.py::test_limits_cut_after_the_hold_out"],
    "limit_eval": ["tests/train/test_every_option.py::test_limits_cut_the_splits_to_their_first_examples",
                   "tests/train/test_user_images.py::test_limits_cut_after_the_hold_out"],
    "seq_len": ["tests/train/test_lm.py::test_evaluation_uses_the_same_windows_and_shards_add_up"],
    "eval_iters": ["tests/train/test_lm.py::test_evaluation_uses_the_same_windows_and_shards_add_up"],
    "tokenizer": ["tests/train/test_lm_user_text.py::test_a_learned_tokenizer_is_saved_with_the_run_and_recorded"],
    "image_size": ["tests/train/test_every_option.py::test_image_size_resizes_every_image_loaded"],
    "val_fraction": [
        "tests/train/test_user_images.py::test_a_folder_without_a_test_split_holds_out_a_seeded_stratified_share"],
    "label_column": ["tests/train/test_series_user_data.py::test_a_label_column_named_on_the_command_line"],
    "label_fraction": ["tests/train/test_mae.py::test_label_fraction_picks_a_class_balanced_seeded_subset"],
    "objective": ["tests/train/test_tables_train.py::test_task_overrides_what_the_target_s_cells_suggest"],
    "baseline": ["tests/train/test_tables_train.py::test_the_baseline_is_fitted_on_the_same_split_and_recorded",
                 "tests/train/test_baselines.py::test_images_get_logistic_regression_on_their_pixels",
                 "tests/train/test_baselines.py::test_series_get_minirocket"],
    "select_fraction": ["tests/train/test_tables_keep_best.py::test_by_default_the_last_weights_are_kept",
                        "tests/train/test_tables_keep_best.py::"
                        "test_the_summary_and_the_weights_are_the_best_evaluation_on_the_held_back_rows"],
    "init_from": ["tests/train/test_every_option.py::test_init_from_starts_the_trunk_from_the_runs_weights"],
    "device": ["tests/train/test_every_option.py::test_device_is_the_one_asked_for"],
    "amp": ["tests/train/test_every_option.py::test_amp_bf16_runs_the_step_and_the_evaluation_in_bf16",
            "tests/train/test_steps.py::test_fp16_on_a_cpu_is_refused_before_any_data_is_read"],
    "compile": ["tests/train/test_trainer.py::test_a_forced_compile_trains_compiled_across_an_epoch_end"],
    "plan": ["tests/train/test_plan_replay.py::test_a_plan_file_that_is_not_one_is_refused_in_one_line",
             "tests/train/test_plan_replay.py::test_plan_stock_answers_every_decision_with_pytorchs_default"],
    "seed": ["tests/train/test_every_option.py::test_seed_fixes_the_initial_weights_and_the_batch_order"],
    "threads": ["tests/train/test_every_option.py::test_threads_sets_torchs_thread_count"],
    "deterministic": ["tests/train/test_every_option.py::test_deterministic_turns_on_deterministic_kernels_only_when_asked"],
    "checkpoint_every": ["tests/train/test_every_option.py::test_checkpoints_every_n_steps_and_only_the_latest_kept",
                         "tests/train/test_trainer.py::test_non_finite_loss_stops_with_the_step_named"],
    "keep_checkpoints": ["tests/train/test_every_option.py::test_checkpoints_every_n_steps_and_only_the_latest_kept"],
    "resume": ["tests/train/test_every_option.py::test_resume_continues_an_interrupted_run"],
    "overwrite": ["tests/train/test_every_option.py::test_overwrite_replaces_a_run_that_is_otherwise_refused"],
    "progress": ["tests/train/test_every_option.py::test_progress_draws_a_bar_only_when_asked"],
    "plots": ["tests/train/test_trainer.py::test_a_run_without_plots_draws_nothing_and_trains_the_same_bits"],
    "fsdp": ["tests/train/test_every_option.py::test_fsdp_shards_the_weights_under_torchrun"],
    "log": ["tests/train/test_every_option.py::test_log_tensorboard_writes_event_files_beside_metrics_jsonl"],
    "time_budget": ["tests/train/test_every_option.py::test_time_budget_ends_the_run_before_its_max_steps"],
    "ema": ["tests/train/test_every_option.py::test_ema_weights_are_what_is_saved"],
    "label_dropout": ["tests/train/test_flow.py::test_batches_are_a_function_of_seed_and_step_and_drop_labels"],
    "judge": ["tests/train/test_flow.py::test_a_judge_is_asked_for_lazily_and_its_scores_are_logged"],
    "judge_samples": ["tests/train/test_flow.py::test_a_judge_is_asked_for_lazily_and_its_scores_are_logged"],
    # Bookkeeping: what `anyformer train --data PATH` derived, said one line each (and kept in config.json).
    "derived": ["tests/train/test_every_option.py::test_derived_settings_are_announced_one_line_each"],
    # Bookkeeping: a finished run continued past its end records the added steps; that record is what
    # lets the resume change the run's length, which a plain resume refuses.
    "extended": ["tests/train/test_every_option.py::test_extended_lets_a_finished_run_continue_past_its_end"],
}


def test_every_option_is_pinned_by_tests_that_exist():
    assert set(OPTION_PINS) == {f.name for f in dataclasses.fields(TrainConfig)}
    defined: dict[str, set[str]] = {}  # each file's test functions, parsed once
    for option, node_ids in OPTION_PINS.items():
        assert node_ids, f"{option} names no test"
        for node_id in node_ids:
            path, name = node_id.split("::")
            if path not in defined:
                tree = ast.parse((REPO / path).read_text())
                defined[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name.startswith("test_") and name in defined[path], f"{option}: {node_id} does not exist"


@pytest.fixture(autouse=True)
def no_peak_measurement(monkeypatch):
    """The summary's MFU divides by the measured matmul rate, about a second per run on a CPU; no test
    here reads it."""
    monkeypatch.setattr(trainer_module, "peak_flops", lambda device, amp="none": (1e12, "test"))


def short(tmp_path, **kw) -> TrainConfig:
    """tiny_config on 320 training digits (10 steps an epoch) and 100 test digits."""
    return tiny_config(tmp_path, **{"limit_train": 320, "limit_eval": 100, "warmup_steps": 0, **kw})


def metric_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt"))


# ---------------------------------------------------------------- where the run is written


def test_recipe_names_the_default_run_directory_and_the_summary(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.chdir(tmp_path)
    summary = make_trainer(short(tmp_path, recipe="pinned", out=None, max_steps=1), mnist_slice).run()
    assert summary["recipe"] == "pinned"
    assert json.loads((tmp_path / "runs" / "pinned" / "summary.json").read_text())["recipe"] == "pinned"


def test_out_is_where_the_run_writes(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were `out` ignored, runs/<recipe> would be made here, not in the repository
    make_trainer(short(tmp_path, out=str(tmp_path / "elsewhere"), max_steps=1), mnist_slice).run()
    assert (tmp_path / "elsewhere" / "summary.json").is_file() and not (tmp_path / "runs").exists()


def test_overwrite_replaces_a_run_that_is_otherwise_refused(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=2), mnist_slice).run()
    with pytest.raises(ValueError, match="holds a run already"):
        make_trainer(short(tmp_path, max_steps=3), mnist_slice)
    make_trainer(short(tmp_path, max_steps=3, overwrite=True), mnist_slice).run()
    assert metric_steps(tmp_path / "run") == [3]  # the first run's line is gone with it


# ---------------------------------------------------------------- the model


def test_the_model_is_the_preset_named_with_its_overrides(tmp_path, mnist_slice):
    # vit-mnist-fast has a convolutional stem and width 64; vit-mnist (the default) patches and width 128.
    cfg = short(tmp_path, model="vit-mnist-fast", model_overrides=dict(width=40, depth=1, heads=2, mlp_hidden=80))
    task = ImageClassification(cfg, torch.device("cpu"), *mnist_slice)
    c = build_model(cfg, task).config
    assert (c.stem, c.width, c.depth, c.heads, c.mlp_hidden) == ("conv", 40, 1, 2, 80)


def test_init_from_starts_the_trunk_from_the_runs_weights(tmp_path, mnist_slice):
    make_trainer(short(tmp_path / "a", max_steps=1), mnist_slice).run()
    saved = load_file(tmp_path / "a" / "run" / "model.safetensors")
    started = make_trainer(short(tmp_path / "b", seed=1, init_from=str(tmp_path / "a" / "run")), mnist_slice)
    own = started.model.state_dict()
    trunk = [k for k in saved if k.startswith(TRUNK)]
    head = [k for k in saved if not k.startswith(TRUNK) and saved[k].dim() == 2]
    assert trunk and all(torch.equal(own[k], saved[k]) for k in trunk)
    assert head and not any(torch.equal(own[k], saved[k]) for k in head)  # the classifier head starts fresh


def test_seed_fixes_the_initial_weights_and_the_batch_order(tmp_path, mnist_slice):
    def first(seed):
        t = make_trainer(short(tmp_path / str(seed), seed=seed), mnist_slice)
        return t.model.state_dict(), t.task.batch(0)[0][1]
    (w0, y0), (w5, y5), (again, y5_again) = first(0), first(5), first(5)
    assert all(torch.equal(again[k], w5[k]) for k in w5) and torch.equal(y5, y5_again)
    assert not any(torch.equal(w0[k], w5[k]) for k in w0 if w0[k].dim() == 2)  # every matrix drawn anew
    train_labels = mnist_slice[0].labels[:320]
    assert torch.equal(y5, train_labels[epoch_order(320, 5, 0)[:32]]) and not torch.equal(y0, y5)


# ---------------------------------------------------------------- the data


def test_limits_cut_the_splits_to_their_first_examples(tmp_path, mnist_slice):
    train, test = mnist_slice
    task = ImageClassification(short(tmp_path, limit_train=100, limit_eval=50), torch.device("cpu"), train, test)
    assert torch.equal(task.train.images, train.images[:100]) and torch.equal(task.test.images, test.images[:50])
    assert task.steps_per_epoch == 4  # 100 examples in batches of 32


def _images(root: Path) -> Path:
    """Two classes of four 20x24 pictures each; the split has no test/ (a share is held out)."""
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 255, (20, 24), dtype=np.uint8)).save(root / cls / f"{i}.png")
    return root


def test_image_size_resizes_every_image_loaded(tmp_path):
    data = _images(tmp_path / "pics")
    for size, shape in ((12, (12, 12)), ([10, 14], (10, 14))):
        task = ImageClassification(short(tmp_path, data=str(data), image_size=size, limit_train=None,
                                         limit_eval=None), torch.device("cpu"))
        assert tuple(task.train.images.shape[-2:]) == tuple(task.test.images.shape[-2:]) == shape


def test_augment_transforms_the_batch_as_named(tmp_path, mnist_slice):
    def batch(augment):
        task = ImageClassification(short(tmp_path, augment=augment), torch.device("cpu"), *mnist_slice)
        return task, task.batch(3)[0][0]
    task, plain = batch("none")
    idx = epoch_order(320, 0, 0)[3 * 32:4 * 32]
    assert torch.equal(plain, task.normalise(task.images[idx]))
    _, digits = batch("digits")
    assert torch.equal(digits, random_affine(plain, generator=step_generator(0, 3), fill=task._black))
    _, crop_flip = batch("crop_flip")
    assert torch.equal(crop_flip, random_crop_flip(plain, generator=step_generator(0, 3)))
    assert not torch.equal(digits, plain) and not torch.equal(crop_flip, plain)


# ---------------------------------------------------------------- the step


def test_epochs_and_max_steps_set_the_length_of_the_run(tmp_path, mnist_slice):
    assert make_trainer(short(tmp_path / "e", epochs=1.5), mnist_slice).total_steps == 15  # 10 steps an epoch
    assert make_trainer(short(tmp_path / "m", epochs=1.5, max_steps=7), mnist_slice).total_steps == 7


def test_grad_accum_splits_the_step_into_that_many_chunks(tmp_path, mnist_slice):
    trainer = make_trainer(short(tmp_path, grad_accum=4), mnist_slice)
    real_loss, chunks = trainer.task.loss, []
    trainer.task.loss = lambda model, batch: (chunks.append(len(batch[0])), real_loss(model, batch))[1]
    trainer.train_step()
    assert chunks == [8, 8, 8, 8]


def test_label_smoothing_reaches_the_loss(tmp_path, mnist_slice):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    task = ImageClassification(short(tmp_path, label_smoothing=0.2), torch.device("cpu"), *mnist_slice)
    batch = task.batch(0)[0]
    logits = model(batch[0])
    smoothed = F.cross_entropy(logits, batch[1], label_smoothing=0.2)
    assert torch.equal(task.loss(model, batch)[0], smoothed)
    assert not torch.allclose(smoothed, F.cross_entropy(logits, batch[1]))


def test_grad_clip_caps_the_gradient_norm_the_step_used(tmp_path, mnist_slice):
    def norm_stepped(grad_clip):
        trainer = make_trainer(short(tmp_path / str(grad_clip), grad_clip=grad_clip), mnist_slice)
        seen, real_step = [], trainer.optimizer.step

        def step():
            seen.append(float(torch.linalg.vector_norm(torch.stack(
                [p.grad.norm() for p in trainer.model.parameters() if p.grad is not None]))))
            return real_step()
        trainer.optimizer.step = step
        trainer.train_step()
        return seen[0]
    unclipped = norm_stepped(None)
    assert unclipped > 0.01  # so that the cap below has something to cut
    assert norm_stepped(0.01) == pytest.approx(0.01, rel=1e-4)


def test_amp_bf16_runs_the_step_and_the_evaluation_in_bf16(tmp_path, mnist_slice):
    trainer = make_trainer(short(tmp_path, amp="bf16", max_steps=1), mnist_slice)
    dtypes = []
    trainer.model.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    trainer.train_step()
    trainer.task.evaluate(trainer.model, trainer.dist)
    assert len(dtypes) > 1 and set(dtypes) == {torch.bfloat16}


class Recording(nn.Module):
    """A linear classifier of digits that notes the size of each batch it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.sizes = nn.Linear(784, 10), []

    def forward(self, x):
        self.sizes.append(len(x))
        return self.linear(x.flatten(1))


def test_eval_batch_size_is_the_size_of_each_scored_chunk(tmp_path, mnist_slice):
    task = ImageClassification(short(tmp_path, limit_eval=500, eval_batch_size=200), torch.device("cpu"),
                               *mnist_slice)
    model = Recording()
    task.evaluate(model, Distributed())
    assert model.sizes == [200, 200, 100]


# ---------------------------------------------------------------- evaluations, checkpoints, resume


def test_eval_every_sets_the_steps_that_are_scored(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=6, eval_every=2), mnist_slice).run()
    assert metric_steps(tmp_path / "run") == [2, 4, 6]  # not once an epoch (10 steps): only at the end


def test_checkpoints_every_n_steps_and_only_the_latest_kept(tmp_path, mnist_slice, monkeypatch):
    trainer = make_trainer(short(tmp_path, max_steps=6, checkpoint_every=1, keep_checkpoints=3), mnist_slice)
    saved, real_save = [], trainer_module.checkpoint.save
    monkeypatch.setattr(trainer_module.checkpoint, "save", lambda t: (saved.append(t.step), real_save(t))[1])
    trainer.run()
    assert saved == [1, 2, 3, 4, 5, 6]  # the one evaluation is at the end (6 steps of a 10-step epoch)
    assert checkpoints(tmp_path / "run") == [f"step-{s:09d}.pt" for s in (4, 5, 6)]


def test_resume_continues_an_interrupted_run(tmp_path, mnist_slice):
    first = make_trainer(short(tmp_path, max_steps=6, eval_every=2), mnist_slice)
    interrupt_at(first, 4)
    with pytest.raises(Interrupted):
        first.run()
    assert metric_steps(tmp_path / "run") == [2, 4]
    summary = make_trainer(short(tmp_path, max_steps=6, eval_every=2, resume=True), mnist_slice).run()
    assert summary["resumed"] is True and summary["steps"] == 6
    assert metric_steps(tmp_path / "run") == [2, 4, 6]  # continued after step 4, not started again


def test_extended_lets_a_finished_run_continue_past_its_end(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=2), mnist_slice).run()
    asked = short(tmp_path, max_steps=4, resume=True)
    with pytest.raises(ValueError, match="--max-steps 4 \\(the run has 2\\)"):  # a plain resume keeps the length
        make_trainer(asked, mnist_slice)
    continued = TrainConfig.from_dict(extended_settings(tmp_path / "run", 4, asked.to_dict()))
    assert continued.extended[0]["from_step"] == 2
    assert make_trainer(continued, mnist_slice).run()["steps"] == 4


def test_time_budget_ends_the_run_before_its_max_steps(tmp_path, mnist_slice):
    # A budget spent by the first evaluation: the fit after it allows one more step, and the run ends.
    summary = make_trainer(short(tmp_path, max_steps=50, eval_every=2, time_budget=1e-3), mnist_slice).run()
    assert summary["steps"] == 3 and metric_steps(tmp_path / "run") == [2, 3]


def test_ema_weights_are_what_is_saved(tmp_path, mnist_slice):
    trainer = make_trainer(short(tmp_path, max_steps=3, ema=0.5), mnist_slice)
    trainer.run()
    saved = load_file(tmp_path / "run" / "model.safetensors")
    average, raw = trainer.ema.model.state_dict(), trainer.model.state_dict()
    assert all(torch.equal(saved[k], average[k]) for k in saved)
    assert not any(torch.equal(saved[k], raw[k]) for k in saved if saved[k].dim() == 2)


# ---------------------------------------------------------------- what the run says and writes


def test_progress_draws_a_bar_only_when_asked(tmp_path, mnist_slice, capsys):
    make_trainer(short(tmp_path / "quiet", max_steps=2, progress=False), mnist_slice).run()
    assert "train:" not in capsys.readouterr().err
    make_trainer(short(tmp_path / "bar", max_steps=2, progress=True), mnist_slice).run()
    assert "train: 100%" in capsys.readouterr().err  # tqdm's bar, named "train"


def test_log_tensorboard_writes_event_files_beside_metrics_jsonl(tmp_path, mnist_slice):
    make_trainer(short(tmp_path, max_steps=2, log="tensorboard"), mnist_slice).run()
    run = tmp_path / "run"
    assert metric_steps(run) == [2] and list((run / "tensorboard").glob("events.out.tfevents.*"))


def test_derived_settings_are_announced_one_line_each(capsys):
    from anyformer.cli.train import announce_derived
    announce_derived(TrainConfig(derived={"batch_size": "64: a quarter of the data", "task": "classify: images"}))
    assert capsys.readouterr().out.splitlines() == ["derived: batch_size = 64: a quarter of the data",
                                                    "derived: task = classify: images"]


# ---------------------------------------------------------------- where and how it runs


def test_threads_sets_torchs_thread_count(tmp_path, mnist_slice):
    before = torch.get_num_threads()
    cfg = short(tmp_path, threads=before + 1)
    try:  # not make_trainer: it sets the threads itself
        Trainer(cfg, task=ImageClassification(cfg, torch.device("cpu"), *mnist_slice))
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


def test_deterministic_turns_on_deterministic_kernels_only_when_asked(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what the option sets; restored after the test
    assert not torch.are_deterministic_algorithms_enabled()
    try:
        make_trainer(short(tmp_path / "free"), mnist_slice)
        assert not torch.are_deterministic_algorithms_enabled()
        make_trainer(short(tmp_path / "fixed", deterministic=True), mnist_slice)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_device_is_the_one_asked_for(tmp_path, mnist_slice, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device cuda was asked for, but no CUDA device is available"):
        make_trainer(short(tmp_path, device="cuda"), mnist_slice)
    # Where CUDA is there, `auto` would take it: `cpu` must not.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert make_trainer(short(tmp_path, device="cpu"), mnist_slice).device == torch.device("cpu")


def test_fsdp_shards_the_weights_under_torchrun(tmp_path, mnist_slice, monkeypatch):
    """One process as torchrun starts it (a gloo group of one): FSDP2 holds the weights as sharded
    DTensors, where without --fsdp DDP would hold plain tensors. (No DDP here: its reducer, freed at
    the interpreter's exit, can abort the process with gloo's threads still running.)"""
    from torch.distributed.tensor import DTensor
    torchrun_env(monkeypatch)
    trainer = make_trainer(short(tmp_path, fsdp=True), mnist_slice)
    try:
        assert trainer.dist.enabled and trainer.dist.fsdp
        assert all(isinstance(p, DTensor) for p in trainer.model.parameters())
    finally:
        trainer.dist.close()
