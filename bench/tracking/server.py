"""One MLflow tracking server that every node of a sweep, ``creditbench ui``, ``summarize`` and
``eval`` share through an http URI (the command is ``creditbench server``, bench/cli/server.py).

The runs and metrics live in PostgreSQL, not SQLite: SQLite takes one lock for the whole file, so
many runs writing metrics at once wait on each other (and fail after MLflow's retries), and a
database file cannot be shared safely between machines over a network file system. The artifacts
(configs, reports, saved policies) are proxied: clients upload and download them through the
server's ``/api/2.0/mlflow-artifacts`` routes, and the server keeps them in ``<dir>/artifacts``, so a
node needs nothing but the URI.

Without ``--database`` the command runs its own PostgreSQL cluster in ``<dir>/pg`` (``initdb`` the
first time; Debian's ``postgresql`` package puts the binaries in /usr/lib/postgresql/<version>/bin,
else they are looked up on PATH). The database listens on 127.0.0.1 only, whatever ``--host`` says:
only MLflow talks to it, and only MLflow listens on ``--host``. Its superuser ``creditbench`` has a
random password kept in ``<dir>/pgpass`` (mode 0600, read by libpq through PGPASSFILE, so it never
appears on a command line). PostgreSQL refuses to run as root: run as uid 0, ``initdb`` and
``pg_ctl`` run as the ``postgres`` system user (``runuser -u postgres``), which then owns
``<dir>/pg`` and must be able to reach it (no private directory above it).

:func:`tracking_server` runs both, as a context manager, until it exits: ``creditbench server``
holds it open, and the tests use it (tests/tracking/test_server.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.errors import CreditBenchError

DEFAULT_DIR = ".creditbench/server"
DB_USER = "creditbench"
DB_NAME = "mlflow"
START_TIMEOUT_S = 120.0
"""How long to wait for PostgreSQL or MLflow to answer before giving up."""
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def pg_binary(name: str) -> str:
    """The path of PostgreSQL's program ``name`` (initdb, pg_ctl): the newest Debian install, else PATH."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: _version(p.parent.name))
    for bindir in reversed(versions):
        if (bindir / name).is_file():
            return str(bindir / name)
    found = shutil.which(name)
    if found is None:
        raise CreditBenchError(
            f"PostgreSQL's {name} is not installed (neither in /usr/lib/postgresql/*/bin nor on PATH): install "
            "it (apt-get install postgresql), or give an existing database with --database postgresql://..."
        )
    return found


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".") if x.isdigit())


def _as_db_owner(cmd: list[str]) -> list[str]:
    """``cmd`` as the user that owns the cluster: the ``postgres`` system user when this is root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        tail = " ".join((p.stderr or p.stdout).split())[-300:]
        raise CreditBenchError(f"{what} failed (exit {p.returncode}): {tail}")
    return p


def port_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (a TCP connection is refused)."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ PostgreSQL
def _pgpass(root: Path) -> Path:
    """``<dir>/pgpass``: the superuser's password as libpq's password file, created the first time."""
    path = root / "pgpass"
    if not path.is_file():
        path.write_text(f"127.0.0.1:*:*:{DB_USER}:{secrets.token_hex(16)}\n")
        path.chmod(0o600)
    return path


def _initdb(root: Path, pgdata: Path) -> None:
    """Create the cluster in ``pgdata`` (an empty or missing directory) with the password of ``<dir>/pgpass``."""
    password = _pgpass(root).read_text().strip().rsplit(":", 1)[1]
    pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
    pwfile = pgdata.parent / ".pg-initpw"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    try:
        if os.geteuid() == 0:
            shutil.chown(pgdata, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
            _run(_as_db_owner(["test", "-w", str(pgdata)]), f"the postgres user writing to {pgdata}")
        cmd = [pg_binary("initdb"), "-D", str(pgdata), "-U", DB_USER, f"--pwfile={pwfile}"]
        _run(_as_db_owner([*cmd, "--auth=scram-sha-256", "--encoding=UTF8", "--no-instructions"]), "initdb")
    except CreditBenchError as e:
        raise CreditBenchError(f"{e} (run as root, the postgres user must be able to reach {pgdata})") from None
    finally:
        pwfile.unlink(missing_ok=True)


def start_postgres(root: Path, db_port: int) -> str:
    """Start the cluster in ``<root>/pg`` on 127.0.0.1:``db_port`` (initdb first if there is none) with
    the database ``mlflow`` in it; the SQLAlchemy URI MLflow stores the runs under."""
    pgdata = root / "pg"
    if not (pgdata / "PG_VERSION").is_file():
        _initdb(root, pgdata)
    status = subprocess.run(_as_db_owner([pg_binary("pg_ctl"), "-D", str(pgdata), "status"]), capture_output=True)
    if status.returncode == 0:  # not to be stopped by whoever started it: refused, not reused
        raise CreditBenchError(f"a PostgreSQL cluster already runs in {pgdata} (stop it: creditbench server --stop)")
    if not port_free("127.0.0.1", db_port):
        raise CreditBenchError(f"port {db_port} on 127.0.0.1 is in use (another PostgreSQL?): give another --db_port")
    opts = f"-c listen_addresses=127.0.0.1 -p {db_port} -c unix_socket_directories=''"
    pg_ctl = [pg_binary("pg_ctl"), "-D", str(pgdata), "-l", str(pgdata / "server.log")]
    start = _as_db_owner([*pg_ctl, "-o", opts, "-w", "-t", str(int(START_TIMEOUT_S)), "start"])
    try:  # in a session of its own: a Ctrl-C meant for the command does not reach the cluster
        _run(start, "pg_ctl start", start_new_session=True)
    except CreditBenchError as e:
        raise CreditBenchError(f"{e}; see {pgdata / 'server.log'}") from None
    try:
        _create_database(root, db_port)
    except Exception as e:  # psycopg2's errors: the cluster started is stopped again
        stop_postgres(root)
        raise CreditBenchError(f"cannot create the {DB_NAME} database in {pgdata}: {str(e).splitlines()[0]}") from None
    return f"postgresql+psycopg2://{DB_USER}@127.0.0.1:{db_port}/{DB_NAME}"


def _create_database(root: Path, db_port: int) -> None:
    import psycopg2

    os.environ["PGPASSFILE"] = str(_pgpass(root))
    conn = psycopg2.connect(host="127.0.0.1", port=db_port, user=DB_USER, dbname="postgres")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {DB_NAME}")
    finally:
        conn.close()


def stop_postgres(root: Path) -> None:
    """Stop the cluster in ``<root>/pg`` if it runs (fast shutdown: open sessions are ended)."""
    pgdata = root / "pg"
    if (pgdata / "postmaster.pid").is_file():
        cmd = _as_db_owner([pg_binary("pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"])
        subprocess.run(cmd, capture_output=True, text=True)


# ------------------------------------------------------------------ MLflow
def advertised(host: str) -> str:
    """The name other machines reach ``host`` by: the machine's name where the server binds every interface."""
    return socket.getfqdn() if host in ("0.0.0.0", "::", "") else host


def mlflow_command(backend: str, artifacts: Path, host: str, port: int, workers: int) -> list[str]:
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend]
    cmd += ["--artifacts-destination", str(artifacts.resolve()), "--serve-artifacts"]
    cmd += ["--host", host, "--port", str(port), "--workers", str(workers)]
    name = advertised(host)
    if name not in LOOPBACK:  # MLflow accepts only loopback and private-IP Host headers unless told
        from mlflow.server.security_utils import get_default_allowed_hosts

        cmd += ["--allowed-hosts", ",".join([*get_default_allowed_hosts(), name, f"{name}:*"])]
    return cmd


def start_mlflow(backend: str, root: Path, host: str, port: int, workers: int = 2) -> subprocess.Popen:
    """``mlflow server`` on ``backend`` with artifacts proxied to ``<root>/artifacts``, its output in
    ``<root>/mlflow.log``, in a process group of its own (stopped with :func:`stop_process`)."""
    if not port_free("127.0.0.1" if host in ("0.0.0.0", "::") else host, port):
        raise CreditBenchError(f"port {port} on {host} is in use (another MLflow server?): give another --port")
    (root / "artifacts").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no background job workers
    with open(root / "mlflow.log", "ab") as log:
        return subprocess.Popen(
            mlflow_command(backend, root / "artifacts", host, port, workers),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_until_up(uri: str, proc: subprocess.Popen, log: Path, timeout: float = START_TIMEOUT_S) -> None:
    """Wait until the server at ``uri`` answers MLflow's REST API; refuse with one line if it exits."""
    from bench.tracking.tracking import check_tracking_uri

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = " ".join(log.read_text(errors="replace").split()[-40:]) if log.is_file() else ""
            raise CreditBenchError(f"mlflow server exited (code {proc.returncode}); see {log}: ...{tail[-300:]}")
        try:
            return check_tracking_uri(uri, timeout=2.0)
        except CreditBenchError:
            if time.monotonic() > deadline:
                raise CreditBenchError(f"mlflow server did not answer on {uri} in {timeout:g} s; see {log}") from None
            time.sleep(0.5)


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM the process group of ``proc`` (the server and its workers), then SIGKILL after ``timeout``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def tracking_server(
    directory: str | Path = DEFAULT_DIR,
    port: int = 5000,
    db_port: int = 5433,
    host: str = "127.0.0.1",
    database: str | None = None,
    workers: int = 2,
) -> Iterator[str]:
    """Run MLflow's tracking server on PostgreSQL (its own cluster in ``<directory>/pg``, or the existing
    ``database``) with artifacts proxied to ``<directory>/artifacts``; yields its http URI once it
    answers, and stops MLflow and the cluster it started on exit."""
    root = Path(directory).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    owned = database is None
    if owned:
        backend = start_postgres(root, db_port)
    else:
        backend = database
    proc = None
    try:
        proc = start_mlflow(backend, root, host, port, workers)
        uri = f"http://{advertised(host)}:{port}"
        wait_until_up(f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}", proc, root / "mlflow.log")
        yield uri
    finally:
        if proc is not None:
            stop_process(proc)
        if owned:
            stop_postgres(root)
