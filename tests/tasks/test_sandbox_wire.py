"""tasks.sandbox.wire: plain data round-trips by value, other values become opaque markers that equal nothing,
and decode turns every malformed or hostile frame into a WireError, building nothing but plain types."""

from __future__ import annotations

import collections
import decimal
import fractions
import functools
import math
import os
import random
import struct
import types
import typing

import pytest

from tasks.sandbox import wire
from tasks.sandbox.wire import MAX_DEPTH, MAX_FRAME, MAX_ITEMS, Opaque, WireError

L = struct.Struct(">I").pack
LIST_ITERATOR = type(iter([]))
PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
ALLOWED = (*PLAIN, collections.deque, range, LIST_ITERATOR, fractions.Fraction, decimal.Decimal, Opaque)


def roundtrip(value):
    return wire.decode(wire.encode(value))


def nested(depth: int):
    return functools.reduce(lambda value, _: [value], range(depth), None)


VALUES = [None, True, False, 0, 1, -1, 2**64, -(2**1000), 255, -256, 0.0, 1.5, -2.25e-308, 1e308, math.inf, -math.inf]
VALUES += [1 + 2j, complex(math.inf, -0.0), "", "héllo ∑ 😀", "\ud800 lone \udfff", "\x00", b"", b"\x00\xff"]
VALUES += [bytearray(b"ab"), [], [1, [2, [3, "x"]]], (), (1, (2.5, None)), {}, set(), frozenset()]
VALUES += [{"a": 1, (1, (2, "b")): [3], frozenset({1, 2}): None}, {b"k": 1, 2.5: 2, 1j: 3, None: 4, range(3): 5}]
VALUES += [{1, "a", (1, 2), frozenset({3})}, frozenset({frozenset({1}), (2, 3)}), collections.deque([1, [2]])]
VALUES += [range(0, 10, 3), range(-5), range(2**70), fractions.Fraction(1, 3), fractions.Fraction(-(2**80), 7)]
VALUES += [decimal.Decimal("1.10"), decimal.Decimal("-Inf"), nested(MAX_DEPTH), [[1] * 1000] * 10]


@pytest.mark.parametrize("value", VALUES, ids=[f"{type(v).__name__}-{i}" for i, v in enumerate(VALUES)])
def test_plain_values_round_trip(value):
    out = roundtrip(value)
    assert type(out) is type(value) and out == value
    assert type(out) is not dict or list(out.items()) == list(value.items())  # in the same order


def test_floats_keep_their_sign_and_nan():
    assert math.copysign(1.0, roundtrip(-0.0)) == -1.0 and math.copysign(1.0, roundtrip(complex(1, -0.0)).imag) == -1.0
    assert math.isnan(roundtrip(math.nan)) and math.isnan(roundtrip([math.nan])[0])
    assert roundtrip(decimal.Decimal("NaN")).is_nan() and roundtrip(decimal.Decimal("-0")).is_signed()


def test_iterators_become_one_pass_list_iterators():
    items = [1, [2]]
    for it in (iter(items), (x for x in items), map(lambda x: x, items), iter(tuple(items)), filter(None, [*items, 0])):
        out = roundtrip(it)
        assert type(out) is LIST_ITERATOR and list(out) == [1, [2]] and list(out) == []
    assert list(roundtrip(zip([1], "a"))) == [(1, "a")] and list(roundtrip(iter([]))) == []


class Typed(typing.NamedTuple):
    a: int


def test_subclasses_and_mappings_send_their_plain_base_value():
    S, I = type("S", (str,), {}), type("I", (int,), {"__eq__": int.__ne__})  # the int subclass lies
    c = collections
    cases = [(c.namedtuple("P", "x y")(1, 2), (1, 2)), (Typed(3), (3,)), (S("ab"), "ab"), (I(7), 7)]
    cases += [(c.UserList([1]), [1]), (c.UserDict(a=1), {"a": 1}), (c.UserString("u"), "u")]
    cases += [(c.ChainMap({"a": 1}, {"a": 2, "b": 3}), {"a": 1, "b": 3})]
    cases += [(c.Counter("ab"), {"a": 1, "b": 1}), (c.OrderedDict(b=1, a=2), {"b": 1, "a": 2})]
    cases += [(c.defaultdict(list, k=[1]), {"k": [1]}), (types.MappingProxyType({"m": (1,)}), {"m": (1,)})]
    for value, plain in cases:
        out = roundtrip(value)
        assert type(out) is type(plain) and out == plain and repr(out) == repr(plain), (value, out)


def test_other_values_are_opaque_with_their_truth_and_equal_nothing(monkeypatch):
    monkeypatch.setattr(wire, "HANDLES", {})

    Liar, Falsy = type("Liar", (), {"__eq__": lambda s, o: True}), type("Falsy", (), {"__bool__": lambda s: False})
    for value, truth in ((Liar(), True), (Falsy(), False), (object(), True), (lambda: 1, True), (print, True)):
        out = roundtrip(value)
        assert type(out) is Opaque and bool(out) is truth and type(value).__qualname__ in repr(out)
        other = roundtrip(value)  # a marker equals no other marker, not even one of the same object
        assert out != other and not (out == other) and out == out
        assert all(not (out == x) and out != x for x in (True, False, None, 0, "", [], out.type_name, repr(out)))
        assert not hasattr(out, "__dict__") and wire.HANDLES[out.handle] is value


def test_handles_cross_back_only_into_the_programs_process(monkeypatch):
    value = object()
    monkeypatch.setattr(wire, "HANDLES", {})
    marker = roundtrip(value)
    with pytest.raises(WireError, match="unknown handle"):  # the grader's side accepts no handle
        roundtrip([marker])
    monkeypatch.setattr(wire, "ACCEPT_HANDLES", True)
    assert roundtrip([marker])[0] is value
    with pytest.raises(WireError, match="unknown handle"):
        wire.decode(b"h" + struct.pack(">Q", id(value) + 8))


def test_encode_refuses_what_it_cannot_send():
    loop = []
    loop.append(loop)
    for value in (loop, nested(MAX_DEPTH + 2), iter(range(wire.ITERATOR_LIMIT + 2)), b"x" * (MAX_FRAME + 1)):
        with pytest.raises(WireError):
            wire.encode(value)


I1, F0 = b"i" + L(1) + b"\x01", b"f" + bytes(8)
OK = b"l" + L(2) + b"s" + L(2) + b"ok"
MALFORMED = {"empty": b"", "truncated-length": b"s\x00\x00", "length-past-frame": b"s" + L(10) + b"abc"}
MALFORMED |= {"items-past-frame": b"l" + L(2**32 - 1) + b"N", "missing-item": OK + b"l" + L(2) + b"N"}
MALFORMED |= {"trailing-bytes": b"NN", "trailing-after-list": OK + b"T\x00", "unknown-tag": b"X", "nul-tag": b"\x00"}
MALFORMED |= {"truncated-float": b"f" + bytes(7), "truncated-complex": b"c" + bytes(15)}
MALFORMED |= {"too-deep": b"l\x00\x00\x00\x01" * (MAX_DEPTH + 1) + b"N"}
MALFORMED |= {"too-many-items": b"l" + L(MAX_ITEMS) + b"N" * MAX_ITEMS, "odd-dict": b"d" + L(1) + b"N"}
MALFORMED |= {"list-as-dict-key": b"d" + L(2) + b"l" + L(0) + b"N", "dict-as-key": b"d" + L(2) + b"d" + L(0) + b"N"}
MALFORMED |= {"bytearray-as-key": b"d" + L(2) + b"B" + L(0) + b"N", "set-in-set": b"Z" + L(1) + b"S" + L(0)}
MALFORMED |= {"list-in-tuple-set-item": b"S" + L(1) + b"t" + L(1) + b"l" + L(0)}
MALFORMED |= {"opaque-as-key": b"Z" + L(1) + b"o" + L(10) + b"1" + bytes(8) + b"x"}
MALFORMED |= {"fraction-as-key": b"Z" + L(1) + b"Q" + L(2) + I1 * 2, "range-of-two": b"r" + L(2) + I1 * 2}
MALFORMED |= {"range-of-None": b"r" + L(3) + b"NNN", "range-of-bools": b"r" + L(3) + b"TTT"}
MALFORMED |= {"range-step-zero": b"r" + L(3) + (b"i" + L(1) + b"\x00") * 3}
MALFORMED |= {"fraction-over-zero": b"Q" + L(2) + I1 + b"i" + L(1) + b"\0", "fraction-of-floats": b"Q" + L(2) + F0 * 2}
MALFORMED |= {"bad-decimal": b"D" + L(3) + b"abc", "decimal-exponent": b"D" + L(23) + b"1e999999999999999999999"}
MALFORMED |= {"invalid-utf8": b"s" + L(2) + b"\xff\xfe", "truncated-utf8": b"s" + L(1) + "é".encode()[:1]}
MALFORMED |= {"opaque-without-truth": b"o" + L(9) + b"x" + bytes(8), "short-opaque": b"o" + L(5) + b"1abcd"}
MALFORMED |= {"handle": b"h" + bytes(8), "short-handle": b"h" + bytes(3)}
REJECTED = MALFORMED | {"bytearray": bytearray(b"N"), "memoryview": memoryview(b"N"), "str": "N", "None": None}


@pytest.mark.parametrize("data", REJECTED.values(), ids=REJECTED)
def test_decode_rejects_malformed_frames(data):
    with pytest.raises(WireError):
        wire.decode(data)


def test_frames_over_a_pipe():
    r, w = os.pipe()
    with open(r, "rb", buffering=0), open(w, "wb", buffering=0) as writer:
        wire.send(w, ["ok", {"a": [1, 2.5]}])
        writer.write(L(MAX_FRAME + 1))
        assert wire.receive(r) == ["ok", {"a": [1, 2.5]}]
        with pytest.raises(WireError, match="frame of"):
            wire.receive(r)
        writer.write(L(5) + b"N")
        writer.close()
        with pytest.raises(EOFError):
            wire.receive(r)


def walk(value) -> None:
    """Every object reachable in a decoded value is of an allowed type (iterators are consumed)."""
    stack = [value]
    while stack:
        v = stack.pop()
        assert type(v) in ALLOWED, type(v)
        if type(v) is dict:
            stack.extend([*v.keys(), *v.values()])
        elif type(v) in (list, tuple, set, frozenset, collections.deque, LIST_ITERATOR):
            stack.extend(list(v))


def test_fuzzed_frames_decode_to_plain_data_or_a_wire_error():
    rng = random.Random(20261123)
    seeds = [data for data in [*map(wire.encode, VALUES), *MALFORMED.values()] if len(data) < 4096]
    tags = b"NTFifcsbBltqSZdIrQDoh"
    decoded = 0
    for _ in range(2000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 2)):
            at, how = rng.randint(0, len(data)), rng.randrange(5)
            if how == 0:  # a tag with a length, plausible or not
                data[at:at] = bytes([rng.choice(tags)]) + L(rng.choice([0, 1, 2, 3, 9, 2**31, 2**32 - 1]))
            elif how == 1 and data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
            elif how == 2:
                del data[at:]
            elif how == 3:
                data[at:at] = rng.choice(seeds)
            else:  # random bytes after a valid prefix
                data[at:] = rng.randbytes(rng.randrange(16))
        try:
            value = wire.decode(bytes(data))
        except WireError:
            continue
        walk(value)
        decoded += 1
    assert 30 < decoded < 1970  # both outcomes were exercised
