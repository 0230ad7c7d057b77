import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# Every hypothesis test draws the same examples on every run (derandomised) and keeps no example
# database, so CI is repeatable and writes nothing; no deadline, since a shared 2-core machine
# makes timings jitter. Tests may still set their own max_examples: their settings inherit these.
settings.register_profile("anyformer", derandomize=True, database=None, deadline=None)
settings.load_profile("anyformer")

# The suite checks what the code computes, not which kernel this machine finds fastest: every kernel
# choice of the speed plan takes its stock path (F.linear, SDPA, fp32, foreach AdamW), so results
# are the same on every processor and nothing is timed. tests/plan test the plan itself (it clears
# this), tests/nn/test_linear_dropout.py forces the oneDNN path. Caches (decoded datasets, plans)
# go to a folder of this session, never the user's ~/.cache/anyformer. Set here, at import, so that
# subprocesses started by tests (the CLI, torchrun) inherit both.
os.environ.setdefault("ANYFORMER_PLAN", "stock")
_SESSION_CACHE = None  # the folder this process made, removed when the session ends
if "ANYFORMER_CACHE" not in os.environ:
    _SESSION_CACHE = os.environ["ANYFORMER_CACHE"] = tempfile.mkdtemp(prefix="anyformer-test-cache-")
# The native kernels (9.6 s of g++ on a 2-core Zen 3) are built once for the session, not again in
# each test's private plan cache: every worker and subprocess reads this one folder.
os.environ.setdefault("ANYFORMER_NATIVE_DIR", os.path.join(os.environ["ANYFORMER_CACHE"], "native"))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ANYFORMER_SHARED_DATA", REPO.parent / "shared" / "data"))


# The device the `gpu` tests run on: CUDA, or the CPU for a dry run of the GPU suite
# (`ANYFORMER_TEST_DEVICE=cpu pytest -m gpu tests/gpu`), which checks the tests themselves without a GPU.
TEST_DEVICE = os.environ.get("ANYFORMER_TEST_DEVICE", "cuda")


def pytest_unconfigure(config):
    """The session's cache (decoded datasets, the native build: some 300 MB) goes with the session.
    Removed by the process that made it: pytest-xdist's workers inherit the variable, so it is the
    controller, after every worker has stopped."""
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """`gpu` tests skip, saying why, where there is no CUDA device and no CPU dry run was asked for."""
    if TEST_DEVICE != "cuda" or torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `pytest -m gpu` on a GPU machine: benchmarks/gpu/run.sh)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# One CPU thread in the test process: its tensors are tiny, and a second thread only adds wake-ups,
# which cost tens of ms each when another process holds the cores (pytest-xdist's other worker, a
# neighbour on a shared host): a thousand-token generation took 3.5 s alone and 90 s beside a busy
# process. Runs started by tests (the CLI, torchrun) choose their own threads.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a trainer or a command run in-process may have set its own
    yield


@pytest.fixture
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"reference data not found at {SHARED_DATA} (set ANYFORMER_SHARED_DATA)"
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: a second thread only adds wake-ups (tens of ms each on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def skip_unless_runnable(*forced: str) -> None:
    """Skip the calling test where this machine cannot run a private kernel it forces (e.g.
    "linear=onednn", "attention=native"): no oneDNN linear in the torch build, or no native kernels."""
    from anyformer import plan
    from anyformer.plan import native
    if any("onednn" in f or "mixed" in f for f in forced) and plan.onednn_linear_op() is None:
        pytest.skip(f"{', '.join(forced)}: no oneDNN linear in this torch build")
    why = native.why_unavailable() or native._unbuildable()
    if any("native" in f for f in forced) and why:
        pytest.skip(f"{', '.join(forced)}: no native kernels here ({why})")


def hooked(model, layers=True, *args, on_layer=None, **kwargs):
    """(the model's output, the weights of the layers asked) from one plain call of `model(*args,
    **kwargs)` under the attention hook (`nn.attention_weights`), the one way weights leave a model."""
    from anyformer.nn import attention_weights
    with attention_weights(model, layers, on_layer) as weights:
        out = model(*args, **kwargs)
    return out, weights
