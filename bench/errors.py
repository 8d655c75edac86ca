"""The one error type users see: a message that says what was wrong and what the valid choices are."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CreditBenchError(ValueError):
    """A user-facing error; the CLI prints its message on one line and exits with status 2."""


def did_you_mean(kind: str, name: str, choices: Iterable[str]) -> CreditBenchError:
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return CreditBenchError(
        f"unknown {kind} {name!r}.{hint} Valid {kind}s: {', '.join(choices) or '(none registered)'}."
    )
