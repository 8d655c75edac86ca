"""The Ray cluster a sweep runs on (:mod:`bench.sweep.ray_engine`): connecting to it (or starting one on
this machine), its live nodes, and the checks made before anything starts: that some node can take each
run (:func:`check_runs`), how many runs go at once (:func:`slots`), and that every node sees the
driver's working directory, results and checkpoint folders (:func:`check_shared`)."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

CONNECT_TIMEOUT_S = 5.0
WORKER_NICENESS = "RAY_worker_niceness"
"""Ray starts its workers at niceness 15 unless this says otherwise (read when a node starts): a sweep's runs,
the node's real work, would then get a few percent of a core beside any other process (measured: a Ray test
sweep took 270 s instead of 29 s beside two busy processes). A cluster this process starts sets 0; a cluster
started with ``ray start`` takes it from that command's environment (the SLURM template exports it)."""


@dataclass(frozen=True)
class Needs:
    """What one run's actor asks for, on one node."""

    cpus: int
    gpus: int

    def text(self) -> str:
        return f"{self.cpus} CPU" + (f" and {self.gpus} GPU" if self.gpus else "")


def resolve_address(address: str | None) -> str | None:
    """The cluster to use: ``address``, else ``$RAY_ADDRESS``; ``local`` (or nothing) starts a Ray
    instance on this machine for the sweep."""
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    return None if address == "local" else address


def _check_reachable(address: str) -> None:
    """A ``host:port`` (or ``ray://host:port``) that answers a TCP connect, in seconds rather than
    ray.init's minute of retries; ``auto`` is left to Ray (it reads this machine's running cluster)."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise CreditBenchError(
            f"Ray address {address!r} is not host:port (e.g. 10.0.0.1:6379), 'auto' or 'local'; "
            "give the head node's address that `ray start --head` printed"
        )
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise CreditBenchError(
            f"no Ray cluster at {address} ({why}): start one there (`ray start --head --port {port}`), "
            "give its head's address with --ray or $RAY_ADDRESS, or --ray local for one on this machine"
        ) from None


def connect(address: str | None) -> bool:
    """Connect this process to the cluster (or start a local one); whether it started one."""
    import logging

    import ray

    if address is not None:
        _check_reachable(address)
    else:  # the runs are this cluster's work: its workers at Ray's default niceness 15 yield to anything else
        os.environ.setdefault(WORKER_NICENESS, "0")
    try:
        ray.init(
            address=address or "local",  # a new instance: never a stale one this machine's /tmp/ray names
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            namespace="creditbench",
            configure_logging=True,
            ignore_reinit_error=True,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CreditBenchError(
            f"could not connect to the Ray cluster at {address or 'this machine'}: {first}"
        ) from None
    return address is None


def nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes that can run work: ``{"id", "ip", "cpus", "gpus"}``."""
    import ray

    out = []
    for n in ray.nodes():
        res = n.get("Resources", {})
        if n.get("Alive") and res.get("CPU", 0) > 0:
            out.append(
                {
                    "id": n["NodeID"],
                    "ip": n.get("NodeManagerAddress"),
                    "cpus": int(res["CPU"]),
                    "gpus": int(res.get("GPU", 0)),
                }
            )
    return out


def needs(cfg, cluster_gpus: int) -> Needs:
    """A run's actor's resources: its threads, and its devices as GPUs where it trains on GPUs."""
    gpu = cfg.trainer.accelerator == "gpu" or (cfg.trainer.accelerator == "auto" and cluster_gpus > 0)
    return Needs(max(1, cfg.threads), cfg.trainer.devices if gpu else 0)


def check_runs(runs: list[tuple[str, Any]], live: list[dict[str, Any]], where: str) -> None:
    """Refuse, in one line and before anything starts, a run no node of the cluster can take: one across
    nodes, or one that needs more CPUs or GPUs than any single node has."""
    if not live:
        raise CreditBenchError(
            f"the Ray cluster {where} has no live node with CPUs: add nodes (`ray start --address ...`)"
        )
    gpus = sum(n["gpus"] for n in live)
    for key, cfg in runs:
        if cfg.trainer.num_nodes > 1:
            raise CreditBenchError(
                f"run {key}: trainer.num_nodes={cfg.trainer.num_nodes} does not run under Ray (a run is one actor on "
                "one node): run it with Lightning under SLURM (creditbench slurm) or torchrun, or set "
                "trainer.num_nodes: 1"
            )
        need = needs(cfg, gpus)
        if not any(n["cpus"] >= need.cpus and n["gpus"] >= need.gpus for n in live):
            most = f"{max(n['cpus'] for n in live)} CPU, {max(n['gpus'] for n in live)} GPU"
            raise CreditBenchError(
                f"run {key} needs {need.text()} on one node; the Ray cluster {where} has at most {most} a node: "
                "add such nodes, or lower threads / trainer.devices (trainer.accelerator: cpu for CPU runs)"
            )


def slots(runs: list[Any], live: list[dict[str, Any]], jobs: int | None) -> int:
    """How many runs at once: ``jobs``, else as many actors of the largest run as the nodes hold."""
    gpus = sum(n["gpus"] for n in live)
    need = max((needs(cfg, gpus) for cfg in runs), key=lambda n: (n.gpus, n.cpus), default=Needs(1, 0))
    fit = sum(min(n["cpus"] // need.cpus, n["gpus"] // need.gpus if need.gpus else n["cpus"]) for n in live)
    return jobs or max(1, fit)


@contextlib.contextmanager
def _token(what: str, folder: Path):
    path = folder / f".creditbench-visible-{uuid.uuid4().hex}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(path.name)
    except OSError as e:
        raise CreditBenchError(
            f"{what} {folder} cannot be written ({e.strerror or e}): give a writable folder"
        ) from None
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _sees(cwd: str, paths: list[str]) -> list[str]:
    """On a node: which of ``paths`` (tokens the driver wrote) it cannot read as the driver wrote them."""
    missing = [] if os.path.isdir(cwd) else [cwd]
    for p in paths:
        try:
            if Path(cwd, p).read_text() != Path(p).name:
                missing.append(p)
        except OSError:
            missing.append(p)
    return missing


def check_shared(folders: dict[str, Path], live: list[dict[str, Any]]) -> None:
    """Every node sees the driver's working directory and ``folders`` (what they are for, folder):
    a token written here is read back by a task pinned to each node; a node that cannot is named."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cwd = os.getcwd()
    with contextlib.ExitStack() as stack:
        tokens = {what: stack.enter_context(_token(what, Path(folder))) for what, folder in folders.items()}
        probe = ray.remote(num_cpus=0, max_retries=0)(_sees)
        refs = {
            n["ip"] + f" ({n['id'][:8]})": probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["id"], soft=False)
            ).remote(cwd, [str(p) for p in tokens.values()])
            for n in live
        }
        for node, ref in refs.items():
            missing = ray.get(ref, timeout=120)
            if missing:
                what = [w for w, p in tokens.items() if str(p) in missing] or ["the working directory"]
                shown = ", ".join(f"{w} ({folders.get(w, cwd)})" for w in what)
                raise CreditBenchError(
                    f"Ray node {node} cannot see {shown} as this machine does: put the checkout, results and "
                    "checkpoint.dir on a filesystem every node mounts"
                )
