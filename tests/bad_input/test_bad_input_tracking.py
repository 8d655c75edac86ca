"""Bad MLflow tracking URIs: an unreachable or silent server, a gateway without its server and
local stores that cannot work are named in one line, fast, before ``creditbench train`` writes
anything."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from bad_input_support import (
    BAD_URIS,
    FAST_S,
    UNREACHABLE,
    assert_names,
    cli,
    error_line,
    mlflow_runs,
    train,
)

from bench.errors import CreditBenchError
from bench.tracking.tracking import check_tracking_uri


def test_unreachable_tracking_server_is_named_within_seconds():
    for uri in (UNREACHABLE, "https://127.0.0.1:9/", "http://user:secret@127.0.0.1:9/prefix"):
        t0 = time.perf_counter()
        with pytest.raises(CreditBenchError) as e:
            check_tracking_uri(uri)
        assert time.perf_counter() - t0 < 5
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("cannot reach MLflow tracking server 'http")
        assert_names(msg, ["127.0.0.1:9", "mlflow server --host 127.0.0.1 --port 9", "sqlite:///"])
        assert "secret" not in msg  # a password in the URI is not printed


def test_a_server_that_never_answers_is_refused_after_the_timeout():
    with socket.socket() as listener:  # accepts connections (the kernel does) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        t0 = time.perf_counter()
        with pytest.raises(CreditBenchError, match="cannot reach MLflow tracking server .*no answer within 0.5 s"):
            check_tracking_uri(uri, timeout=0.5)
        assert time.perf_counter() - t0 < 3


def serve(status: int, body: bytes = b"OK") -> HTTPServer:
    """An HTTP server on 127.0.0.1 answering every GET with ``status`` and ``body``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


MLFLOW_ANSWERS = [
    pytest.param(200, b'{"experiments": [{"experiment_id": "0", "name": "Default"}]}', id="experiments"),
    pytest.param(200, b"{}", id="no-experiments"),
    pytest.param(404, b'{"error_code": "ENDPOINT_NOT_FOUND", "message": "..."}', id="an-mlflow-error"),
    pytest.param(401, b"<html>log in</html>", id="wants-credentials"),
    pytest.param(403, b"", id="forbidden"),
]
"""How MLflow's REST API (or a server in front of it that wants credentials) answers."""


@pytest.mark.parametrize("status, body", MLFLOW_ANSWERS)
def test_a_server_that_answers_as_mlflow_is_accepted(status, body):
    server = serve(status, body)
    try:
        check_tracking_uri(f"http://127.0.0.1:{server.server_port}")
        check_tracking_uri(f"http://127.0.0.1:{server.server_port}/mlflow/")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "status, body, expected",
    [
        pytest.param(200, b"<html>a web site</html>", "gave HTTP 200, not JSON", id="a-web-page"),
        pytest.param(404, b"Not Found", "gave HTTP 404, not JSON", id="not-found"),
        pytest.param(200, b'{"status": "ok"}', "gave HTTP 200)", id="another-json-api"),
    ],
)
def test_train_refuses_a_server_that_is_not_mlflow_before_any_work(capsys, ws, policy_dir, status, body, expected):
    """It answers HTTP, so MLflow's client would fail only at the run's first write, after the model
    loaded: the REST API request refuses it first."""
    server = serve(status, body)
    uri = f"http://127.0.0.1:{server.server_port}"
    try:
        t0 = time.perf_counter()
        code, _, err = cli(capsys, "train", "--model.name", policy_dir, "--tracking.uri", uri)
        assert time.perf_counter() - t0 < FAST_S
    finally:
        server.shutdown()
        server.server_close()
    assert_names(
        error_line(code, err),
        [f"MLflow tracking URI '{uri}' answers HTTP but is not an MLflow tracking server", expected, "mlflow server"],
    )
    ws.assert_unchanged()


def test_a_gateway_without_its_server_is_refused():
    server = serve(502)  # e.g. a reverse proxy whose MLflow server is down
    try:
        with pytest.raises(CreditBenchError, match="cannot reach MLflow tracking server .*HTTP 502"):
            check_tracking_uri(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()


def test_local_store_uris(ws):
    """sqlite:/// in a directory that does not exist (MLflow would create it and a new, empty store
    there), a directory or a text file as the database, and a file store that is a regular file."""
    (ws.root / "notes.txt").write_text("not a database\n")
    bad = {
        f"sqlite:///{ws.root}/no/such/dir/mlflow.db": ["directory", "no/such/dir", "does not exist"],
        "sqlite:///no-such-dir/mlflow.db": ["directory 'no-such-dir' does not exist"],
        f"sqlite:///{ws.root}/results": ["is a directory, not an SQLite database file"],
        f"sqlite:///{ws.root}/notes.txt": ["is not an SQLite database"],
        f"sqlite:///{ws.root}/notes.txt/mlflow.db": ["is a file, not a directory"],
        f"file://{ws.root}/notes.txt": ["is a regular file", "sqlite:///"],
        str(ws.root / "notes.txt"): ["is a regular file"],
        str(ws.db): ["is a regular file", f"use 'sqlite:///{ws.db}'"],  # the store, without sqlite:///
        "mlflow.db": ["is a regular file", f"use 'sqlite:///{Path('mlflow.db')}'"],
    }
    for uri, expected in bad.items():
        with pytest.raises(CreditBenchError) as e:
            check_tracking_uri(uri)
        assert uri in str(e.value) and "\n" not in str(e.value)
        assert_names(str(e.value), expected)
    for uri in (
        ws.uri,
        "sqlite:///mlflow.db",
        "sqlite:///new.db",
        f"sqlite:///{ws.root}/new.db",
        "sqlite:///:memory:",
        f"file://{ws.root}/mlruns",
        "databricks",
        "postgresql://user@db.example/mlflow",
    ):
        check_tracking_uri(uri)
    assert not (ws.root / "no").exists() and not (ws.root / "no-such-dir").exists()


@pytest.mark.parametrize("uri, expected", BAD_URIS)
def test_train_refuses_an_unusable_tracking_uri_fast(capsys, ws, policy_dir, uri, expected):
    uri = uri.format(root=ws.root)
    t0 = time.perf_counter()
    code, _, err = cli(capsys, "train", "--model.name", policy_dir, "--tracking.uri", uri)
    assert time.perf_counter() - t0 < FAST_S
    assert_names(error_line(code, err), expected)
    assert not (ws.root / "no").exists() and not (ws.root / "mlruns").exists()
    assert mlflow_runs(ws.db) == [ws.run_id]


def test_train_checks_the_tracking_uri_before_writing_anything(capsys, ws):
    """Before the tiny model's warm-start (its cache folder) and the run's checkpoint folder."""
    code, _, err = train(
        capsys, ws, "--tracking.uri", UNREACHABLE, "--task.options", "{train_size: 400, eval_size: 20}"
    )
    assert_names(error_line(code, err), ["cannot reach MLflow tracking server 'http://127.0.0.1:9'"])
    ws.assert_unchanged()


@pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="/usr/bin/bwrap is not installed")
def test_a_store_on_a_read_only_path_is_refused_fast_for_writing_and_read_for_reading(tmp_path):
    """A read-only mount (root may write through file modes, not through a read-only mount): a run
    is refused in one line, fast, instead of failing in MLflow's retries at its first write; a
    report or the UI still reads the store."""
    import subprocess
    import sys

    import mlflow

    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store / 'mlflow.db'}"
    mlflow.MlflowClient(uri).create_experiment("existing")
    code = (
        "import sys, time; from bench.tracking.tracking import check_tracking_uri, client\n"
        "t = time.time(); check_tracking_uri(sys.argv[1])\n"
        "print([e.name for e in client(sys.argv[1]).search_experiments()])\n"
        "try:\n    check_tracking_uri(sys.argv[1], write=True)\n"
        "except Exception as e:\n    print(e)\n"
        "print(round(time.time() - t, 2))\n"
    )
    argv = ["/usr/bin/bwrap", "--dev-bind", "/", "/", "--ro-bind", str(store), str(store)]
    out = subprocess.run(
        [*argv, sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=120, cwd=Path.cwd()
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3, out.stdout + out.stderr[-2000:]
    assert "'existing'" in lines[0]  # read
    assert lines[1] == (
        f"MLflow tracking URI {uri!r}: {str(store / 'mlflow.db')!r} is read-only (SQLite writes the store "
        "and its journal there); name a store on a writable path"
    )
    assert float(lines[2]) < FAST_S
