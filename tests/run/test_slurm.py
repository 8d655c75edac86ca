"""creditbench slurm: the rendered sbatch script, checked by bash and executed against stub srun,
scontrol, ray, hostname and sweep commands on a pretend 3-node allocation (no SLURM, no Ray)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli.slurm import main as slurm_command
from bench.errors import CreditBenchError
from bench.sweep import slurm

ROOT = Path(__file__).resolve().parents[2]
SPEC = "results/sweeps/embedded-quick.yaml"
URI = "http://tracking-server:5000"
HOSTS = ["node-a", "node-b", "node-c"]

# Each stub appends "<name> <args>" to $CALLS. srun drops its own options and runs the command after them.
STUBS = {
    "srun": """
echo "srun $*" >> "$CALLS"
while [ $# -gt 0 ]; do
  case "$1" in -w|-N|-n) shift 2 ;; -*) shift ;; *) break ;; esac
done
exec "$@"
""",
    "scontrol": """
echo "scontrol $*" >> "$CALLS"
if [ "$1 $2" = "show hostnames" ]; then printf '%s\\n' node-a node-b node-c; fi
""",
    "ray": 'echo "ray $*" >> "$CALLS"',
    "hostname": 'echo "10.1.2.3 fe80::1"',
    # as `creditbench slurm wait` does: return once $2 nodes have started Ray (here: once the stub ray has
    # logged $2 starts), so the background `srun ray start` steps are never killed before they ran
    "waitnodes": """
echo "wait $*" >> "$CALLS"
for _ in $(seq 600); do
  [ "$(grep -c '^ray start' "$CALLS")" -ge "$2" ] && exit 0
  sleep 0.05
done
exit 1
""",
    "sweep": 'echo "sweep $*" >> "$CALLS"',
    # a sweep that runs until SIGINT, as a long sweep does when the time limit nears
    "longsweep": """
trap 'echo "longsweep SIGINT" >> "$CALLS"; exit 130' INT
echo "longsweep $*" >> "$CALLS"
while true; do sleep 0.05; done
""",
}


@pytest.fixture(scope="module")
def script() -> str:
    return slurm.render(
        ROOT / SPEC, nodes=3, gpus_per_node=2, cpus_per_node=8, time="02:00:00", partition="gpu", account="rl lab",
        uri=URI, jobs=6, checkpoint_dir="/shared/ckpt dir", extra_sbatch=["--exclusive"], python_env="true", root=ROOT,
    )  # fmt: skip


def _stubs(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body.lstrip())
        (bin_dir / name).chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS": str(tmp_path / "calls.txt"),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node-[a-c]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_CPUS_PER_TASK": "8",
        "CREDITBENCH_SLURM_SWEEP_CMD": "sweep",
        "CREDITBENCH_SLURM_WAIT_CMD": "waitnodes",
    }


def _calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.txt").read_text().splitlines()


def test_bash_accepts_it_and_its_sbatch_lines(script, tmp_path):
    f = tmp_path / "job.sbatch"
    f.write_text(script)
    assert subprocess.run(["bash", "-n", str(f)], capture_output=True).returncode == 0
    sbatch = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")]
    for want in (
        "--job-name=creditbench-embedded-quick",
        "--nodes=3",
        "--ntasks-per-node=1",
        "--gpus-per-node=2",
        "--cpus-per-task=8",
        "--time=02:00:00",
        "--requeue",
        f"--signal=B:USR1@{slurm.SIGNAL_S}",
        "--partition=gpu",
        "'--account=rl lab'",
        "--exclusive",
    ):
        assert want in sbatch, want
    assert any(s.startswith("--output=") for s in sbatch)
    assert not any(s.startswith("--mem") for s in sbatch)  # only when given
    assert f"spec={SPEC}" in script  # relative to the repository the script cds into
    assert "set -euo pipefail" in script and "export CREDITBENCH_CHECKPOINTS='/shared/ckpt dir'" in script
    # the nodes' `ray start` run the sweep's workers at niceness 0 unless the job's environment says otherwise
    assert 'export RAY_worker_niceness="${RAY_worker_niceness:-0}"' in script
    assert script.index("RAY_worker_niceness") < script.index("ray start --head")


def test_executes_on_a_three_node_allocation(script, tmp_path):
    env = _stubs(tmp_path)
    f = tmp_path / "job.sbatch"
    f.write_text(script)
    p = subprocess.run(["bash", str(f)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    calls = _calls(tmp_path)
    port = 20000 + 4242 % 2000 * 5
    address = f"10.1.2.3:{port}"
    heads = [c for c in calls if c.startswith("ray start --head")]
    assert len(heads) == 1 and f"--port={port}" in heads[0] and "--node-ip-address=10.1.2.3" in heads[0]
    assert "--num-cpus=8" in heads[0] and "--num-gpus=2" in heads[0] and "--block" in heads[0]
    assert any(c.startswith("srun --nodes=1 --ntasks=1 -w node-a ray start --head") for c in calls)
    workers = [c for c in calls if c.startswith("ray start --address")]
    assert len(workers) == 2 and all(f"--address={address}" in w for w in workers)
    for host in HOSTS[1:]:
        assert any(c.startswith(f"srun --nodes=1 --ntasks=1 -w {host} ray start --address={address}") for c in calls)
    assert f"wait {address} 1 {slurm.WAIT_S}" in calls and f"wait {address} 3 {slurm.WAIT_S}" in calls
    sweeps = [c for c in calls if c.startswith("sweep ")]
    assert sweeps == [f"sweep {SPEC} --ray {address} --uri {URI} --results_dir results --jobs 6"]
    assert calls.index(f"wait {address} 3 {slurm.WAIT_S}") < calls.index(sweeps[0])  # all nodes up first
    stops = [c for c in calls if c.endswith(" ray stop")]  # one task on every node, once
    assert stops == ["srun --overlap --nodes=3 --ntasks=3 --ntasks-per-node=1 ray stop"]
    assert not any(c.startswith("scontrol requeue") for c in calls)


def test_usr1_stops_the_sweep_with_sigint_and_requeues(script, tmp_path):
    env = {**_stubs(tmp_path), "CREDITBENCH_SLURM_SWEEP_CMD": "longsweep"}
    f = tmp_path / "job.sbatch"
    f.write_text(script)
    p = subprocess.Popen(
        ["bash", str(f)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a batch shell as SLURM starts it: SIGINT not ignored (a shell ignores it in its background jobs,
        # and a signal ignored on entry cannot be trapped)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "calls.txt").is_file() or not any(c.startswith("longsweep ") for c in _calls(tmp_path)):
            assert time.monotonic() < deadline and p.poll() is None, "the sweep never started"
            time.sleep(0.05)
        p.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@120 sends the batch shell
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    calls = _calls(tmp_path)
    assert "longsweep SIGINT" in calls and "scontrol requeue 4242" in calls
    assert calls.index("longsweep SIGINT") < calls.index("ray stop") < calls.index("scontrol requeue 4242")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"nodes": 0}, "--nodes must be >= 1, got 0"),
        ({"time": "90 minutes"}, "--time must be HH:MM:SS or D-HH:MM:SS"),
        ({"time": "00:02:00"}, "leaves no time to run"),
        ({"uri": "sqlite:///mlflow.db"}, "start a tracking server with `creditbench server`"),
        ({"gpus_per_node": -1}, "--gpus_per_node must be >= 0"),
        ({"jobs": 0}, "--jobs must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line(kwargs, message):
    args = {"nodes": 2, "gpus_per_node": 0, "cpus_per_node": 4, "time": "01:00:00", "uri": URI, **kwargs}
    with pytest.raises(CreditBenchError, match=message.replace("(", r"\(")) as e:
        slurm.render(ROOT / SPEC, **args)
    assert "\n" not in str(e.value)


def test_one_node_may_keep_a_local_store_and_a_days_limit():
    s = slurm.render(ROOT / SPEC, 1, 0, 4, "1-00:00:00", uri="sqlite:///mlflow.db", python_env="true")
    assert "--gpus-per-node" not in s and "--time=1-00:00:00" in s and "uri=sqlite:///mlflow.db" in s


def _spec(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of SPEC in tmp_path with one change (its base config still found)."""
    text = (ROOT / SPEC).read_text().replace("base: ../configs/", f"base: {ROOT}/results/configs/")
    assert old in text
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace(old, new))
    return spec


def test_runs_no_node_could_take_are_refused(tmp_path):
    spec = _spec(tmp_path, "threads: 1", "threads: 16")
    with pytest.raises(CreditBenchError, match="needs 16 CPU on one node; the Ray cluster of 8 CPUs"):
        slurm.render(spec, 2, 0, 8, "01:00:00", uri=URI)
    ddp = "overrides: {rl.minibatches: 2, trainer.strategy: ddp, "
    spec = _spec(tmp_path, "overrides: {rl.minibatches: 2}", ddp + "trainer.devices: 4}")
    with pytest.raises(
        CreditBenchError, match="needs 1 CPU and 4 GPU on one node; the Ray cluster of 8 CPUs and 2 GPUs"
    ):
        slurm.render(spec, 2, 2, 8, "01:00:00", uri=URI)
    spec = _spec(tmp_path, "overrides: {rl.minibatches: 2}", ddp + "trainer.num_nodes: 2}")
    with pytest.raises(CreditBenchError, match="trainer.num_nodes=2 does not run under Ray .* SLURM"):
        slurm.render(spec, 2, 2, 8, "01:00:00", uri=URI)


def test_a_bad_spec_fails_in_one_line_before_anything_is_written(tmp_path):
    spec = _spec(tmp_path, "methods: [grpo, s_trace]", "methods: [grpo, nosuch]")
    out = tmp_path / "job.sbatch"
    r = subprocess.run(
        [sys.executable, "-m", "bench.cli", "slurm", str(spec), "--uri", URI, "--output", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nosuch" in r.stderr
    assert not out.exists()


def test_the_command_writes_the_script(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(slurm, "ROOT", tmp_path)  # the repository the script would cd into
    out = tmp_path / "job.sbatch"
    assert slurm_command([str(ROOT / SPEC), "--nodes", "3", "--uri", URI, "--output", str(out)]) == 0
    assert out.read_text().startswith("#!/bin/bash\n#SBATCH --job-name=creditbench-embedded-quick")
    assert (tmp_path / "logs").is_dir() and f"sbatch {out}" in capsys.readouterr().out


class FakeRay:
    """ray's init/nodes/shutdown: the head answers from the second try, one more node each call after."""

    def __init__(self):
        self.tries = 0

    def init(self, address, **kwargs):
        self.tries += 1
        if self.tries == 1:
            raise ConnectionError(f"no GCS at {address}")

    def nodes(self):
        return [{"Alive": True}] * (self.tries - 1) + [{"Alive": False}]

    def shutdown(self):
        pass


def test_wait_nodes_retries_until_every_node_joined_or_gives_up(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", FakeRay())
    assert slurm.wait_nodes("10.1.2.3:21210", 3, timeout_s=5, poll_s=0.01) == 3
    monkeypatch.setitem(sys.modules, "ray", FakeRay())
    with pytest.raises(CreditBenchError, match=r"has not got 50 nodes after 0 s \(\d+ joined\)") as e:
        slurm.wait_nodes("10.1.2.3:21210", 50, timeout_s=0.05, poll_s=0.01)
    assert "\n" not in str(e.value)
