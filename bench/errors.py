"""The one error type users see: a message that says what was wrong and what the valid choices are."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CreditBenchError(ValueError):
    """A user-facing error; the CLI prints its message on one line and exits with status 2."""


def suggestion(name: str, choices: Iterable[str]) -> str:
    """' Did you mean 'x' or 'y'?' for the choices closest to ``name``, or ''."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def did_you_mean(kind: str, name: str, choices: Iterable[str]) -> CreditBenchError:
    choices = sorted(choices)
    hint = suggestion(name, choices)
    return CreditBenchError(
        f"unknown {kind} {name!r}.{hint} Valid {kind}s: {', '.join(choices) or '(none registered)'}."
    )
