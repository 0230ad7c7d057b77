"""Every TrainConfig option pinned (issue 44): a test that fails when the library ignores the option
(behaves as if its default were given) or inverts it. OPTION_PINS names, for each option, the tests
that failed when it was ignored or inverted by hand (docs/testing.md, "Every training option pinned");
the tests it names that the rest of the suite lacked are in test_every_option_run.py (the run's length,
files, evaluations, checkpoints and lines) and test_every_option_step.py (the model, the data, the
step, where it runs). Each checks the option's effect on something observable: the step's gradient,
the batch the loader gave, the chunks scored, the files a run wrote."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from anyformer.train import TrainConfig

REPO = Path(__file__).resolve().parents[2]


# Each option -> the tests that fail when the library ignores or inverts it (node ids; a parametrised
# test by its function's name). Verified by hand: the option replaced at each place the library reads
# it by its default (ignored) or its opposite (inverted), the tests run, the change reverted.
OPTION_PINS: dict[str, list[str]] = {
    # Bookkeeping: the recipe's name is the default run directory and is recorded in summary.json.
    "recipe": ["tests/train/test_every_option_run.py::test_recipe_names_the_default_run_directory_and_the_summary"],
    "task": ["tests/train/test_tasks.py::test_an_unknown_task_is_named_with_the_known_ones"],
    "model": ["tests/train/test_every_option_step.py::test_the_model_is_the_preset_named_with_its_overrides"],
    "model_overrides": [
        "tests/train/test_every_option_step.py::test_the_model_is_the_preset_named_with_its_overrides"],
    "data": [
        "tests/train/test_user_images.py::test_a_folder_without_a_test_split_holds_out_a_seeded_stratified_share"],
    "out": ["tests/train/test_every_option_run.py::test_out_is_where_the_run_writes"],
    "epochs": ["tests/train/test_every_option_run.py::test_epochs_and_max_steps_set_the_length_of_the_run"],
    "max_steps": ["tests/train/test_every_option_run.py::test_epochs_and_max_steps_set_the_length_of_the_run"],
    "batch_size": ["tests/train/test_preprocess.py::test_the_classification_task_feeds_the_model_through_it",
                   "tests/train/test_lm.py::test_evaluation_uses_the_same_windows_and_shards_add_up"],
    "grad_accum": ["tests/train/test_every_option_step.py::test_grad_accum_splits_the_step_into_that_many_chunks"],
    "lr": ["tests/train/test_trainer.py::test_warmup_then_cosine",
           "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "min_lr_ratio": [
        "tests/train/test_options.py::test_the_cosine_falls_from_the_rate_to_its_floor_and_stays_there"],
    "weight_decay": [
        "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "decay_all": [
        "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "betas": [
        "tests/train/test_options.py::test_the_optimiser_takes_the_settings_and_decays_only_its_decayed_group"],
    "schedule": ["tests/train/test_options.py::test_a_constant_schedule_holds_the_rate_after_the_warm_up"],
    "warmup_steps": ["tests/train/test_options.py::test_the_warm_up_climbs_linearly_to_the_rate"],
    "label_smoothing": ["tests/train/test_every_option_step.py::test_label_smoothing_reaches_the_loss"],
    "grad_clip": ["tests/train/test_every_option_step.py::test_grad_clip_caps_the_gradient_norm_the_step_used"],
    "sam": ["tests/train/test_every_option_step.py::test_sam_steps_from_the_weights_with_the_gradient_taken_again_at_"
            "the_ascent_point"],
    "mixup": ["tests/data/test_mix.py::test_the_image_task_mixes_as_its_config_says"],
    "cutmix": ["tests/data/test_mix.py::test_the_image_task_mixes_as_its_config_says"],
    "random_erasing": [
        "tests/train/test_every_option_step.py::test_random_erasing_erases_the_augmented_batch_with_the_steps_draws"],
    "random_stroke": [
        "tests/train/test_every_option_step.py::test_random_stroke_changes_the_strokes_first_with_the_steps_draws"],
    "random_elastic": [
        "tests/train/test_every_option_step.py::test_random_elastic_bends_the_pictures_after_the_strokes_before_the_warp"],
    "augment": ["tests/train/test_every_option_step.py::test_augment_transforms_the_batch_as_named"],
    "augment_strength": ["tests/train/test_every_option_step.py::test_augment_transforms_the_batch_as_named",
                         "tests/train/test_every_option_step.py::test_an_augment_strength_out_of_range_is_refused"],
    "normalize": ["tests/train/test_preprocess.py::test_the_classification_task_feeds_the_model_through_it",
                  "tests/train/test_series_train.py::"
                  "test_per_series_normalisation_is_chosen_by_the_config_and_saved_with_the_run"],
    "eval_every": ["tests/train/test_every_option_run.py::test_eval_every_sets_the_steps_that_are_scored"],
    "eval_batch_size": [
        "tests/train/test_every_option_step.py::test_eval_batch_size_is_the_size_of_each_scored_chunk"],
    "limit_train": ["tests/train/test_every_option_step.py::test_limits_cut_the_splits_to_their_first_examples",
                    "tests/train/test_user_images.py::test_limits_cut_after_the_hold_out"],
    "limit_eval": ["tests/train/test_every_option_step.py::test_limits_cut_the_splits_to_their_first_examples",
                   "tests/train/test_user_images.py::test_limits_cut_after_the_hold_out"],
    "seq_len": ["tests/train/test_lm.py::test_evaluation_uses_the_same_windows_and_shards_add_up"],
    "eval_iters": ["tests/train/test_lm.py::test_evaluation_uses_the_same_windows_and_shards_add_up"],
    "tokenizer": ["tests/train/test_lm_user_text.py::test_a_learned_tokenizer_is_saved_with_the_run_and_recorded"],
    "image_size": ["tests/train/test_every_option_step.py::test_image_size_resizes_every_image_loaded"],
    "val_fraction": [
        "tests/train/test_user_images.py::test_a_folder_without_a_test_split_holds_out_a_seeded_stratified_share"],
    "label_column": ["tests/train/test_series_user_data.py::test_a_label_column_named_on_the_command_line"],
    "label_fraction": ["tests/train/test_mae.py::test_label_fraction_picks_a_class_balanced_seeded_subset"],
    "text_column": ["tests/train/test_text_columns.py::test_a_run_trained_on_named_columns_predicts_other_files_by_them",
                    "tests/train/test_text_columns.py::test_the_command_line_refuses_a_missing_text_column_in_one_line"],
    "objective": ["tests/train/test_tables_train.py::test_task_overrides_what_the_target_s_cells_suggest"],
    "baseline": ["tests/train/test_tables_train.py::test_the_baseline_is_fitted_on_the_same_split_and_recorded",
                 "tests/train/test_baselines.py::test_images_get_logistic_regression_on_their_pixels",
                 "tests/train/test_baselines.py::test_series_get_minirocket"],
    "select_fraction": ["tests/train/test_tables_keep_best.py::test_by_default_the_last_weights_are_kept",
                        "tests/train/test_tables_keep_best.py::"
                        "test_the_summary_and_the_weights_are_the_best_evaluation_on_the_held_back_rows"],
    "init_from": ["tests/train/test_every_option_step.py::test_init_from_starts_the_trunk_from_the_runs_weights"],
    "device": ["tests/train/test_every_option_step.py::test_device_is_the_one_asked_for"],
    "amp": ["tests/train/test_every_option_step.py::test_amp_bf16_runs_the_step_and_the_evaluation_in_bf16",
            "tests/train/test_steps.py::test_fp16_on_a_cpu_is_refused_before_any_data_is_read"],
    "compile": ["tests/train/test_trainer.py::test_a_forced_compile_trains_compiled_across_an_epoch_end"],
    "plan": ["tests/train/test_plan_replay.py::test_a_plan_file_that_is_not_one_is_refused_in_one_line",
             "tests/train/test_plan_replay.py::test_plan_stock_answers_every_decision_with_pytorchs_default"],
    "seed": ["tests/train/test_every_option_step.py::test_seed_fixes_the_initial_weights_and_the_batch_order"],
    "threads": ["tests/train/test_every_option_step.py::test_threads_sets_torchs_thread_count"],
    "deterministic": [
        "tests/train/test_every_option_step.py::test_deterministic_turns_on_deterministic_kernels_only_when_asked"],
    "checkpoint_every": ["tests/train/test_every_option_run.py::test_checkpoints_every_n_steps_and_only_the_latest_kept",
                         "tests/train/test_trainer.py::test_non_finite_loss_stops_with_the_step_named"],
    "keep_checkpoints": [
        "tests/train/test_every_option_run.py::test_checkpoints_every_n_steps_and_only_the_latest_kept"],
    "resume": ["tests/train/test_every_option_run.py::test_resume_continues_an_interrupted_run"],
    "overwrite": ["tests/train/test_every_option_run.py::test_overwrite_replaces_a_run_that_is_otherwise_refused"],
    "progress": ["tests/train/test_every_option_run.py::test_progress_draws_a_bar_only_when_asked"],
    "plots": ["tests/train/test_trainer.py::test_a_run_without_plots_draws_nothing_and_trains_the_same_bits"],
    "fsdp": ["tests/train/test_every_option_step.py::test_fsdp_shards_the_weights_under_torchrun"],
    "log": ["tests/train/test_every_option_run.py::test_log_tensorboard_writes_event_files_beside_metrics_jsonl"],
    "time_budget": ["tests/train/test_every_option_run.py::test_time_budget_ends_the_run_before_its_max_steps"],
    "ema": ["tests/train/test_every_option_run.py::test_ema_weights_are_what_is_saved"],
    "label_dropout": ["tests/train/test_flow.py::test_batches_are_a_function_of_seed_and_step_and_drop_labels"],
    "judge": ["tests/train/test_flow.py::test_a_judge_is_asked_for_lazily_and_its_scores_are_logged"],
    "judge_samples": ["tests/train/test_flow.py::test_a_judge_is_asked_for_lazily_and_its_scores_are_logged"],
    # Bookkeeping: what `anyformer train --data PATH` derived, said one line each (and kept in config.json).
    "derived": ["tests/train/test_every_option_run.py::test_derived_settings_are_announced_one_line_each"],
    # Bookkeeping: a finished run continued past its end records the added steps; that record is what
    # lets the resume change the run's length, which a plain resume refuses.
    "extended": ["tests/train/test_every_option_run.py::test_extended_lets_a_finished_run_continue_past_its_end"],
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
