"""Which sweep a results directory holds (``results/<sweep>/store.json``).

A sweep is known by its MLflow experiment id and parent run id, not by its store's path: store.json
records ``{"uri": <as given>, "experiment_id": ..., "parent_run_id": ...}``, so a checkout copied or
moved together with its store (a SQLite ``mlflow.db`` beside ``results/``) is the same sweep under any
path, and a store that does not hold the recorded parent run is never written to on the folder's
behalf. The older record ``{"uri": ..., "store": <absolute spelling>}`` is read as a record without
ids that accepts the same store path, and is rewritten with the ids by the next sweep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.atomic import write_atomic
from bench.errors import CreditBenchError
from bench.tracking import sweep_runs, tracking


def store_key(uri: str) -> str:
    """One spelling per tracking store: a SQLite file's or a file store's path made absolute (against
    the working directory, as MLflow reads it); other URIs as given, without a trailing slash."""
    for prefix in ("sqlite:///", "file://", "file:"):
        if uri.startswith(prefix):
            return prefix + str(Path(uri[len(prefix) :]).expanduser().resolve())
    if "://" not in uri:  # a bare path: MLflow's file store
        return "file:" + str(Path(uri).expanduser().resolve())
    return uri.rstrip("/")


def read_record(out: Path) -> dict[str, Any] | None:
    """results/<sweep>/store.json, or None where there is none; a file that is not a store record is
    refused (the folder's owner cannot be told)."""
    path = out / "store.json"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        record = None
    ids = isinstance(record, dict) and isinstance(record.get("parent_run_id"), str)
    if not isinstance(record, dict) or not isinstance(record.get("uri"), str) or not (ids or "store" in record):
        raise CreditBenchError(f"{path} is not a store record (remove it to claim the directory anew)")
    return record


def record_store(out: Path, uri: str, experiment_id: str, parent_run_id: str) -> None:
    """Record that results/<sweep>/ holds the sweep whose parent run is ``parent_run_id`` (in the
    experiment ``experiment_id``), tracked in ``uri`` as given; a record of these ids is kept as it is."""
    record = read_record(out)
    if record and (record.get("experiment_id"), record.get("parent_run_id")) == (experiment_id, parent_run_id):
        return
    new = {"uri": uri, "experiment_id": experiment_id, "parent_run_id": parent_run_id}
    write_atomic(out / "store.json", json.dumps(new, indent=1) + "\n")  # never half a record


def claim_store(out: Path, uri: str, sweep: str) -> str | None:
    """Whether sweep ``sweep`` may run in results/<sweep>/ against the store ``uri``: the id of the
    recorded parent run, which ``uri``'s store holds (the sweep goes on in it), or None where the
    folder has no record of one (a first sweep, or a record of the older format naming this store's
    path). Otherwise it is refused with one line before either store or the folder is touched: its
    runs would count as unfinished there, be redone and replace these results."""
    record = read_record(out)
    if record is None:
        return None
    if "parent_run_id" not in record:
        if store_key(uri) != record["store"]:
            raise CreditBenchError(
                f"{out} holds sweep {sweep!r} tracked in the MLflow store {record['uri']!r} ({record['store']}), "
                f"not {uri!r}: rerun with --uri {record['uri']!r}, or give this store its own --results_dir"
            )
        return None
    why = _not_held(uri, record, sweep)
    if why:
        raise CreditBenchError(
            f"{out} holds sweep {sweep!r} whose parent MLflow run {record['parent_run_id']} was tracked in "
            f"{record['uri']!r}, and {why}: rerun with --uri naming the store that holds it, or give this "
            "store its own --results_dir"
        )
    return record["parent_run_id"]


def log_report(out: Path, uri: str, experiment: str, sweep: str) -> tuple[str | None, str]:
    """Log the sweep's report files to its parent run in the store ``uri`` where that store holds
    it: the parent run recorded in store.json (or, without ids, the latest of the sweep's name in
    ``experiment``, as long as the record names this store's path). Returns (the run's id, '') when
    logged, else (None, why not); a store that does not hold the parent run is not written to."""
    try:
        record = read_record(out)
        run_id, why = _report_parent(record, uri, experiment, sweep)
    except CreditBenchError as e:
        return None, str(e)
    if run_id is not None:
        sweep_runs.log_files(tracking.client(uri), run_id, sweep_runs.report_files(out), "report")
    return run_id, why


def _report_parent(record: dict[str, Any] | None, uri: str, experiment: str, sweep: str) -> tuple[str | None, str]:
    """The parent run the sweep's report goes to in ``uri``'s store, or (None, why there is none)."""
    if record is not None and "parent_run_id" in record:
        why = _not_held(uri, record, sweep)
        if why:
            return None, (
                f"{why} (the sweep's parent run {record['parent_run_id']} was tracked in {record['uri']!r}: "
                "pass its store with --uri)"
            )
        return record["parent_run_id"], ""
    if record is not None and store_key(uri) != record["store"]:
        return None, f"sweep {sweep!r} was tracked in {record['uri']!r}, not {uri!r} (pass its store with --uri)"
    run_id = None if _absent(uri) else sweep_runs.sweep_run(tracking.client(uri), experiment, sweep)
    return run_id, "" if run_id else f"no parent run of sweep {sweep!r} found in {uri} (give its store: --uri)"


def _not_held(uri: str, record: dict[str, Any], sweep: str) -> str | None:
    """Why the store at ``uri`` does not hold the record's parent run of ``sweep``; None where it does.
    A local store that does not exist yet is not opened (that would create it)."""
    run_id = record["parent_run_id"]
    if _absent(uri):
        return f"{uri!r} is no MLflow store yet"
    try:
        run = tracking.client(uri).get_run(run_id)
    except CreditBenchError as e:
        return f"{uri!r} cannot be read ({e})"
    except Exception:  # MLflow's RESOURCE_DOES_NOT_EXIST, among others
        return f"the store {uri!r} holds no run {run_id}"
    tags = run.data.tags
    if tags.get("kind") != "sweep" or tags.get("sweep") != sweep or run.info.experiment_id != record["experiment_id"]:
        return f"run {run_id} in {uri!r} is not the parent run of sweep {sweep!r}"
    if run.info.lifecycle_stage != "active":
        return f"run {run_id} in {uri!r} is deleted"
    return None


def _absent(uri: str) -> bool:
    """Whether ``uri`` names a local store that does not exist (an empty or missing SQLite file, a
    missing file-store directory): MLflow would create it on opening."""
    key = store_key(uri)
    if key.startswith("sqlite:///"):
        db = Path(key[len("sqlite:///") :].split("?", 1)[0])
        return not db.is_file() or db.stat().st_size == 0
    if key.startswith("file:"):
        return not Path(key.split(":", 1)[1].removeprefix("//")).is_dir()
    return False
