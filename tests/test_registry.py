import pytest

from bench.core import Method
from bench.errors import CreditBenchError
from bench.registry import METHODS, Registry


def test_duplicate_names_are_rejected():
    reg = Registry("widget", "methods", "creditbench.none")

    @reg.register("a")
    class A(Method):
        pass

    with pytest.raises(CreditBenchError, match="registered twice"):

        @reg.register("a")
        class B(Method):
            pass


def test_unknown_method_suggests_close_matches_and_lists_all():
    with pytest.raises(CreditBenchError) as e:
        METHODS.get("grpoo")
    msg = str(e.value)
    assert "Did you mean 'grpo'" in msg
    assert msg.endswith("Valid methods: " + ", ".join(METHODS.names()) + ".")
