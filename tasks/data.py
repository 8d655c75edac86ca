"""Where benchmark rows come from: the Hugging Face Hub by default, a local directory when given.

A task names, for each split, a :class:`Source`: the Hub dataset (id, config, split) and the path
of the same data inside a local data directory (the layout of the upstream files, e.g.
``gsm8k/test.jsonl``). The directory is the task's ``data_dir`` option, else the
``CREDITBENCH_DATA`` environment variable; without either the Hub is used (through
``datasets.load_dataset``, which honours ``HF_DATASETS_OFFLINE`` and the local HF cache).

Rows are returned as plain dicts and checked against the fields the task needs, so a file with
the wrong schema fails in one line that names the file, the missing fields and the ones present.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

DATA_ENV = "CREDITBENCH_DATA"


@dataclass(frozen=True)
class Source:
    hub: str
    """Hugging Face Hub dataset id."""
    hub_split: str
    hub_config: str | None = None
    local: str = ""
    """Path of the same data under a local data directory (.jsonl, .jsonl.gz or a .json array)."""


def data_dir(option: str | None) -> Path | None:
    """The task's ``data_dir`` option, else ``$CREDITBENCH_DATA``, else None (use the Hub)."""
    value = option or os.environ.get(DATA_ENV) or None
    return Path(value).expanduser() if value else None


def read_local(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl / .jsonl.gz file (one object per line) or a .json file (one array)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            if path.name.endswith((".jsonl", ".jsonl.gz")):
                rows = [json.loads(line) for line in f if line.strip()]
            else:
                rows = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as e:
        raise CreditBenchError(f"could not read {path}: {type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise CreditBenchError(f"{path} has the wrong schema: expected JSON objects, one per row")
    return rows


def load_rows(task: str, source: Source, directory: Path | None) -> tuple[list[dict[str, Any]], str]:
    """Rows of ``source`` and a description of where they came from (for errors and tags)."""
    if directory is not None:
        if not directory.is_dir():
            raise CreditBenchError(
                f"task {task!r}: data directory {str(directory)!r} does not exist "
                f"(set by the task's data_dir option or ${DATA_ENV})"
            )
        path = directory / source.local
        if not path.is_file():
            raise CreditBenchError(
                f"task {task!r}: data file {str(path)!r} not found; a data directory holds "
                f"the upstream files, here {source.local!r} (see the task's docstring)"
            )
        return read_local(path), str(path)
    import datasets

    where = f"{source.hub}" + (f" ({source.hub_config})" if source.hub_config else "") + f" split {source.hub_split}"
    try:
        ds = datasets.load_dataset(source.hub, source.hub_config, split=source.hub_split)
    except Exception as e:  # offline, unknown id, network: all mean "no data from the Hub"
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CreditBenchError(
            f"task {task!r}: could not load {where} from the Hugging Face Hub ({msg}); "
            f"point the task's data_dir option or ${DATA_ENV} at a local copy holding "
            f"{source.local!r}"
        ) from None
    return [dict(r) for r in ds], f"hf://{where}"


def require(rows: list[dict[str, Any]], where: str, *alternatives: tuple[str, ...]) -> None:
    """Every row must have at least one field of each group in ``alternatives``, e.g.
    ``require(rows, f, ("problem", "question"), ("answer",))``."""
    if not rows:
        raise CreditBenchError(f"{where} has no rows")
    for i, row in enumerate(rows):
        missing = [" or ".join(a) for a in alternatives if not any(k in row for k in a)]
        if missing:
            raise CreditBenchError(
                f"{where} has the wrong schema: row {i} lacks {', '.join(missing)} "
                f"(it has: {', '.join(sorted(row)) or 'nothing'})"
            )


def first(row: dict[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` the row has."""
    for k in keys:
        if k in row:
            return row[k]
    raise KeyError(keys[0])


def to_dataset(rows: list[dict[str, Any]]):
    import datasets

    return datasets.Dataset.from_list(rows)
