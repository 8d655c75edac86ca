"""The vLLM engine fixtures of tests/engine/test_vllm.py and tests/engine/test_vllm_training.py: the
tiny base policy and the engine on it, one per test module, skipped where vLLM is not installed."""

import pytest
from vllm_support import Engines, tiny_policy


@pytest.fixture(scope="module")
def base():
    return tiny_policy()


@pytest.fixture(scope="module")
def engines(base):
    pytest.importorskip("vllm")
    engines = Engines(base)
    yield engines
    engines.close()


@pytest.fixture
def engine(engines):
    """The engine on the tiny base (merge sync); each test syncs the weights it compares against."""
    return engines.open()
