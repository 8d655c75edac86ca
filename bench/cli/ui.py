"""``creditbench ui``: the MLflow UI of a store on 127.0.0.1 (a tracking server's own UI where the store
is one), with a link to every experiment of the suite in training mode."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.config import default_uri
from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser

USAGE = "ui [--uri URI] [--port 5000]"
HELP = "MLflow UI on 127.0.0.1"


def main(argv: list[str]) -> int:
    ap = ArgumentParser(prog="creditbench ui", description="Serve the MLflow UI on 127.0.0.1.")
    ap.add_argument("--uri", default=default_uri())
    ap.add_argument("--port", type=int, default=5000)
    a = ap.parse_args(argv)
    from bench.tracking.tracking import check_tracking_uri

    check_tracking_uri(a.uri)
    if a.uri.lower().startswith(("http://", "https://")):  # a tracking server serves its own UI
        return _server_ui(a.uri)
    if a.uri.startswith("sqlite:///") and not Path(a.uri[len("sqlite:///") :]).expanduser().is_file():
        raise CreditBenchError(f"no MLflow store at {a.uri} (run a sweep or `creditbench train` first, or give --uri)")
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        a.uri,
        "--host",
        "127.0.0.1",
        "--port",
        str(a.port),
        "--workers",
        "1",
    ]
    print(f"MLflow UI for {a.uri} on http://127.0.0.1:{a.port} (Ctrl-C to stop); the runs, in training mode:")
    _experiment_links(a.uri, f"http://127.0.0.1:{a.port}")
    sys.stdout.flush()  # before exec replaces the process
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")  # no background job workers
    os.execv(sys.executable, cmd)


def _experiment_links(uri: str, ui: str) -> None:
    """Print the UI link of every experiment of the suite in the store at ``uri``, in training mode."""
    from bench.tracking.tracking import TRAINING_KIND, client

    # MLflow 3.17 keeps its GenAI / Model training switch per browser (GenAI until changed) and the
    # experiments' kind tag does not override it; the workflowType parameter does
    for e in client(uri).search_experiments():
        if e.tags.get("mlflow.experimentKind") == TRAINING_KIND or e.name.startswith("creditbench"):
            print(f"  {e.name}: {ui}/#/experiments/{e.experiment_id}/runs?workflowType=machine_learning")


def _server_ui(uri: str) -> int:
    """An http(s) store is a tracking server (e.g. ``creditbench server``), which serves the UI itself:
    its address and the experiments' links, and no second UI."""
    from bench.tracking.tracking import redact

    ui = redact(uri).rstrip("/")
    print(f"MLflow UI of the tracking server: {ui} (it serves the UI itself); the runs, in training mode:")
    _experiment_links(uri, ui)
    return 0
