"""Which test code the sandbox can grade as one process would: a static check, run when a task loads.

The grader sees the program's values as data (:mod:`tasks.sandbox.wire`): a call's result is a
new object of the grader's own, except that a result which *is* one of the call's arguments is
the test's own argument object, and a list, dict, set, bytearray or deque argument the call changed
is changed in place. So ``f(a) is a``, ``f(a) is not a`` and tests of what ``f`` did to ``a``
answer as in one process, while identity between objects nested in results and arguments, identity
across calls, ``id()``, ``gc``, ``weakref`` and reference counts do not: a test that asks for them
would grade programs wrongly, so it is refused when the task loads (:func:`check_test`), with one
line naming the construct.

An ``is`` / ``is not`` comparison is accepted when one side is a constant (``None``, ``True``,
``False``, ``...``, a literal), when one side is ``type(x)`` (a class's identity: the grader's
classes are the builtins and the standard library's, and a class it makes once per name), or when
one side is a call and the other a bare name passed to that call as an argument (``f(a) is a``,
``candidate(x, key=y) is not y``). Everything else with ``is`` is refused, as are calls of ``id``,
the names ``getrefcount``, ``gc``, ``weakref``, ``is_`` and ``is_not`` (``operator``'s identity
functions).
"""

from __future__ import annotations

import ast

from bench.errors import CreditBenchError

REFUSED_NAMES = {
    "getrefcount": "reference counts",
    "gc": "the garbage collector",
    "weakref": "weak references",
    "is_": "operator.is_ (identity)",
    "is_not": "operator.is_not (identity)",
}


def check_test(test: str, name: str = "the test") -> None:
    """Raise a one-line :class:`~bench.errors.CreditBenchError` if ``test`` (Python source) asks
    something of identity that a sandboxed grading cannot answer as one process would."""
    try:
        tree = ast.parse(test)
    except SyntaxError as exc:
        raise CreditBenchError(f"{name}: the test code does not compile (line {exc.lineno}: {exc.msg})") from None
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for node in ast.walk(tree):
        reason = _refused(node, bound)
        if reason:
            raise CreditBenchError(
                f"{name}: the sandbox cannot grade a test that uses {reason} (line {node.lineno}); "
                "results cross between processes as data, so only `f(a) is a` and comparisons with constants "
                "or type(...) keep their meaning"
            )


def _refused(node: ast.AST, bound: set[str]) -> str | None:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        if node.id == "id" and "id" not in bound:
            return "id()"
        return REFUSED_NAMES.get(node.id)
    if isinstance(node, ast.Attribute):
        return REFUSED_NAMES.get(node.attr)
    if isinstance(node, ast.alias):
        return REFUSED_NAMES.get(node.name.partition(".")[0]) or REFUSED_NAMES.get(node.asname or "")
    if isinstance(node, ast.ImportFrom) and node.module:
        return REFUSED_NAMES.get(node.module.partition(".")[0])
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, sides, sides[1:]):
            if isinstance(op, (ast.Is, ast.IsNot)) and not _identity_kept(left, right):
                text = f"{ast.unparse(left)} {'is' if isinstance(op, ast.Is) else 'is not'} {ast.unparse(right)}"
                return f"`{text if len(text) <= 80 else text[:77] + '...'}`"
    return None


def _identity_kept(left: ast.expr, right: ast.expr) -> bool:
    """Whether ``left is right`` answers as in one process (see the module's docstring)."""
    if isinstance(left, ast.Constant) or isinstance(right, ast.Constant):
        return True
    if _is_type_call(left) or _is_type_call(right):
        return True
    return _passed_to(left, right) or _passed_to(right, left)


def _is_type_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 1
        and not node.keywords
    )


def _passed_to(call: ast.expr, name: ast.expr) -> bool:
    """``call`` is a call with ``name`` (a bare name) among its top-level arguments."""
    if not isinstance(call, ast.Call) or not isinstance(name, ast.Name):
        return False
    arguments = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(a, ast.Name) and a.id == name.id for a in arguments)
