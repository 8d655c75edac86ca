"""``creditbench server``: run the shared MLflow tracking server (PostgreSQL, proxied artifacts;
bench/tracking/server.py) until Ctrl-C, SIGTERM or ``creditbench server --stop``.

    creditbench server [--dir .creditbench/server] [--host 127.0.0.1] [--port 5000] [--db_port 5433]
                       [--database postgresql://USER@HOST:PORT/DB]
    creditbench server --stop [--dir .creditbench/server]

It prints the tracking URI to give every node (``MLFLOW_TRACKING_URI=http://host:port``), waits until
the server answers, and blocks; its pid is in ``<dir>/server.pid`` while it runs.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser
from bench.tracking.server import DEFAULT_DIR, stop_postgres, tracking_server

USAGE = "server [--host H --port 5000] | --stop"
HELP = "shared MLflow tracking server on PostgreSQL"


def stop(root: Path, timeout: float = 60.0) -> int:
    """Stop the server that ``creditbench server`` runs from ``root`` (its pid in ``<root>/server.pid``)."""
    pidfile = root / "server.pid"
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        stop_postgres(root)  # a server killed outright may have left the cluster running
        print(f"no creditbench server runs from {root}")
        return 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # it removes its pid file once MLflow and PostgreSQL are down
        if not pidfile.is_file() or not _alive(pidfile):
            print(f"stopped the creditbench server of {root}")
            return 0
        time.sleep(0.2)
    raise CreditBenchError(f"the creditbench server of {root} (pid {pid}) did not stop within {timeout:g} s")


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    ap = ArgumentParser(
        prog="creditbench server",
        description="Run MLflow's tracking server on PostgreSQL with proxied artifacts: the store every "
        "node of a sweep shares through MLFLOW_TRACKING_URI=http://HOST:PORT.",
    )
    ap.add_argument("--dir", default=DEFAULT_DIR, help=f"the database, artifacts and logs (default {DEFAULT_DIR})")
    ap.add_argument("--host", default="127.0.0.1", help="where MLflow listens (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=5000, help="MLflow's port (default 5000)")
    ap.add_argument("--db_port", type=int, default=5433, help="PostgreSQL's port on 127.0.0.1 (default 5433)")
    ap.add_argument("--database", default=None, help="an existing database (postgresql://...) instead of <dir>/pg")
    ap.add_argument("--workers", type=int, default=4, help="MLflow's worker processes (default 4)")
    ap.add_argument("--stop", action="store_true", help="stop the server running from --dir")
    a = ap.parse_args(argv)
    root = Path(a.dir).expanduser().resolve()
    if a.stop:
        return stop(root)
    if a.database is not None and not a.database.startswith(("postgresql:", "postgresql+")):
        raise CreditBenchError(f"--database must be a postgresql:// URI, got {a.database!r}")
    root.mkdir(parents=True, exist_ok=True)
    pidfile = root / "server.pid"
    if pidfile.is_file() and _alive(pidfile):
        raise CreditBenchError(f"a creditbench server already runs from {root} (stop it: creditbench server --stop)")
    signal.signal(signal.SIGTERM, _terminate)
    pidfile.write_text(str(os.getpid()))
    try:
        with tracking_server(root, a.port, a.db_port, a.host, a.database, a.workers) as uri:
            print(f"MLFLOW_TRACKING_URI={uri}", flush=True)
            print(f"  (give it to every node; the UI is at {uri}; Ctrl-C or creditbench server --stop to stop)")
            sys.stdout.flush()
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        pidfile.unlink(missing_ok=True)
    print(f"stopped MLflow{'' if a.database else ' and PostgreSQL'} ({root})")
    return 0


def _alive(pidfile: Path) -> bool:
    try:
        os.kill(int(pidfile.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True
