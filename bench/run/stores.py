"""Which tracking store a sweep's results directory belongs to (``results/<sweep>/store.json``)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.errors import CreditBenchError


def store_key(uri: str) -> str:
    """One spelling per tracking store: a SQLite file's or a file store's path made absolute (against
    the working directory, as MLflow reads it); other URIs as given, without a trailing slash."""
    for prefix in ("sqlite:///", "file://", "file:"):
        if uri.startswith(prefix):
            return prefix + str(Path(uri[len(prefix) :]).expanduser().resolve())
    if "://" not in uri:  # a bare path: MLflow's file store
        return "file:" + str(Path(uri).expanduser().resolve())
    return uri.rstrip("/")


def claim_store(out: Path, uri: str) -> None:
    """results/<sweep>/ belongs to the tracking store its first run used (recorded in store.json): a
    run against another store is refused with one line, so neither store's runs nor this directory's
    results are touched (its runs would otherwise count as unfinished, be redone and replace these)."""
    path = out / "store.json"
    key = store_key(uri)
    try:
        recorded = json.loads(path.read_text())
        recorded_uri, recorded_key = recorded["uri"], recorded["store"]
    except FileNotFoundError:
        path.write_text(json.dumps({"uri": uri, "store": key}, indent=1) + "\n")
        return
    except (ValueError, KeyError, TypeError):
        raise CreditBenchError(f"{path} is not a store record (remove it to claim the directory for {uri!r})") from None
    if recorded_key != key:
        raise CreditBenchError(
            f"{out} holds sweep {out.name!r} tracked in the MLflow store {recorded_uri!r} ({recorded_key}), "
            f"not {uri!r}: rerun with --uri {recorded_uri!r}, or give this store its own --results_dir"
        )


def recorded_uri(out: Path) -> str | None:
    """The tracking store results/<sweep>/ was claimed for (its store.json; the absolute spelling, which
    works from any directory), or None where it has none."""
    try:
        return json.loads((out / "store.json").read_text())["store"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
