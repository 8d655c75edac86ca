"""MLflow tracking: loggers, tags, params and artifacts for every run."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.tracking import new_store


def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if dataclasses.is_dataclass(d):
        d = dataclasses.asdict(d)
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


SQLITE_HEADER = b"SQLite format 3\x00"
CHECK_TIMEOUT_S = 5.0
"""How long :func:`check_tracking_uri` waits for an http(s) tracking server to answer."""


def check_tracking_uri(uri: str, timeout: float = CHECK_TIMEOUT_S, write: bool = False) -> None:
    """Refuse, with one line and before anything is written, a tracking URI that cannot work.
    With ``write`` (a run, a sweep, an eval: not a report or the UI), a local store must also be
    writable: SQLite on a read-only path fails only at the first write, after MLflow's retries.

    - ``http(s)://``: the server must answer MLflow's REST API (``GET <uri>/api/2.0/mlflow/
      experiments/search``) within ``timeout`` seconds, as MLflow does: with JSON, or with 401/403
      (a server that wants credentials) or a TLS handshake. A refused connection, an unknown host,
      silence or a gateway's 502/503/504 means nothing is there (MLflow's own client retries that
      for minutes before it gives up); any other answer means the URI names a web server that is not
      MLflow's, which MLflow would report only at the run's first write, after the model loads.
    - ``sqlite:///PATH``: the directory of PATH must exist (MLflow would create it silently, so a
      mistyped path would start a new, empty store elsewhere), and PATH, where it exists, must be an
      SQLite database file.
    - ``file:PATH`` or a bare PATH (MLflow's file store, a directory): PATH must not be a regular file.

    Other schemes (postgresql, mysql, databricks, ...) are left to MLflow."""
    from urllib.parse import urlsplit

    text = uri.strip()
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme in ("http", "https"):
        _check_server(text, timeout)
    elif scheme == "sqlite" or scheme.startswith("sqlite+"):
        rest = text.split("://", 1)[1] if "://" in text else ""
        path = rest[1:].split("?", 1)[0] if rest.startswith("/") else ""  # sqlite:///rel.db, sqlite:////abs.db
        if path in ("", ":memory:"):
            return
        db = Path(path)
        parent = db.parent
        if not parent.exists():
            raise CreditBenchError(
                f"MLflow tracking URI {uri!r}: directory {str(parent)!r} does not exist (MLflow "
                f"would create a new, empty store there); create it first (mkdir -p {parent}) "
                "or fix the path"
            )
        if not parent.is_dir():
            raise CreditBenchError(f"MLflow tracking URI {uri!r}: {str(parent)!r} is a file, not a directory")
        if db.is_dir():
            raise CreditBenchError(
                f"MLflow tracking URI {uri!r}: {path!r} is a directory, not an SQLite database "
                "file; name a file in it, e.g. " + f"'sqlite:///{db / 'mlflow.db'}'"
            )
        if db.is_file() and db.stat().st_size > 0 and not _is_sqlite(db):
            raise CreditBenchError(
                f"MLflow tracking URI {uri!r}: {path!r} exists but is not an SQLite database; "
                "name a new file or an MLflow SQLite store"
            )
        # SQLite writes its journal beside the database, so the directory must be writable too
        readonly = [p for p in (parent, db) if write and p.exists() and not os.access(p, os.W_OK)]
        if readonly:
            raise CreditBenchError(
                f"MLflow tracking URI {uri!r}: {str(readonly[-1])!r} is read-only (SQLite writes the "
                "store and its journal there); name a store on a writable path"
            )
    elif scheme == "file" or (not scheme and text):
        from urllib.request import url2pathname

        local = Path(url2pathname(urlsplit(text).path)) if scheme == "file" else Path(text).expanduser()
        if local.is_file():
            hint = (
                f"; it is an SQLite database: use 'sqlite:///{local}'"
                if _is_sqlite(local)
                else "; give a directory, or a local sqlite:/// URI (e.g. sqlite:///mlflow.db)"
            )
            raise CreditBenchError(
                f"MLflow tracking URI {uri!r} is a regular file, but a file store is a directory{hint}"
            )


def redact(uri: str) -> str:
    """``uri`` with the password of ``user:password@host`` replaced by ``***`` (for messages)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(uri)
        if parts.password is None:
            return uri
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:
        return uri


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _check_server(uri: str, timeout: float) -> None:
    """GET <uri>/health with a short timeout; raise the one-line error if nothing answers."""
    import ssl
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit, urlunsplit

    parts, shown = urlsplit(uri), redact(uri)
    try:
        host, port = parts.hostname, parts.port
    except ValueError as e:  # a port that is not a number
        raise CreditBenchError(f"MLflow tracking URI {shown!r} is malformed: {e}") from None
    if not host:
        raise CreditBenchError(f"MLflow tracking URI {shown!r} names no host (e.g. http://127.0.0.1:5000)")
    port = port or (443 if parts.scheme.lower() == "https" else 80)
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # credentials are not needed to see it answer
    api = parts.path.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    url = urlunsplit((parts.scheme, netloc, api, "max_results=1", ""))
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return _mlflow_answer(shown, api, answer.status, answer.read(65536))
    except urllib.error.HTTPError as e:  # it answered: MLflow (an error in JSON, or credentials wanted) or
        if e.code not in (502, 503, 504):  # not; a proxy's 502-504 say its server is down (MLflow would retry)
            return _mlflow_answer(shown, api, e.code, e.read(65536))
        reason = f"HTTP {e.code} {e.reason}"
    except urllib.error.URLError as e:
        if isinstance(e.reason, ssl.SSLError):  # a TLS handshake happened: a server is there
            return
        reason = e.reason
    except (OSError, ValueError) as e:  # timeouts while reading (TimeoutError is an OSError), a closed connection
        reason = e
    if isinstance(reason, TimeoutError):  # socket.timeout is TimeoutError
        reason = f"no answer within {timeout:g} s"
    reason = " ".join(str(reason).split()) or type(reason).__name__
    raise CreditBenchError(
        f"cannot reach MLflow tracking server {shown!r}: {reason}; start it with "
        f"`mlflow server --host {host} --port {port}` "
        "or use a local sqlite:/// URI (e.g. sqlite:///mlflow.db)"
    )


def _mlflow_answer(shown: str, api: str, status: int, body: bytes) -> None:
    """Refuse an HTTP answer that MLflow's tracking server would not give: its REST API answers in JSON
    (``{"experiments": ...}`` or ``{"error_code": ...}``), or 401/403 when it wants credentials."""
    import json

    if status in (401, 403):
        return
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and ("experiments" in answer or "error_code" in answer or not answer):
        return
    raise CreditBenchError(
        f"MLflow tracking URI {shown!r} answers HTTP but is not an MLflow tracking server (GET {api} gave "
        f"HTTP {status}{', not JSON' if answer is None else ''}); give the address `mlflow server` "
        "serves (e.g. http://127.0.0.1:5000) or a local sqlite:/// URI (e.g. sqlite:///mlflow.db)"
    )


@functools.cache
def _run_logger():
    from lightning.pytorch.loggers import MLFlowLogger

    class RunLogger(MLFlowLogger):
        """Lightning finalizes its loggers as successful at the end of every trainer call (the
        validation before ``fit`` included). A run here is finished only when :meth:`end` says so:
        until then it stays RUNNING, and a run killed mid-way is left RUNNING (an exception still
        marks it FAILED). The run's system-metrics monitor (if any) stops with it."""

        monitor = None

        def finalize(self, status: str = "success") -> None:
            if status not in ("success", "finished"):
                self.stop_monitor()
                super().finalize(status)

        def end(self, status: str = "success") -> None:
            self.stop_monitor()
            super().finalize(status)

        def stop_monitor(self) -> None:
            if self.monitor is not None:
                monitor, self.monitor = self.monitor, None
                monitor.finish()
                if getattr(monitor, "_logging_step", 1) == 0:  # nothing published: one sample at the end
                    _last_sample(monitor)

    return RunLogger


def _last_sample(monitor) -> None:
    """Publish one system-metrics sample of a run that ended before its monitor published any (a run
    shorter than one sampling interval, or a monitor thread that stopped early): every run that
    monitored its system metrics shows them on the System metrics tab."""
    try:
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
        monitor.mlflow_logger.flush()
    except Exception as e:  # best effort, like MLflow's own monitor: a run is not failed for this
        logging.getLogger(__name__).warning("could not log system metrics at the run's end: %s", e)


def make_logger(uri: str, experiment: str, run_name: str, tags: dict[str, str], run_id: str | None = None):
    """A Lightning MLFlowLogger on ``uri`` (continuing the run ``run_id`` when given: a resumed
    run); fails early, with one line, if the store is unusable. The run ends with ``logger.end(status)``.
    The experiment is tagged as model training (:func:`mark_training`), and the run samples system
    metrics until it ends (off with MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=false)."""
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    check_tracking_uri(uri, write=True)
    new_store.seed(uri)  # a new SQLite store copied, not migrated (the same store, made faster)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    first = rank_zero_only.rank == 0  # the process that logs (the others' loggers do nothing)
    try:  # the constructor opens the store already (e.g. MLflow refuses a file store there)
        logger = _run_logger()(
            experiment_name=experiment, run_name=run_name, tracking_uri=uri, tags=tags, run_id=run_id, synchronous=True
        )  # every metric is in the store when the call returns
        _ = logger.run_id  # creates the experiment and the run
        if run_id is not None:  # a killed run was left RUNNING, an interrupted one KILLED
            logger.experiment.update_run(run_id, status="RUNNING")
        if first:
            mark_training(logger.experiment, logger.experiment_id)
    except Exception as e:  # mlflow raises many types for an unusable store
        raise _unusable(uri, e) from None
    if first and os.environ.get("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING", "true").lower() not in ("false", "0"):
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # not 4 lines of INFO a run
        # CPU, memory, disk, network (and GPU with pynvml) every 10 s as system/... metrics, on
        # the System metrics tab (a run that ends before the first still gets one, at its end); a
        # resumed run continues their steps
        logger.monitor = SystemMetricsMonitor(logger.run_id, resume_logging=run_id is not None, tracking_uri=uri)
        logger.monitor.start()
    return logger


TRAINING_KIND = "custom_model_development"
"""The value of the experiment tag ``mlflow.experimentKind`` that makes the MLflow 3 UI open an
experiment in its model-training mode (runs table, charts, system metrics) rather than the GenAI
one (traces, evaluations); the UI's own experiment-type switch writes the same tag."""


def mark_training(client, experiment_id: str) -> None:
    """Tag the experiment as model training, unless someone already chose its kind."""
    if "mlflow.experimentKind" not in client.get_experiment(experiment_id).tags:
        client.set_experiment_tag(experiment_id, "mlflow.experimentKind", TRAINING_KIND)


def client(uri: str):
    """An MLflow client of the store at ``uri``, known to work: the URI passes
    :func:`check_tracking_uri` and the store answers one query."""
    from mlflow.tracking import MlflowClient

    check_tracking_uri(uri)
    new_store.seed(uri)
    try:  # the client opens the store at once (MLflow refuses a file store there, for one)
        c = MlflowClient(uri)
        c.search_experiments(max_results=1)
    except Exception as e:
        raise _unusable(uri, e) from None
    return c


def log_eval_run(
    uri: str,
    experiment: str,
    run_name: str,
    tags: dict[str, str],
    params: dict[str, Any],
    metrics: dict[str, float],
    dicts: dict[str, dict],
    table: tuple[str, dict[str, list]] | None = None,
) -> str:
    """One finished MLflow run of ``creditbench eval``: its tags, params, metrics, JSON artifacts
    (``dicts``: file name -> data) and an optional table (file name, columns); its run id."""
    import mlflow

    new_store.seed(uri)
    mlflow.set_tracking_uri(uri)
    try:
        mark_training(mlflow.MlflowClient(uri), mlflow.set_experiment(experiment).experiment_id)
    except Exception as e:  # an unusable store raises many types
        raise _unusable(uri, e) from None
    with mlflow.start_run(run_name=run_name, tags=tags) as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        for name, data in dicts.items():
            mlflow.log_dict(data, name)
        if table is not None:
            mlflow.log_table(table[1], artifact_file=table[0])
        return run.info.run_id


def _unusable(uri: str, e: Exception) -> CreditBenchError:
    return CreditBenchError(f"cannot use MLflow tracking URI {redact(uri)!r}: {str(e).splitlines()[0][:300]}")


def log_config(logger, params: dict[str, Any], yaml_text: str, name: str = "config.yaml") -> None:
    logger.log_hyperparams({k: ("" if v is None else v) for k, v in params.items()})
    logger.experiment.log_text(logger.run_id, yaml_text, name)


def log_dict(logger, data: dict[str, Any], name: str) -> None:
    """``data`` as the JSON artifact ``name`` of the logger's run."""
    logger.experiment.log_dict(logger.run_id, data, name)


# ------------------------------------------------------------------ experiments
def experiment_id(client, name: str) -> str:
    """The id of the experiment ``name``, created if it does not exist."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    eid = client.create_experiment(name)
    mark_training(client, eid)
    return eid
