"""The only thing that crosses between a sandboxed program and its grader: data, framed.

Both sides of :mod:`tasks.sandbox` load this file (stdlib only; it is also importable as
``tasks.sandbox.wire``). The program's side encodes return values and decodes arguments; the
grader's side encodes arguments and decodes return values. The grader never trusts what it
receives: :func:`decode` builds nothing but ``None``, ``bool``, ``int``, ``float``, ``complex``,
``str``, ``bytes``, ``bytearray``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset`` and,
from plain parts, ``collections.deque``, ``range``, ``fractions.Fraction``, ``decimal.Decimal``
and a list iterator (for a returned generator or iterator, so that the tests see one-pass
iteration as the program gave it), and hands a *typed* value (tag ``y``: a kind's name and its
parts, decoded first as plain data) to :data:`BUILD`, which only the grader sets
(``sandbox_grader.build``: the grader's own Counter, OrderedDict, namedtuple, subclass of list...).
Sizes and depth are capped, every length is checked against the bytes present, and dict keys and
set items must be hashable plain data (hashing plain data runs no program code), at most
:data:`MAX_COLLISIONS` of them sharing one hash value (a hash-flooded table would cost the grader
quadratic time to build). Anything malformed is a :class:`WireError`.

Encoding is by value. The program's side describes values of richer types through :data:`TYPED`
(``sandbox_program.describe``); without it (the grader's side, sending arguments) a namedtuple
becomes its tuple, a subclass of a plain type its plain base value, ``UserList``/``UserDict``/
``UserString``, ``ChainMap`` and other mappings their plain counterparts. A value of any other
type becomes an *opaque* marker carrying the type's name, which compares equal to nothing (see
:class:`Opaque`).

Frames: 4-byte big-endian length, then the encoded value.
"""

from __future__ import annotations

import _collections_abc  # loaded at start-up already; `collections` costs the program's side ~2 ms
import os
import struct
import sys

MAX_FRAME = 32 << 20  # bytes in one frame
MAX_DEPTH = 64  # nesting of containers
MAX_ITEMS = 1 << 20  # values in one frame
MAX_COLLISIONS = 32  # dict keys or set items of one value that may share a hash value
ITERATOR_LIMIT = 100_000  # items taken from a returned iterator before giving up
# the default factories a defaultdict keeps on the wire (builtins, named; any other arrives as None)
FACTORIES = frozenset("int float complex str bytes bytearray bool list tuple set frozenset dict".split())
_LEN = struct.Struct(">I")
_HANDLE = struct.Struct(">Q")
# The program's side keeps each value it sent as opaque, so that the tests can pass it back as an
# argument (e.g. MBPP tests that build inputs with the program's own class). The grader's side
# never accepts a handle: ACCEPT_HANDLES is set only in the program's process.
HANDLES: dict[int, object] = {}
ACCEPT_HANDLES = False
# Typed values: TYPED(value) -> (kind, [part, ...]) or None, set on the program's side; BUILD([kind,
# part, ...]) -> the value, set on the grader's side, which adds the classes it makes whose
# instances hash as plain data (a namedtuple, a subclass of str) to HASHABLE.
TYPED = None
BUILD = None
HASHABLE: set = set()
_PLAIN = frozenset({int, float, complex, str, bytes, bytearray, tuple, list, set, frozenset, dict, range})
_FLOAT = struct.Struct(">d")
_COMPLEX = struct.Struct(">dd")


class WireError(Exception):
    """A frame that is not well-formed plain data."""


class Opaque:
    """Decoded stand-in for a value the wire does not carry (say a ``re.Match``): the program's side
    reports only its type's name and its truth value. It equals nothing but itself, has no
    attributes and supports no operations, so ``assert f(x)`` sees the truth value (which the
    program could as well have returned as a bool) and any comparison fails."""

    __slots__ = ("type_name", "truth", "handle")

    def __init__(self, type_name: str, truth: bool, handle: int = 0):
        self.type_name, self.truth, self.handle = type_name, truth, handle

    def __bool__(self) -> bool:
        return self.truth

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


# -- encoding --------------------------------------------------------------------------------


def encode(value) -> bytes:
    out = bytearray()
    _encode(value, out, 0)
    if len(out) > MAX_FRAME:
        raise WireError(f"value too large to send ({len(out)} bytes; at most {MAX_FRAME})")
    return bytes(out)


def _int_bytes(n: int) -> bytes:
    return n.to_bytes((n.bit_length() + 8) // 8 or 1, "big", signed=True)


def _put(out: bytearray, tag: bytes, payload: bytes) -> None:
    out += tag
    out += _LEN.pack(len(payload))
    out += payload


def _encode(v, out: bytearray, depth: int) -> None:  # noqa: C901, PLR0912 - one branch per kind
    if depth > MAX_DEPTH:
        raise WireError(f"value nested deeper than {MAX_DEPTH}")
    if v is None:
        out += b"N"
    elif type(v) is Opaque:  # the grader passing back what the program returned
        out += b"h" + _HANDLE.pack(v.handle)
    elif v is True:
        out += b"T"
    elif v is False:
        out += b"F"
    elif TYPED is not None and type(v) not in _PLAIN and (typed := TYPED(v)) is not None:
        kind, parts = typed
        _items(out, b"y", iter((kind, *parts)), 1 + len(parts), depth)
    elif isinstance(v, int):
        _put(out, b"i", _int_bytes(int.__index__(v)))
    elif isinstance(v, float):
        out += b"f" + _FLOAT.pack(float.__float__(v))
    elif isinstance(v, complex):
        c = complex.__complex__(v)
        out += b"c" + _COMPLEX.pack(c.real, c.imag)
    elif isinstance(v, str):
        _put(out, b"s", str.__str__(v).encode("utf-8", "surrogatepass"))
    elif isinstance(v, bytes):
        _put(out, b"b", bytes(v))
    elif isinstance(v, bytearray):
        _put(out, b"B", bytes(v))
    elif isinstance(v, tuple):
        _items(out, b"t", tuple.__iter__(v), tuple.__len__(v), depth)
    elif isinstance(v, list):
        _items(out, b"l", list.__iter__(v), list.__len__(v), depth)
    elif _is(v, "collections", "deque"):
        _items(out, b"q", iter(list(v)), len(v), depth)
    elif isinstance(v, (set, frozenset)):
        items = list(set.__iter__(v) if isinstance(v, set) else frozenset.__iter__(v))
        _items(out, b"S" if isinstance(v, set) else b"Z", iter(items), len(items), depth)
    elif isinstance(v, dict):
        pairs = list(dict.items(v))
        _items(out, b"d", (x for kv in pairs for x in kv), 2 * len(pairs), depth)
    elif isinstance(v, range):
        _items(out, b"r", iter((v.start, v.stop, v.step)), 3, depth)
    elif _is(v, "fractions", "Fraction"):
        _items(out, b"Q", iter((int(v.numerator), int(v.denominator))), 2, depth)
    elif _is(v, "decimal", "Decimal"):
        _put(out, b"D", str(v).encode("ascii", "replace"))
    elif _is(v, "collections", "UserList"):
        _encode(list(v.data), out, depth)
    elif _is(v, "collections", "UserString"):
        _encode(str(v.data), out, depth)
    elif isinstance(v, _collections_abc.Mapping):  # UserDict, ChainMap, MappingProxyType, ...
        _encode(dict(v.items()), out, depth)
    elif isinstance(v, _collections_abc.Iterator):  # generators, map, filter, zip, ...
        items = []
        for item in v:
            items.append(item)
            if len(items) > ITERATOR_LIMIT:
                raise WireError(f"returned iterator yields more than {ITERATOR_LIMIT} items")
        _items(out, b"I", iter(items), len(items), depth)
    else:
        truth = b"1" if bool(v) else b"0"
        HANDLES[id(v)] = v
        name = str(type(v).__qualname__).encode("utf-8", "replace")[:200]
        _put(out, b"o", truth + _HANDLE.pack(id(v)) + name)


def _is(v, module: str, name: str) -> bool:
    """isinstance against a stdlib class without importing its module (loaded if v is one)."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(v, getattr(mod, name))


def _items(out: bytearray, tag: bytes, items, n: int, depth: int) -> None:
    out += tag + _LEN.pack(n)
    for item in items:
        _encode(item, out, depth + 1)


# -- decoding (the grader's side: untrusted bytes in, plain data out) -------------------------


def decode(data: bytes):
    """The value in ``data``; :class:`WireError` unless it is exactly one well-formed value."""
    if type(data) is not bytes:
        raise WireError("frame is not bytes")
    reader = _Reader(data)
    value = reader.value(0)
    if reader.pos != len(data):
        raise WireError("trailing bytes after the value")
    return value


class _Reader:
    __slots__ = ("data", "pos", "items")

    def __init__(self, data: bytes):
        self.data, self.pos, self.items = data, 0, 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise WireError("truncated frame")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def length(self) -> int:
        return _LEN.unpack(self.take(4))[0]

    def value(self, depth: int):  # noqa: C901, PLR0911, PLR0912 - one branch per tag
        if depth > MAX_DEPTH:
            raise WireError(f"value nested deeper than {MAX_DEPTH}")
        self.items += 1
        if self.items > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} values in one frame")
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag == b"T":
            return True
        if tag == b"F":
            return False
        if tag == b"i":
            return int.from_bytes(self.take(self.length()), "big", signed=True)
        if tag == b"f":
            return _FLOAT.unpack(self.take(8))[0]
        if tag == b"c":
            return complex(*_COMPLEX.unpack(self.take(16)))
        if tag == b"s":
            try:
                return self.take(self.length()).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise WireError("string is not UTF-8") from None
        if tag == b"b":
            return self.take(self.length())
        if tag == b"B":
            return bytearray(self.take(self.length()))
        if tag == b"o":
            payload = self.take(self.length())
            if payload[:1] not in (b"0", b"1") or len(payload) < 9:
                raise WireError("malformed opaque value")
            name = payload[9:].decode("utf-8", "replace")
            return Opaque(name, payload[:1] == b"1", _HANDLE.unpack(payload[1:9])[0])
        if tag == b"h":
            handle = _HANDLE.unpack(self.take(8))[0]
            if not ACCEPT_HANDLES or handle not in HANDLES:
                raise WireError("unknown handle")
            return HANDLES[handle]
        if tag == b"D":
            import decimal  # noqa: PLC0415 - only when a program returns one

            text = self.take(self.length()).decode("ascii", "replace")
            try:
                return decimal.Decimal(text)
            except (decimal.InvalidOperation, ValueError):
                raise WireError("malformed decimal") from None
        if tag not in b"ltqSZdIrQy" or len(tag) != 1:
            raise WireError(f"unknown tag {tag!r}")
        n = self.length()
        if n > len(self.data) - self.pos:  # every value takes at least one byte
            raise WireError("truncated frame")
        items = [self.value(depth + 1) for _ in range(n)]
        if tag == b"l":
            return items
        if tag == b"t":
            return tuple(items)
        if tag == b"q":
            from collections import deque  # noqa: PLC0415

            return deque(items)
        if tag == b"I":
            return iter(items)
        if tag == b"y":
            if BUILD is None or not items or type(items[0]) is not str:
                raise WireError("a typed value is not accepted here")
            return BUILD(items)
        if tag == b"Q":
            if n != 2 or any(type(x) is not int for x in items) or items[1] == 0:
                raise WireError("malformed fraction")
            import fractions  # noqa: PLC0415 - only when a program returns one

            return fractions.Fraction(*items)
        if tag == b"r":
            if n != 3 or any(type(x) is not int for x in items) or items[2] == 0:
                raise WireError("malformed range")
            return range(*items)
        if tag == b"d":
            if n % 2:
                raise WireError("dict with an odd number of items")
            keys, values = items[0::2], items[1::2]
            _hashable(keys)
            return dict(zip(keys, values, strict=True))
        _hashable(items)
        return set(items) if tag == b"S" else frozenset(items)


def _hashable(values: list) -> None:
    """Only plain hashables (which hash without running any code but the interpreter's), of which
    at most MAX_COLLISIONS share one hash value: Python's probes are perturbed by the whole hash, so
    only many keys sharing it make a table cost quadratic time. The hashes are sorted, not counted
    in a table (whose own keys, equal-hash ints, would collide in turn)."""
    stack = list(values)
    while stack:
        v = stack.pop()
        tp = type(v)
        if tp is tuple or tp is frozenset or (tp in HASHABLE and isinstance(v, (tuple, frozenset))):
            stack.extend(v)
        elif tp not in (type(None), bool, int, float, complex, str, bytes, range) and tp not in HASHABLE:
            raise WireError(f"unhashable {tp.__name__} as a dict key or set item")
    if len(values) > MAX_COLLISIONS:
        hashes = sorted(map(hash, values))
        if any(a == b for a, b in zip(hashes, hashes[MAX_COLLISIONS:])):
            raise WireError(f"more than {MAX_COLLISIONS} dict keys or set items share one hash value")


# -- frames ----------------------------------------------------------------------------------


def send(fd: int, value) -> None:
    data = encode(value)
    _write_all(fd, _LEN.pack(len(data)) + data)


def receive(fd: int):
    """The next frame's value; EOFError when the peer has closed (or died), WireError when the
    frame is malformed."""
    n = _LEN.unpack(_read_exact(fd, 4))[0]
    if n > MAX_FRAME:
        raise WireError(f"frame of {n} bytes (at most {MAX_FRAME})")
    return decode(_read_exact(fd, n))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the peer closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
