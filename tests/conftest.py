import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# Every hypothesis test draws the same examples on every run (derandomised) and keeps no example
# database, so CI is repeatable and writes nothing; no deadline, since a shared 2-core machine
# makes timings jitter. Tests may still set their own max_examples: their settings inherit these.
settings.register_profile("anyformer", derandomize=True, database=None, deadline=None)
settings.load_profile("anyformer")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ANYFORMER_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
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
