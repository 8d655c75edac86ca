"""What crosses the sandbox as it would in one process, and what costs the grader no more than it should:
typed values become the grader's own objects (never the program's methods), a call's changes to its
arguments and a result that is an argument reach the tests, a program cannot make the grader import a
module of its choosing or flood a dict's hash table, and tests that ask for more identity than the sandbox
keeps are refused when the task loads."""

from __future__ import annotations

import array
import collections
import importlib
import json
import sys
import time
import types
import typing

import pytest
from sandbox_support import run_program

from bench.errors import CreditBenchError
from bench.registry import TASKS
from tasks.sandbox import child, wire
from tasks.sandbox.testcheck import check_test
from tasks.sandbox.wire import WireError

pytestmark = pytest.mark.usefixtures("machine_left_as_it_was")
L = wire._LEN.pack
FLOOD = 200_000  # keys that share one hash value: k * (2**61 - 1) hashes to 0 for every k


@pytest.fixture(scope="module")
def sides():
    """The program's and the grader's scripts, imported here with this process's wire."""
    saved = {name: sys.modules.get(name) for name in ("sandbox_wire", "sandbox_child")}
    sys.modules["sandbox_wire"], sys.modules["sandbox_child"] = wire, child
    try:
        yield importlib.import_module("tasks.sandbox.program"), importlib.import_module("tasks.sandbox.grader")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@pytest.fixture
def cross(sides, monkeypatch):
    """Encode as the program's side does, decode as the grader's side does."""
    program, grader = sides
    monkeypatch.setattr(grader, "MADE", {})
    monkeypatch.setattr(wire, "HASHABLE", set())

    def crossed(value):
        monkeypatch.setattr(wire, "TYPED", program.describe)
        data = wire.encode(value)
        monkeypatch.setattr(wire, "TYPED", None)
        monkeypatch.setattr(wire, "BUILD", grader.build)
        return wire.decode(data)

    return crossed


class MyList(list):
    __eq__ = lambda self, other: True  # noqa: E731 - the lie must not cross


class Point(typing.NamedTuple):
    x: int
    y: int = 0


def test_standard_library_values_become_the_graders_own(cross):
    c = collections
    same = [c.Counter(a=1, b=0), c.OrderedDict(b=1, a=2), c.UserList([1]), c.UserDict(a=1), c.UserString("u")]
    same += [c.ChainMap({"a": 1}, {"b": 2}), array.array("i", [1, -2]), c.deque([1]), types.MappingProxyType({1: 2})]
    for value in same:
        out = cross(value)
        assert type(out) is type(value) and out == value and repr(out) == repr(value), (value, out)
    assert list(cross(c.OrderedDict(b=1, a=2))) == ["b", "a"] and cross(c.Counter(a=1, b=0)) == c.Counter(a=1)
    d = {1: "a", 2: "b"}
    keys, values, items = cross(d.keys()), cross(d.values()), cross(d.items())
    assert type(keys) is type(d.keys()) and keys == {1, 2} and items == {(1, "a"), (2, "b")}
    assert type(values) is type(d.values()) and list(values) == ["a", "b"]
    view = cross(memoryview(b"ab"))
    assert type(view) is memoryview and view == b"ab" and view.format == "B"
    ints = cross(memoryview(array.array("i", [1, 2])))
    assert ints.format == "i" and ints.tolist() == [1, 2]


def test_a_defaultdict_keeps_only_a_builtin_factory(cross):
    kept = cross(collections.defaultdict(list, a=[1]))
    assert type(kept) is collections.defaultdict and kept.default_factory is list and kept["new"] == []
    dropped = cross(collections.defaultdict(lambda: 7, a=1))
    assert dropped.default_factory is None and dropped == {"a": 1}


def test_subclasses_cross_by_name_without_their_methods(cross):
    class Tally(collections.Counter):
        pass

    out = cross(MyList([0]))
    assert isinstance(out, list) and type(out) is not list and type(out) is not MyList
    assert type(out).__name__ == "MyList" and type(out).__qualname__ == "MyList" and out != [1] and out == [0]
    assert type(out).__eq__ is list.__eq__ and cross(MyList([5])).__class__ is type(out)  # one class per name
    for base, value in ((str, "ab"), (int, 7), (tuple, (1,)), (dict, {"k": 1}), (set, {1}), (bytes, b"x")):
        made = cross(type("Mine", (base,), {"__eq__": lambda s, o: True})(value))
        assert isinstance(made, base) and type(made).__name__ == "Mine" and made == value and made != "other"
    tally = cross(Tally(a=2))
    assert isinstance(tally, collections.Counter) and type(tally).__qualname__.endswith("<locals>.Tally")
    assert tally == collections.Counter(a=2) and tally.most_common() == [("a", 2)]
    point = cross(Point(1, 2))
    assert point == (1, 2) and point.x == 1 and type(point).__name__ == "Point" and point._fields == ("x", "y")
    assert cross({Point(1, 2): "key"}) == {(1, 2): "key"}  # a namedtuple hashes as its tuple


def test_classes_made_per_job_are_capped(cross, sides):
    for i in range(sides[1].MAX_CLASSES):
        cross(type(f"C{i}", (list,), {})())
    with pytest.raises(WireError, match="classes"):
        cross(type("OneTooMany", (list,), {})())


def typed(*parts) -> bytes:
    return wire.encode(list(parts)).replace(b"l", b"y", 1)


MALFORMED = {
    "bad-class-name": typed("sub", "not a name", "x", [1]),
    "bad-qualname": typed("sub", "A", "A.b-c", [1]),
    "sub-of-range": typed("sub", "A", "A", range(2)),
    "sub-of-None": typed("sub", "A", "A", None),
    "array-typecode": typed("array", "x", b""),
    "array-length": typed("array", "i", b"abc"),
    "memoryview-shape": typed("memoryview", "B", b"abc", (5,)),
    "memoryview-format": typed("memoryview", "Q?", b"abcdefgh", (1,)),
    "namedtuple-fields": typed("namedtuple", "P", "P", ("_a",), (1,)),
    "namedtuple-length": typed("namedtuple", "P", "P", ("a",), (1, 2)),
    "Counter-of-list": typed("Counter", [1]),
    "ChainMap-of-ints": typed("ChainMap", [1]),
    "unknown-kind": typed("os.system", "true"),
    "no-kind": typed(),
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED)
def test_malformed_typed_values_are_wire_errors(sides, monkeypatch, data):
    monkeypatch.setattr(sides[1], "MADE", {})
    with pytest.raises(WireError):  # without BUILD (the program's side), any typed value
        wire.decode(data)
    monkeypatch.setattr(wire, "BUILD", sides[1].build)
    with pytest.raises(WireError):
        wire.decode(data)


def int_frame(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)
    return b"i" + L(len(raw)) + raw


def test_hash_flooded_keys_are_refused_fast_and_real_ones_decode():
    keys = [int_frame(k * (2**61 - 1)) for k in range(1, FLOOD + 1)]
    as_dict = b"d" + L(2 * FLOOD) + b"N".join(keys) + b"N"
    for frame in (as_dict, b"S" + L(FLOOD) + b"".join(keys), b"Z" + L(1) + b"Z" + L(40) + b"".join(keys[:40])):
        start = time.perf_counter()
        with pytest.raises(WireError, match="share one hash value"):
            wire.decode(frame)
        assert time.perf_counter() - start < 3.0  # building the table would take minutes
    legit = {i: str(i) for i in range(FLOOD)}
    assert wire.decode(wire.encode(legit)) == legit
    few = {-1: 0, -2: 0, **{k * (2**61 - 1): 0 for k in range(1, wire.MAX_COLLISIONS - 1)}}  # hash(-1) == hash(-2)
    assert wire.decode(wire.encode(few)) == few
    with pytest.raises(WireError, match="share one hash value"):  # duplicates, which no real dict sends
        wire.decode(b"Z" + L(wire.MAX_COLLISIONS + 1) + int_frame(1) * (wire.MAX_COLLISIONS + 1))


# through the sandbox: what the tests observe, a flood and a module binding end to end

FLOOD_PROGRAM = f"""
import os, time
L = lambda n: n.to_bytes(4, "big")
def i(n):
    raw = n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)
    return b"i" + L(len(raw)) + raw
def f():  # an ok reply holding a dict of {FLOOD} keys hashing alike, sent without building it
    body = b"d" + L({2 * FLOOD}) + b"".join(i(k * (2**61 - 1)) + b"N" for k in range(1, {FLOOD + 1}))
    reply = b"l" + L(4) + b"s" + L(2) + b"ok" + body + b"N" + b"l" + L(0)
    data = L(len(reply)) + reply
    while data:
        data = data[os.write(3, data):]
    time.sleep(30)
"""


def test_a_hash_flooded_reply_fails_fast(sb):
    start = time.monotonic()
    res = run_program(sb, FLOOD_PROGRAM, "assert len(f()) == 3")
    assert res.status == "failed" and "hash value" in res.detail, res
    assert time.monotonic() - start < 4.5  # under the grader's CPU limit, which a built table would exhaust


BINDINGS = {  # the program binds a name the test uses to a module the test never names
    "venv.__main__": ("import types\ncheck = types.ModuleType('venv.__main__')", "check(f)"),
    "test.autotest": ("import types\ncheck = types.ModuleType('test.autotest')", "test = 1\ncheck(f)"),
    "math-alias": ("import math as m", "assert m.isclose(f(), 1)"),
    "asyncio.__main__": ("import types\nmath = types.ModuleType('asyncio.__main__')", "math.isclose(f(), 1)"),
}


@pytest.mark.parametrize("name", BINDINGS)
def test_the_grader_imports_no_module_the_test_does_not_name(sb, name):
    setup, test = BINDINGS[name]
    start = time.monotonic()
    res = run_program(sb, f"{setup}\ndef f():\n    return 1", test)
    assert res.status == "failed" and res.detail.startswith("NameError"), res
    assert time.monotonic() - start < 3  # no pip run, no test suite: an unbound name
    assert run_program(sb, "import math\ndef f():\n    return 1", "assert math.isclose(f(), 1)").passed


RAISES = "def f(x):\n    raise {}('neg')"


def catches(name: str, check: str = "str(e) == 'neg'") -> str:
    """Test code: ``f(-1)`` raises an exception that ``except name`` catches, and ``check`` holds for it."""
    return f"try:\n    f(-1)\nexcept {name} as e:\n    assert {check}\nelse:\n    raise AssertionError"


OBSERVED = {  # id: (program, test, passes as in one process)
    "builtin-exception": (RAISES.format("ValueError"), catches("ValueError"), 1),
    "own-exception-with-a-builtin-name": (
        "class ValueError(Exception):\n    pass\n" + RAISES.format("ValueError"),
        catches("ValueError"),
        0,
    ),
    "own-exception-is-an-Exception": (
        "class ValueError(Exception):\n    pass\n" + RAISES.format("ValueError"),
        catches("Exception", "type(e).__name__ == 'ValueError' and not isinstance(e, ValueError)"),
        1,
    ),
    "subclass-of-a-builtin-exception": (
        "class MyErr(ValueError):\n    pass\n" + RAISES.format("MyErr"),
        catches("ValueError", "type(e).__name__ == 'MyErr' and type(e) is not ValueError and str(e) == 'neg'"),
        1,
    ),
    "two-builtin-exception-bases": (
        "class E(KeyError, TypeError):\n    pass\n" + RAISES.format("E"),
        catches("TypeError", "isinstance(e, LookupError)"),
        1,
    ),
    "library-exception": (
        "import json\ndef f(x):\n    return json.loads('{')",
        catches("ValueError", "type(e).__name__ == 'JSONDecodeError'"),
        1,
    ),
    "liar-subclass": (
        "class L(list):\n    __eq__ = lambda *a: True\ndef f():\n    return L([0])",
        "assert f() == [1]",
        0,
    ),
    "liar-C-slot": ("class L(list):\n    __eq__ = list.__ne__\ndef f():\n    return L([0])", "assert f() == [1]", 0),
    "subclass-type": ("class L(list):\n    pass\ndef f():\n    return L([1])", "assert type(f()) is list", 0),
    "subclass-name": ("class L(list):\n    pass\ndef f():\n    return L([1])", "assert type(f()).__name__ == 'L'", 1),
    "UserList-isinstance": (
        "import collections\ndef f():\n    return collections.UserList([1])",
        "assert isinstance(f(), list)",
        0,
    ),
    "Counter-is-dict": (
        "import collections\ndef f():\n    return collections.Counter('ab')",
        "assert type(f()) is dict",
        0,
    ),
    "OrderedDict-order": (
        "import collections\ndef f():\n    return collections.OrderedDict(b=1, a=2)",
        "from collections import OrderedDict\nassert f() == OrderedDict(a=2, b=1)",
        0,
    ),
    "returns-its-argument": ("def f(a):\n    a.sort()\n    return a", "a = [2, 1]\nassert f(a) is not a", 0),
    "returns-a-copy": ("def f(a):\n    return sorted(a)", "a = [2, 1]\nassert f(a) is not a and a == [2, 1]", 1),
    "same-object": (
        "def f(a, b=None):\n    b.append(1)\n    return b",
        "a = []\nassert f(0, b=a) is a and a == [1]",
        1,
    ),
    "changes-its-input": (
        "def f(a):\n    a.sort()\n    return a[0]",
        "a = [2, 1]\nassert f(a) == 1\nassert a == [2, 1]",
        0,
    ),
    "in-place": (
        "def f(a, d):\n    a.sort()\n    d['k'] = 1",
        "a, d = [3, 1, 2], {}\nf(a, d)\nassert a == [1, 2, 3] and d == {'k': 1}",
        1,
    ),
    "not-in-place": ("def f(a):\n    return sorted(a)", "a = [3, 1, 2]\nf(a)\nassert a == [1, 2, 3]", 0),
    "in-place-bytearray-set": (
        "def f(b, s):\n    b[0] = 65\n    s.add(2)",
        "b, s = bytearray(b'ab'), {1}\nf(b, s)\nassert b == b'Ab' and s == {1, 2}",
        1,
    ),
    "dict-views": (
        "def f():\n    d = {1: 'a', 2: 'b'}\n    return d.keys(), d.items(), d.values()",
        "k, i, v = f()\nassert k == {1, 2} and i == {(1, 'a'), (2, 'b')} and sorted(v) == ['a', 'b']",
        1,
    ),
    "array": (
        "import array\ndef f():\n    return array.array('d', [1.5])",
        "import array\nassert f() == array.array('d', [1.5])",
        1,
    ),
    "memoryview": (
        "def f():\n    return memoryview(bytearray(b'ab'))",
        "assert f() == b'ab' and f().tobytes() == b'ab'",
        1,
    ),
    "Counter-zero": (
        "import collections\ndef f():\n    return collections.Counter(a=1, b=0)",
        "from collections import Counter\nassert f() == Counter(a=1)",
        1,
    ),
    "defaultdict": (
        "import collections\ndef f():\n    d = collections.defaultdict(int)\n    d['a'] += 1\n    return d",
        "r = f()\nr['b'] += 2\nassert r == {'a': 1, 'b': 2}",
        1,
    ),
    "namedtuple": (
        "import collections\nP = collections.namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)",
        "r = f()\nassert r.x == 1 and r == (1, 2) and type(r).__name__ == 'P'",
        1,
    ),
}


@pytest.mark.parametrize("case", OBSERVED)
def test_the_tests_observe_what_one_process_would(sb, case):
    program, test, passes = OBSERVED[case]
    res = run_program(sb, program, test)
    assert res.passed is bool(passes), res
    assert passes or res.status == "failed", res


def test_an_exception_crosses_by_the_builtin_classes_it_derives_from(sides, monkeypatch):
    """The program's side names a class's builtin exception bases; from a forged reply the grader makes a
    ProgramError (a name it does not re-create) or fails the call (a class no program could have)."""
    program, grader = sides
    monkeypatch.setattr(grader, "MADE", {})
    assert program._raised(ValueError("neg")) == ["raise", "ValueError", "neg", None]
    assert program._raised(type("ValueError", (Exception,), {})("neg")) == ["raise", "ValueError", "neg", ["Exception"]]
    assert program._raised(type("E", (KeyError, TypeError), {})())[3] == ["KeyError", "TypeError"]
    assert type(grader._exception("ValueError", "neg", None)) is ValueError
    made = grader._exception("ValueError", "neg", ["Exception"])
    assert not isinstance(made, ValueError) and type(made) is type(grader._exception("ValueError", "", ["Exception"]))
    for name, forged in (("E", ["os.system"]), ("E", []), ("E", "ValueError"), (1, None), ("E", ["StopIteration"])):
        assert type(grader._exception(name, "m", forged)) is grader.ProgramError, forged
    for name, forged in (("not a name", ["ValueError"]), ("E", ["OSError", "UnicodeDecodeError"])):
        with pytest.raises(grader.NotData):
            grader._exception(name, "m", forged)


# tests that ask for identity the sandbox does not keep are refused when the task loads

KEPT = ["assert f(a) is a", "assert candidate(x, key=y) is not y", "assert type(f(1)) is list", "assert f(1) is None"]
KEPT += ["assert f(2) is not True", "id = 3\nassert id == 3", "assert type(f(1)) is type(f(2))"]
REFUSED = ["assert f(a) is b", "assert id(f(a)) == id(a)", "import gc", "from sys import getrefcount"]
REFUSED += ["assert f(a)[0] is a", "x = f(a)\nassert x is a", "assert f(a) is f(a)", "import weakref"]
REFUSED += ["import operator\nassert operator.is_(f(a), a)", "assert sys.getrefcount(f(a)) == 2", "def ("]


@pytest.mark.parametrize("test", KEPT + REFUSED)
def test_identity_the_sandbox_cannot_keep_is_refused(test):
    if test in KEPT:
        check_test(test)
        return
    with pytest.raises(CreditBenchError) as info:
        check_test(test, "mbpp/11")
    assert str(info.value).startswith("mbpp/11: ") and "\n" not in str(info.value)


def test_a_task_whose_test_is_refused_fails_to_load(tmp_path):
    (tmp_path / "mbpp").mkdir()
    row = {"task_id": 11, "prompt": "p", "code": "def f(a):\n    return a", "test_imports": []}
    rows = [row | {"test_list": ["assert f(1) == 1"]}, row | {"task_id": 12, "test_list": ["assert f([]) is f([])"]}]
    (tmp_path / "mbpp" / "sanitized-mbpp.json").write_text(json.dumps(rows))
    cls = TASKS.get("mbpp")
    with pytest.raises(CreditBenchError, match=r"mbpp/12: the sandbox cannot grade .*`f\(\[\]\) is f\(\[\]\)`"):
        cls(cls.Config(data_dir=str(tmp_path))).load("eval")
