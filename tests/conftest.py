import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# run checkpoints of the tests (and the processes they start) go to a scratch directory
os.environ.setdefault("CREDITBENCH_CHECKPOINTS", tempfile.mkdtemp(prefix="creditbench-checkpoints-"))

import pytest
import torch

# the cores shared among pytest-xdist's workers (bash tests/run.sh runs two), else up to 2 for this process
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _workers)))


@pytest.fixture
def mlflow_uri(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory):
    """A randomly initialised tiny-500k policy saved with from_pretrained's layout."""
    from bench.models.policy import build_tiny

    d = tmp_path_factory.mktemp("policy")
    model, tok = build_tiny("tiny-500k", seed=0)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory):
    """One cache of warm-started tiny bases for the session: tests that train the same task and size
    share one warm-start."""
    return str(tmp_path_factory.mktemp("warm-cache"))
