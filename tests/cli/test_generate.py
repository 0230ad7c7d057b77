"""`anyformer train` on text and `anyformer generate` on the run it writes, as a user runs them."""
import json
import sys

import pytest
import torch

import anyformer as af
from anyformer import cli
from anyformer.data.text.tokenizers import tokenizer_from_info
from anyformer.models import read_config
from tests.cli_runner import run
from tests.conftest import SHARED_DATA


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny character model trained by the CLI's Shakespeare recipe on a real 100 kB slice."""
    tmp = tmp_path_factory.mktemp("lm")
    text = (SHARED_DATA / "tinyshakespeare" / "input.txt").read_text()[:100_000]
    (tmp / "slice.txt").write_text(text)
    out = run("train", "shakespeare-cpu", "--data", str(tmp / "slice.txt"), "--out", str(tmp / "run"),
              "--max-steps", "40", "--eval-every", "20", "--batch-size", "8", "--lr", "3e-3", "--warmup-steps", "5",
              "--amp", "none", "--threads", "1", "--no-progress", "--no-plots",
              "--set", "width=64", "--set", "depth=2", "--set", "heads=4",
              env_extra={"ANYFORMER_CACHE": str(tmp / "cache")})
    assert out.returncode == 0, out.stderr
    assert "validation loss" in out.stdout
    return tmp / "run", text


@pytest.mark.slow
def test_train_writes_a_language_model_run(lm_run):
    run_dir, text = lm_run
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [20, 40] and summary["val_loss"] == lines[-1]["eval_loss"]
    assert summary["val_loss"] < 3.6  # ln(vocab) ~ 4.1 untrained
    info = read_config(run_dir)["data"]
    assert info["kind"] == "text" and info["tokenizer"] == "char"
    assert info["chars"] == "".join(sorted(set(text)))
    assert info["train_tokens"] == 90_000 and info["val_tokens"] == 10_000


@pytest.mark.slow
def test_generate_streams_the_continuation_of_the_prompt(lm_run):
    run_dir, text = lm_run
    out = run("generate", str(run_dir), "--prompt", "ROMEO:", "--max-new-tokens", "60", "--temperature", "0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ROMEO:") and out.stdout.endswith("\n")
    generated = out.stdout[len("ROMEO:"):-1]
    assert len(generated) == 60 and set(generated) <= set(text)
    # the same tokens as GPT.generate (greedy)
    model, tok = af.load(run_dir), tokenizer_from_info(read_config(run_dir)["data"])
    ids = model.generate(torch.tensor([tok.encode("ROMEO:")]), 60, temperature=0)
    assert tok.decode(ids[0, 6:].tolist()) == generated


@pytest.mark.slow
def test_sampling_with_a_seed_repeats(lm_run, capsys):
    run_dir, _ = lm_run
    outs = []
    for _ in range(2):
        assert cli.main(["generate", str(run_dir), "--prompt", "ROMEO:", "--max-new-tokens", "30", "--seed", "1",
                         "--top-k", "5", "--top-p", "0.9"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and len(outs[0]) == len("ROMEO:") + 30 + 1


@pytest.mark.slow
def test_generate_writes_each_token_before_computing_the_next(lm_run, monkeypatch):
    run_dir, _ = lm_run
    events = []

    class Terminal:
        def write(self, s):
            events.append(("write", s))

        def flush(self):
            events.append(("flush", None))
    # Every token comes from the one forward: the first over the prompt, later ones over one position.
    real_forward = af.GPT.forward

    def computing(self, idx, *a, **kw):
        events.append(("forward", idx.shape[1]))
        return real_forward(self, idx, *a, **kw)
    monkeypatch.setattr(af.GPT, "forward", computing)
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert cli.main(["generate", str(run_dir), "--prompt", "KING", "--max-new-tokens", "5", "--seed", "0"]) == 0
    # Before the prompt is written, the plan prepares the model on one example of its kind (a prompt
    # scored whole, its pass with the cache and a one-token step: plan.prepare's "default"); the
    # request's own computations come after.
    first = [k for k, _ in events].index("write")
    assert [k for k, _ in events[:first]] == ["forward"] * 3
    events = events[first:]
    kinds = [k for k, _ in events]
    # prompt, then five times: one computation (cached: one position each), the token written and flushed
    assert kinds == ["write"] + ["forward", "write", "flush"] * 5 + ["write"]
    assert [n for k, n in events if k == "forward"] == [len("KING"), 1, 1, 1, 1]
    assert events[0][1] == "KING" and events[-1][1] == "\n"


@pytest.mark.slow
def test_generate_errors_are_one_line(lm_run, capsys):
    run_dir, _ = lm_run
    out = run("generate", str(run_dir), "--prompt", "caf\u00e9", "--max-new-tokens", "5")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "anyformer: error: character 'é' (U+00E9) at position 3 is not in the tokenizer's alphabet of "
        f"{len(read_config(run_dir)['data']['chars'])} characters (the characters of the training text)"]
    assert cli.main(["generate", str(run_dir), "--prompt", "A" * 100, "--max-new-tokens", "-1"]) == 2
    assert "anyformer: error: max_new_tokens and temperature must be >= 0, got -1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_thousand_tokens_from_a_context_of_128(lm_run, capsys):
    """The run's context is 128 tokens; generation goes on past it, on the most recent ones."""
    run_dir, _ = lm_run
    assert read_config(run_dir)["config"]["context"] == 128
    assert cli.main(["generate", str(run_dir), "--prompt", "ROMEO:", "--max-new-tokens", "1000", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ROMEO:") and len(out) == len("ROMEO:") + 1000 + 1  # one character a token, and "\n"
