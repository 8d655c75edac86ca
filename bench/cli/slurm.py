"""``creditbench slurm SPEC``: an sbatch script that starts a Ray cluster across a SLURM allocation and
runs the sweep on it (bench/sweep/slurm.py; docs/cluster.md). ``creditbench slurm wait ADDRESS NODES
TIMEOUT_S`` is the script's own wait until every node has joined the Ray cluster."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser
from bench.sweep import slurm

USAGE = "slurm SPEC.yaml [--nodes N --gpus_per_node G --time T --uri URI] | wait ADDRESS NODES TIMEOUT_S"
HELP = "sbatch script that runs a sweep on a Ray cluster across a SLURM allocation"


def main(argv: list[str]) -> int:
    """Print the sbatch script, or write it to --output; with ``wait``, wait for the nodes."""
    if argv[:1] == ["wait"]:
        return wait(argv[1:])
    ap = ArgumentParser(
        prog="creditbench slurm",
        description="Write an sbatch script that starts a Ray cluster across a SLURM allocation and runs the "
        "sweep on it (creditbench sweep SPEC --ray); submit it with sbatch. See docs/cluster.md.",
    )
    ap.add_argument("spec", help="sweep YAML (see results/sweeps/)")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus_per_node", type=int, default=0, help="GPUs per node (0: a CPU sweep)")
    ap.add_argument("--cpus_per_node", type=int, default=8, help="CPUs per node Ray may use")
    ap.add_argument("--time", default="04:00:00", help="time limit [D-]HH:MM:SS; the job requeues itself at it")
    ap.add_argument("--partition", default=None)
    ap.add_argument("--account", default=None)
    ap.add_argument("--mem", default=None, help="memory per node, as sbatch takes it (e.g. 64G)")
    ap.add_argument("--uri", default=None, help="MLflow tracking server (http://...); default $MLFLOW_TRACKING_URI")
    ap.add_argument("--jobs", type=int, default=None, help="runs at a time (default: the sweep's own)")
    ap.add_argument("--results_dir", default="results")
    ap.add_argument("--checkpoint_dir", default=None, help="run checkpoints on the shared filesystem")
    ap.add_argument("--sbatch", action="append", default=[], help="another #SBATCH option (repeatable)")
    ap.add_argument("--output", default=None, help="write the script here instead of printing it")
    a = ap.parse_args(argv)
    script = slurm.render(
        a.spec,
        a.nodes,
        a.gpus_per_node,
        a.cpus_per_node,
        a.time,
        partition=a.partition,
        account=a.account,
        mem=a.mem,
        uri=a.uri,
        jobs=a.jobs,
        results_dir=a.results_dir,
        checkpoint_dir=a.checkpoint_dir,
        extra_sbatch=a.sbatch,
    )
    if a.output is None:
        print(script, end="")
        return 0
    Path(a.output).write_text(script)
    (slurm.ROOT / "logs").mkdir(exist_ok=True)  # sbatch does not create the folder of --output
    print(f"wrote {a.output}; submit it with: sbatch {a.output}")
    return 0


def wait(argv: list[str]) -> int:
    """``creditbench slurm wait ADDRESS NODES TIMEOUT_S``: until the Ray cluster at ADDRESS has NODES
    live nodes (:func:`bench.sweep.slurm.wait_nodes`); exit status 1 if it has not after TIMEOUT_S."""
    if len(argv) != 3:
        raise CreditBenchError("usage: creditbench slurm wait ADDRESS NODES TIMEOUT_S")
    try:
        n = slurm.wait_nodes(argv[0], int(argv[1]), float(argv[2]))
    except CreditBenchError as e:
        print(f"creditbench slurm: error: {e}", file=sys.stderr)
        return 1
    print(f"creditbench slurm: {n} Ray node(s) up at {argv[0]}")
    return 0
