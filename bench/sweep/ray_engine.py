"""Ray as the sweep engine: ``creditbench sweep SPEC --ray [ADDRESS]`` (or ``$RAY_ADDRESS``) runs the
sweep's runs on a Ray cluster instead of this machine's worker processes (:mod:`bench.sweep.worker`).

    ray start --head --port 6379                    # on the head node; `ray start --address ...` on the others
    creditbench server                              # a tracking store every node reaches (bench.tracking.server)
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
  folder the driver sees; a node that cannot is named in one line (:mod:`bench.sweep.ray_cluster`,
  with the other checks made before a sweep starts).
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
import threading
from pathlib import Path
from typing import Any, NamedTuple

from bench.sweep.ray_cluster import Needs, needs, nodes

MAX_ATTEMPTS = 3
"""Attempts of a run whose node leaves the cluster (each resumes from the last checkpoint)."""
ENV_PREFIXES = ("CREDITBENCH_", "HF_", "MLFLOW_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "PYTHONHASHSEED")
"""The driver's environment variables every actor gets (the rest is the node's own)."""


class RunLost(Exception):
    """The run's node left the cluster while it ran: run it again elsewhere (it resumes)."""


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


class _Slot(NamedTuple):
    """A job slot's actor, the resources it was started with and the node it runs on."""

    actor: Any
    need: Needs
    node: str


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
        self._free: list[_Slot | None] = [None] * jobs  # None: a slot with no actor yet
        self._busy: set[Any] = set()
        self._cond = threading.Condition()
        self.startup_s: list[float] = []
        self.stopped = False

    def _actor(self, slot: _Slot | None, need: Needs) -> _Slot:
        """``slot`` when its actor holds ``need``, else a fresh actor started for it (the old one ended)."""
        import ray

        if slot is not None and slot.need == need:
            return slot
        if slot is not None:
            ray.kill(slot.actor)
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}  # the driver's, over the node's
        actor = self._remote.options(num_cpus=need.cpus, num_gpus=need.gpus).remote(os.getcwd(), env)
        with self._cond:  # busy while it starts: an interrupted sweep's stop() kills it too
            self._busy.add(actor)
            stopped = self.stopped
        if stopped:  # stop() ran before it was busy
            ray.kill(actor)
        ready = actor.ready.remote()
        while not ray.wait([ready], timeout=2.0)[0]:  # not placed yet: free what idle actors hold
            self._drop_idle()
        try:
            node, startup = ray.get(ready)
        except ray.exceptions.RayActorError as e:
            raise _Dead(actor, None, e) from None
        self.startup_s.append(startup)
        return _Slot(actor, need, node)

    def warm(self, cfgs: list) -> None:
        """Nothing to start ahead: a slot's actor starts with its first run's resources."""

    def run(self, cfg, config: Path, log: Path) -> int:
        """Run ``config`` in a free slot's actor (one started for ``cfg``'s resources when the slot's
        actor holds others); its exit status."""
        import ray

        need = needs(cfg, self._gpus)
        slot = self._take(need)
        try:
            slot = self._actor(slot, need)
            with self._cond:
                self._busy.add(slot.actor)
                stopped = self.stopped
            if stopped:  # interrupted while its actor started: the run does not begin
                return 1
            ref = slot.actor.run.remote(str(config), str(log), cfg.trainer.world_size > 1)
            try:
                return ray.get(ref)
            except ray.exceptions.RayActorError as e:
                raise _Dead(slot.actor, slot.node, e) from None
        except _Dead as dead:
            slot = None  # its actor is dead: the slot goes back without one
            return self._died(dead, log)
        finally:
            self._give_back(slot)

    def _take(self, need: Needs) -> _Slot | None:
        """A free slot, once there is one: an idle actor that holds ``need``, else the last freed slot."""
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            fits = [i for i, slot in enumerate(self._free) if slot is not None and slot.need == need]
            return self._free.pop(fits[-1] if fits else -1)

    def _give_back(self, slot: _Slot | None) -> None:
        """``slot`` free again (None: a slot with no actor), waking a run that waits for one."""
        with self._cond:
            if slot is not None:
                self._busy.discard(slot.actor)
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
            actor = self._free[idle[0]].actor
            self._free[idle[0]] = None
        ray.kill(actor)

    def stop(self) -> None:
        """Kill every actor now (an interrupted sweep): their runs end where they are."""
        import ray

        self.stopped = True
        with self._cond:
            actors = [s.actor for s in self._free if s is not None] + list(self._busy)
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)

    def close(self) -> None:
        import ray

        self.stop()
        if self._started:
            ray.shutdown()
