"""A sweep on a SLURM allocation: an sbatch script that starts a Ray cluster across the allocated
nodes and runs ``creditbench sweep SPEC --ray HEAD:PORT`` on it.

    creditbench slurm results/sweeps/embedded.yaml --nodes 4 --gpus_per_node 1 --cpus_per_node 16 \\
        --time 12:00:00 --uri http://tracking-server:5000 --output embedded.sbatch
    sbatch embedded.sbatch

The script (see :func:`render`): ``#SBATCH`` lines (one task per node, ``--requeue``, USR1 ahead of
the time limit); the project's environment (``source bench/bootstrap.sh`` in the repository, which
must be on a filesystem every node shares, as must ``checkpoint.dir`` and the results); the Ray head
on the allocation's first node and one Ray worker on every other node (``srun ... ray start
--block``, each with the task's CPUs and the node's GPUs); a wait until every node has joined; then
the sweep, whose driver runs in the batch step on the head node and places every run in a Ray actor.

Why Ray on SLURM rather than a submitit job array (one SLURM job per run):

- one engine: the fault handling, resume and resource checks are those of ``--ray`` anywhere else
  (a workstation, a cloud cluster), not a second implementation with its own failure modes;
- a sweep is hundreds of short runs (the embedded ones take 30 s to 2 min): a job per run would spend
  more time queued and importing torch than training, while an actor imports once and takes run
  after run;
- a lost node's runs are rescheduled inside the allocation, and an allocation that reaches its time
  limit stops cleanly and requeues itself: SLURM sends the batch shell USR1 two minutes ahead
  (``--signal=B:USR1@120``); the script sends the sweep SIGINT (the sweep marks its unfinished runs
  killed and exits), stops Ray and runs ``scontrol requeue``. The requeued job runs the same command,
  which skips finished runs and resumes unfinished ones from their checkpoints.

A job array is the better fit when each run takes many hours and deserves its own allocation (and
its own place in the queue). A single run across several nodes (``trainer.num_nodes > 1``) is not a
sweep of this template's kind: it goes through Lightning's own SLURM launcher (``srun`` with
``--ntasks-per-node`` equal to ``trainer.devices``), and is refused here.

For a dry run the script takes the sweep command from ``$CREDITBENCH_SLURM_SWEEP_CMD`` (default
``creditbench sweep``) and the wait for the nodes from ``$CREDITBENCH_SLURM_WAIT_CMD`` (default
``creditbench slurm wait``, i.e. :func:`wait_nodes`); ``$CREDITBENCH_RAY_PORT`` overrides the
head's port (by default one of 20000-29995 chosen by the job id, so that two jobs sharing a node do
not collide; the dashboard, client server and dashboard agent take the next three ports).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from bench.errors import CreditBenchError

ROOT = Path(__file__).resolve().parents[2]
"""The repository the script runs in (it must be on a filesystem every node shares)."""
DEFAULT_ENV = "source bench/bootstrap.sh"
SIGNAL_S = 120
"""Seconds before the time limit at which SLURM sends USR1: the sweep stops, the job requeues."""
WAIT_S = 600
"""Seconds the script waits for the Ray head, then for every node, before it gives up."""
TIME = re.compile(r"^(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)$")

BODY = r"""
# The allocation's nodes: the first runs Ray's head and the sweep's driver, every other one a worker.
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [ "${#nodes[@]}" -eq 0 ]; then
  echo "creditbench slurm: scontrol listed no hosts for SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST" >&2
  exit 1
fi
head="${nodes[0]}"
head_ip="$(srun --nodes=1 --ntasks=1 -w "$head" hostname --ip-address | tr ' ' '\n' \
  | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$' || true)"
if [ -z "$head_ip" ]; then
  echo "creditbench slurm: no IPv4 address for the head node $head" >&2
  exit 1
fi
port="${CREDITBENCH_RAY_PORT:-$((20000 + SLURM_JOB_ID % 2000 * 5))}"
address="$head_ip:$port"
cpus="${SLURM_CPUS_PER_TASK:-$cpus_per_node}"
read -r -a sweep_cmd <<< "${CREDITBENCH_SLURM_SWEEP_CMD:-creditbench sweep}"
read -r -a wait_cmd <<< "${CREDITBENCH_SLURM_WAIT_CMD:-creditbench slurm wait}"

ray_stopped=0
stop_ray() {  # once, on every way out: Ray on every node, then the srun steps that held it
  [ "$ray_stopped" = 1 ] && return 0
  ray_stopped=1
  srun --overlap --nodes="${#nodes[@]}" --ntasks="${#nodes[@]}" --ntasks-per-node=1 ray stop >/dev/null 2>&1 || true
  mapfile -t steps < <(jobs -p)
  if [ "${#steps[@]}" -gt 0 ]; then
    kill "${steps[@]}" 2>/dev/null || true
  fi
  wait || true
}
trap stop_ray EXIT

requeue=0
sweep_pid=""
on_usr1() {  # the time limit is near: stop the sweep as Ctrl-C would; the requeued job resumes it
  echo "creditbench slurm: time limit near: stopping the sweep, then requeueing job $SLURM_JOB_ID" >&2
  requeue=1
  if [ -n "$sweep_pid" ]; then
    kill -INT -- "-$sweep_pid" 2>/dev/null || kill -INT "$sweep_pid" 2>/dev/null || true
  fi
}
trap on_usr1 USR1

echo "creditbench slurm: Ray head on $head at $address; ${#nodes[@]} nodes, $cpus CPUs and $gpus_per_node GPUs each"
srun --nodes=1 --ntasks=1 -w "$head" \
  ray start --head --node-ip-address="$head_ip" --port="$port" --dashboard-port="$((port + 1))" \
  --ray-client-server-port="$((port + 2))" --dashboard-agent-listen-port="$((port + 3))" \
  --num-cpus="$cpus" --num-gpus="$gpus_per_node" --disable-usage-stats --block &
"${wait_cmd[@]}" "$address" 1 "$wait_s"
for node in "${nodes[@]:1}"; do
  srun --nodes=1 --ntasks=1 -w "$node" \
    ray start --address="$address" --dashboard-agent-listen-port="$((port + 3))" \
    --num-cpus="$cpus" --num-gpus="$gpus_per_node" --disable-usage-stats --block &
done
"${wait_cmd[@]}" "$address" "${#nodes[@]}" "$wait_s"

status=0
if [ "$requeue" = 0 ]; then
  set -m  # the sweep in a process group of its own: background jobs of a script otherwise ignore SIGINT
  "${sweep_cmd[@]}" "$spec" --ray "$address" --uri "$uri" "${sweep_args[@]}" &
  sweep_pid=$!
  set +m
  if [ "$requeue" = 1 ]; then  # USR1 came before the sweep's pid was known: stop it now
    kill -INT -- "-$sweep_pid" 2>/dev/null || kill -INT "$sweep_pid" 2>/dev/null || true
  fi
  wait "$sweep_pid" || status=$?
  while kill -0 "$sweep_pid" 2>/dev/null; do  # USR1 interrupted the wait: the sweep is still stopping
    status=0
    wait "$sweep_pid" || status=$?
  done
fi
stop_ray
if [ "$requeue" = 1 ]; then
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
fi
exit "$status"
"""


def seconds(limit: str) -> int:
    """A SLURM time limit ``[D-]HH:MM:SS`` in seconds; anything else is refused in one line."""
    m = TIME.match(limit)
    if m is None:
        raise CreditBenchError(f"--time must be HH:MM:SS or D-HH:MM:SS (e.g. 04:00:00), got {limit!r}")
    days, h, mins, s = (int(x or 0) for x in m.groups())
    return ((days * 24 + h) * 60 + mins) * 60 + s


def check_args(nodes: int, gpus_per_node: int, cpus_per_node: int, limit: str, uri: str, jobs: int | None) -> None:
    """One clear line for each argument that cannot make a working job, before the spec is read."""
    if nodes < 1:
        raise CreditBenchError(f"--nodes must be >= 1, got {nodes}")
    if gpus_per_node < 0:
        raise CreditBenchError(f"--gpus_per_node must be >= 0, got {gpus_per_node}")
    if cpus_per_node < 1:
        raise CreditBenchError(f"--cpus_per_node must be >= 1, got {cpus_per_node}")
    if jobs is not None and jobs < 1:
        raise CreditBenchError(f"--jobs must be >= 1, got {jobs}")
    if seconds(limit) <= SIGNAL_S + 60:
        raise CreditBenchError(f"--time {limit} leaves no time to run: the job is told to stop {SIGNAL_S} s before it")
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
    if nodes > 1 and local:
        raise CreditBenchError(
            f"--uri {uri} is a local store, which the {nodes} nodes cannot share (SQLite and file stores live on "
            "one machine): start a tracking server with `creditbench server` and give its http URI with --uri"
        )


def check_runs(sweep, gpus_per_node: int, cpus_per_node: int) -> None:
    """Refuse a run no node of the allocation could take (Ray would wait for it forever), and a
    multi-node run (Lightning's SLURM launcher runs those, not a Ray actor): the Ray engine's own
    check (bench.sweep.ray_cluster.check_runs), against nodes of the allocation's size."""
    import dataclasses

    from bench.sweep.ray_cluster import check_runs as check

    node = {"id": "", "ip": "", "cpus": cpus_per_node, "gpus": gpus_per_node}
    runs = [(r.key, dataclasses.replace(r.cfg, threads=sweep.spec.threads or r.cfg.threads)) for r in sweep.runs]
    check(runs, [node], f"of {cpus_per_node} CPUs and {gpus_per_node} GPUs a node (--cpus_per_node, --gpus_per_node)")


def render(
    spec: str | Path,
    nodes: int,
    gpus_per_node: int,
    cpus_per_node: int,
    time: str,
    partition: str | None = None,
    account: str | None = None,
    mem: str | None = None,
    uri: str | None = None,
    jobs: int | None = None,
    results_dir: str = "results",
    checkpoint_dir: str | None = None,
    extra_sbatch: Sequence[str] = (),
    python_env: str = DEFAULT_ENV,
    root: str | Path | None = None,
) -> str:
    """The sbatch script that runs the sweep ``spec`` on a Ray cluster over ``nodes`` nodes (see the
    module docstring). Everything is checked first (the arguments, then the spec with every check
    ``creditbench sweep --dry_run`` makes of its runs), so a bad input stops with one line and no
    file. ``uri`` defaults to $MLFLOW_TRACKING_URI (else the local SQLite store, refused for more than
    one node); ``checkpoint_dir`` is exported as $CREDITBENCH_CHECKPOINTS (the runs' checkpoint.dir
    unless the spec sets it); ``python_env`` is the shell line that activates the environment in the
    repository ``root`` (default: this package's repository)."""
    from bench.config import default_uri
    from bench.sweep.sweep import load_spec

    uri = uri or default_uri()
    check_args(nodes, gpus_per_node, cpus_per_node, time, uri, jobs)
    sweep = load_spec(spec, results_dir)
    check_runs(sweep, gpus_per_node, cpus_per_node)
    root = Path(root or ROOT).resolve()
    spec_path = Path(spec).resolve()
    if spec_path.is_relative_to(root):
        spec_path = spec_path.relative_to(root)
    sbatch = [
        f"--job-name=creditbench-{sweep.name}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus_per_node}",
        f"--time={time}",
        "--requeue",
        f"--signal=B:USR1@{SIGNAL_S}",
        f"--output={root}/logs/%x-%j.out",
        "--open-mode=append",  # a requeued job's log continues the first attempt's
    ]
    sbatch += [f"--gpus-per-node={gpus_per_node}"] * (gpus_per_node > 0)
    sbatch += [f"--{k}={v}" for k, v in (("partition", partition), ("account", account), ("mem", mem)) if v]
    sbatch += [s if s.startswith("-") else f"--{s}" for s in extra_sbatch]
    sweep_args = ["--results_dir", results_dir] + (["--jobs", str(jobs)] if jobs else [])
    q = shlex.quote
    lines = ["#!/bin/bash", *(f"#SBATCH {q(s)}" for s in sbatch)]
    lines += [
        f"# creditbench sweep {spec_path} on a Ray cluster over {nodes} node(s); submit with: sbatch FILE",
        "set -euo pipefail",
        f"cd {q(str(root))}",
        python_env,
        f"spec={q(str(spec_path))}",
        f"uri={q(uri)}",
        f"cpus_per_node={cpus_per_node}",
        f"gpus_per_node={gpus_per_node}",
        f"wait_s={WAIT_S}",
        f"sweep_args=({' '.join(map(q, sweep_args))})",
        "export RAY_worker_niceness=\"${RAY_worker_niceness:-0}\"  # the runs are the nodes' work (Ray's default: 15)",
    ]
    if checkpoint_dir:
        lines.append(f"export CREDITBENCH_CHECKPOINTS={q(checkpoint_dir)}")
    return "\n".join(lines) + "\n" + BODY


def wait_nodes(address: str, nodes: int, timeout_s: float, poll_s: float = 5.0) -> int:
    """Wait until the Ray cluster at ``address`` has ``nodes`` live nodes (the head may not be up
    yet: connecting is retried too); their number, or a one-line error after ``timeout_s``."""
    import ray

    deadline = time.monotonic() + timeout_s
    alive, why = 0, "no answer"
    while True:
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            try:
                alive = sum(1 for n in ray.nodes() if n.get("Alive"))
            finally:
                ray.shutdown()
            why = f"{alive} joined"
        except ConnectionError as e:
            why = f"no answer ({e})"
        if alive >= nodes:
            return alive
        if time.monotonic() + poll_s > deadline:
            raise CreditBenchError(
                f"the Ray cluster at {address} has not got {nodes} nodes after {timeout_s:.0f} s ({why}); "
                "see the ray start lines in the job's log"
            )
        time.sleep(poll_s)
