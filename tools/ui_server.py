"""The MLflow UI as the screenshots (tools/ui_screenshot.py) and the browser tests meet it:
``creditbench ui`` started on a free port and always stopped with everything it started, and the
tracking server's REST API for what a page should show (the experiment, a sweep's runs, their tags,
metrics and names)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bench.errors import CreditBenchError, did_you_mean


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server's whole process group (``mlflow ui`` starts workers of its own); SIGKILL what lingers."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.2)
            if proc.poll() is not None and not _group_alive(proc.pid):
                return


def _last_line(path: str) -> str:
    """The server log's last error line (e.g. the port in use), else its last line."""
    lines = Path(path).read_text(errors="replace").strip().splitlines()
    errors = [ln for ln in lines if re.search(r"error|errno", ln, re.IGNORECASE)]
    return (errors or lines or ["(no output)"])[-1].strip()


@contextlib.contextmanager
def serve_ui(uri: str, port: int = 0, timeout: float = 240.0) -> Iterator[str]:
    """Run ``creditbench ui --uri URI --port P`` (a free port when 0) until the block ends; yields its base URL.

    Waits until the server answers ``/health``; the server (and everything it started) is stopped
    on leaving the block, also on errors.
    """
    port = port or free_port()
    log = tempfile.NamedTemporaryFile(prefix="creditbench-ui-", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "bench.cli", "ui", "--uri", uri, "--port", str(port)]
    # Browsing runs needs none of the server's background job workers (a handful of processes).
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise CreditBenchError(f"creditbench ui exited with status {proc.returncode}: {_last_line(log.name)}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise CreditBenchError(
                    f"creditbench ui did not answer on {base} within {timeout:.0f}s; "
                    f"its last output: {_last_line(log.name)}"
                )
            time.sleep(1.0)
        yield base
    finally:
        _stop(proc)
        log.close()
        with contextlib.suppress(OSError):
            os.unlink(log.name)


def _api(base: str, path: str, body: dict | None = None) -> dict:
    """One call of the tracking server's REST API (GET without a body, POST with one)."""
    url = f"{base}/api/2.0/mlflow/{path}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return {}
        raise CreditBenchError(f"MLflow server answered {e.code} for {path}: {e.read()[:200]!r}") from None


def experiment_id(base: str, name: str) -> str:
    """The id of the experiment called ``name`` on the server at ``base``."""
    exp = _api(base, "experiments/get-by-name?" + urllib.parse.urlencode({"experiment_name": name}))
    if exp.get("experiment"):
        return exp["experiment"]["experiment_id"]
    names = [e["name"] for e in _api(base, "experiments/search", {"max_results": 1000}).get("experiments", [])]
    raise did_you_mean("experiment", name, names)


def search_runs(base: str, eid: str, filter_string: str) -> list[dict]:
    """All active runs of experiment ``eid`` matching an MLflow search filter (REST ``runs/search`` dicts)."""
    runs: list[dict] = []
    token = None
    while True:
        body = {"experiment_ids": [eid], "filter": filter_string, "max_results": 1000, "run_view_type": "ACTIVE_ONLY"}
        if token:
            body["page_token"] = token
        page = _api(base, "runs/search", body)
        runs += page.get("runs", [])
        token = page.get("next_page_token")
        if not token:
            return runs


def run_tags(run: dict) -> dict[str, str]:
    """A REST run's tags as a dict."""
    return {t["key"]: t.get("value", "") for t in run.get("data", {}).get("tags", [])}


def run_metrics(run: dict) -> set[str]:
    """The keys of the metrics a REST run logged."""
    return {m["key"] for m in run.get("data", {}).get("metrics", [])}


def run_name(run: dict) -> str:
    """A REST run's name (its id when it has none)."""
    return run["info"].get("run_name") or run_tags(run).get("mlflow.runName", run["info"]["run_id"])


def sweep_filter(sweep: str) -> str:
    """The runs-table search text that selects a sweep's runs (its parent run included)."""
    return "tags.sweep = '{}'".format(sweep.replace("'", "\\'"))


def sweep_runs(base: str, eid: str, sweep: str) -> list[dict]:
    """The sweep's runs; a CreditBenchError naming the sweeps there are when it has none."""
    runs = search_runs(base, eid, sweep_filter(sweep))
    if runs:
        return runs
    known = {run_tags(r).get("sweep") for r in search_runs(base, eid, "")} - {None}
    raise did_you_mean("sweep", sweep, known)


def pass_at_1_metric(runs: list[dict]) -> str:
    """``eval/<task>/pass_at_1`` of the runs' training task (their ``task`` tag), else the first one logged."""
    keys = sorted({k for r in runs for k in run_metrics(r) if re.fullmatch(r"eval/[^/]+/pass_at_1", k)})
    for r in runs:
        task = run_tags(r).get("task")
        if task and f"eval/{task}/pass_at_1" in keys:
            return f"eval/{task}/pass_at_1"
    if not keys:
        raise CreditBenchError("none of the sweep's runs logged an eval/<task>/pass_at_1 metric yet")
    return keys[0]
