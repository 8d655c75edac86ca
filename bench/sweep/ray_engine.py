"""Ray as the sweep engine: ``creditbench sweep SPEC --ray [ADDRESS]`` (or ``$RAY_ADDRESS``) runs the
sweep's runs on a Ray cluster instead of this machine's worker processes (:mod:`bench.sweep.worker`).

    ray start --head --port 6379                    # on the head node; `ray start --address ...` on the others
    creditbench server                              # a tracking store every node reaches (bench.sweep.server)
    creditbench sweep SPEC --ray HEAD:6379 --uri http://HEAD:5000

What runs where:

- Each job slot is a long-lived Ray actor that imports everything once and runs sweep run after sweep
  run in its process, putting back the process state a run changes between runs
  (:func:`bench.sweep.worker.run_one`, the same code a local worker runs: the same numbers). A run that
  starts processes of its own (``trainer.devices > 1``) gets a ``creditbench train`` process inside
  its actor, on that actor's node.
- An actor asks for the run's resources: ``threads`` CPUs and, where the run trains on GPUs
  (``trainer.accelerator: gpu``, or ``auto`` on a cluster that has GPUs), ``trainer.devices`` GPUs,
  all on one node. A run across nodes (``trainer.num_nodes > 1``) is refused in one line: Ray Train's
  Lightning integration (``RayDDPStrategy``/``RayFSDPStrategy``, beta) replaces Lightning's own
  launcher and environment, has no strategy for FSDP2 (what ``trainer.strategy: fsdp`` uses), and
  would give such runs another code path than every other run; Lightning runs across nodes under
  SLURM (``creditbench slurm``) or torchrun.
- The actors run in the driver's working directory (the checkout, on a filesystem every node
  mounts), with the driver's ``CREDITBENCH_*``, ``HF_*``, ``MLFLOW_*`` and thread variables. Before
  anything starts, a probe on every node checks that it sees the results folder and the checkpoint
  folder the driver sees; a node that cannot is named in one line.
- Results, logs and statuses come back to the driver; each run is still its own MLflow run under the
  sweep's parent run, so a tracking store every node reaches is needed (an http URI of a tracking
  server; a SQLite file only on a one-node cluster).

Faults: a run whose node leaves the cluster (the actor died with its node) raises :class:`RunLost`;
the sweep runs it again on another node, where it resumes from its last checkpoint
(``checkpoint.every``), at most :data:`MAX_ATTEMPTS` times. A run that fails by itself (an
exception, or an actor dying on a node that is still alive) is reported failed and not retried.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

MAX_ATTEMPTS = 3
"""Attempts of a run whose node leaves the cluster (each resumes from the last checkpoint)."""
ENV_PREFIXES = ("CREDITBENCH_", "HF_", "MLFLOW_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "PYTHONHASHSEED")
"""The driver's environment variables every actor gets (the rest is the node's own)."""
CONNECT_TIMEOUT_S = 5.0


class RunLost(Exception):
    """The run's node left the cluster while it ran: run it again elsewhere (it resumes)."""


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


class SweepActor:
    """One job slot on the cluster (wrapped by ``ray.remote`` when the engine starts): imports once,
    then runs sweep runs one after another in its process (see the module docstring)."""

    def __init__(self, cwd: str, env: dict[str, str]) -> None:
        import time

        t0 = time.perf_counter()
        os.chdir(cwd)
        os.environ.update(env)
        from bench.sweep.worker import preload

        preload()
        self.startup_s = time.perf_counter() - t0

    def ready(self) -> tuple[str, float]:
        import ray

        return ray.get_runtime_context().get_node_id(), self.startup_s

    def run(self, config: str, log: str, alone: bool) -> int:
        from bench.sweep.worker import Isolated, run_one

        if alone:  # its launcher starts its other processes by re-running this command: a process of its own
            return Isolated(dict(os.environ)).run(Path(config), Path(log))
        return run_one(config, log)


class _Dead(Exception):
    def __init__(self, actor, node: str | None, error: Exception) -> None:
        self.actor, self.node, self.error = actor, node, error


def _node_left(node: str, message: str, wait_s: float = 60.0) -> bool:
    """Whether ``node`` left the cluster: Ray says so in the actor's death, or marks the node dead
    within ``wait_s`` (its health checks take some seconds to notice a lost node)."""
    import time

    if "node has died" in message or "node died" in message.lower():
        return True
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not any(n["id"] == node for n in nodes()):
            return True
        time.sleep(1.0)
    return False


class RayEngine:
    """The sweep's engine on a Ray cluster (:class:`bench.sweep.launch.LocalEngine`'s interface):
    ``run`` takes a free slot's actor (started, or restarted with other resources, as needed), runs
    one config in it and gives the slot back."""

    def __init__(self, jobs: int, started: bool, cluster_gpus: int) -> None:
        import ray

        self._remote = ray.remote(max_restarts=0, max_concurrency=2)(SweepActor)
        self._started, self._gpus = started, cluster_gpus
        self._free: list[tuple[Any, Needs, str] | None] = [None] * jobs
        self._busy: set[Any] = set()
        self._cond = threading.Condition()
        self.startup_s: list[float] = []
        self.stopped = False

    def _actor(self, slot, need: Needs):
        import ray

        if slot is not None and slot[1] == need:
            return slot
        if slot is not None:
            ray.kill(slot[0])
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}  # the driver's, over the node's
        actor = self._remote.options(num_cpus=need.cpus, num_gpus=need.gpus).remote(os.getcwd(), env)
        ready = actor.ready.remote()
        while not ray.wait([ready], timeout=2.0)[0]:  # not placed yet: free what idle actors hold
            self._drop_idle()
        try:
            node, startup = ray.get(ready)
        except ray.exceptions.RayActorError as e:
            raise _Dead(actor, None, e) from None
        self.startup_s.append(startup)
        return actor, need, node

    def run(self, cfg, config: Path, log: Path) -> int:
        import ray

        need = needs(cfg, self._gpus)
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            fits = [i for i, slot in enumerate(self._free) if slot is not None and slot[1] == need]
            slot = self._free.pop(fits[-1] if fits else -1)  # an idle actor that fits, else a fresh one
        try:
            slot = self._actor(slot, need)
            with self._cond:
                self._busy.add(slot[0])
            ref = slot[0].run.remote(str(config), str(log), cfg.trainer.world_size > 1)
            try:
                return ray.get(ref)
            except ray.exceptions.RayActorError as e:
                raise _Dead(slot[0], slot[2], e) from None
        except _Dead as dead:
            slot = None
            return self._died(dead, log)
        finally:
            with self._cond:
                self._busy.difference_update(a for a in [slot and slot[0]] if a is not None)
                self._free.append(slot)
                self._cond.notify()

    def _died(self, dead: _Dead, log: Path) -> int:
        """A dead actor: its node left (the run is lost, to be run again) or the run or its start killed
        it on a live node (failed, with why in its log)."""
        with self._cond:
            self._busy.discard(dead.actor)
        if self.stopped:
            return 1
        if dead.node is not None and _node_left(dead.node, str(dead.error)):
            raise RunLost(dead.node)
        first = str(dead.error).strip().splitlines()
        with open(log, "a") as fh:
            fh.write(
                f"\nsweep worker (Ray actor) died on a live node ({first[0] if first else 'no reason given'}); "
                "a fresh actor takes the next run\n"
            )
        return 1

    def _drop_idle(self) -> None:
        """End one idle actor, keeping its slot: a new actor waits for the resources it holds (after a
        node left, the cluster may hold fewer actors than there are slots)."""
        import ray

        with self._cond:
            idle = [i for i, slot in enumerate(self._free) if slot is not None]
            if not idle:
                return
            actor = self._free[idle[0]][0]
            self._free[idle[0]] = None
        ray.kill(actor)

    def stop(self) -> None:
        """Kill every actor now (an interrupted sweep): their runs end where they are."""
        import ray

        self.stopped = True
        with self._cond:
            actors = [s[0] for s in self._free if s is not None] + list(self._busy)
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)

    def close(self) -> None:
        import ray

        self.stop()
        if self._started:
            ray.shutdown()
