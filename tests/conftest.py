import os
from pathlib import Path

import pytest
import torch

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
