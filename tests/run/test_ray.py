"""Sweeps on a Ray cluster (bench.sweep.ray_engine) and a sweep stopped with Ctrl-C, on real multi-node Ray
clusters on this machine (ray.cluster_utils.Cluster: a head without CPUs and worker nodes of one CPU).

Fast (default suite): what no cluster can run is refused in one line before anything is written: an
unreachable address, a run that needs GPUs no node has, a node that cannot see the checkpoint folder
(a node started in a mount namespace of its own, where that folder is an empty tmpfs).

Slow (``-m slow``, about 4 minutes on 2 cores): a node removed mid-sweep (its run is run again on the
other node and resumes from its checkpoint; the report equals an uninterrupted sweep's, every (metric,
step) is logged once, the parent run and results stay consistent); the driver killed (the same command
resumes, finished runs skipped); Ctrl-C mid-run (pool) and while the actors start (Ray): one line, the
runs stopped within seconds and marked KILLED with the parent, and the same command resumes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tiny_sweep import SPEC

REPO = Path(__file__).resolve().parents[2]
# the test clusters' workers at niceness 0, as a cluster creditbench starts (bench.sweep.ray_cluster): at Ray's
# default 15 they get a few percent of a core beside the other pytest worker's tests
os.environ.setdefault("RAY_worker_niceness", "0")


def write_spec(tmp_path: Path, name: str, top: dict | None = None, **overrides) -> Path:
    spec = {**SPEC, "name": name, "seeds": [0], "overrides": {**SPEC["overrides"], **overrides}, **(top or {})}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory, warm_cache):
    root = tmp_path_factory.mktemp("ray-sweep")
    e = {**os.environ, "CREDITBENCH_CACHE": warm_cache, "CREDITBENCH_CHECKPOINTS": str(root / "checkpoints")}
    e.pop("RAY_ADDRESS", None)
    e["URI"], e["RESULTS"], e["ROOT"] = f"sqlite:///{root / 'mlflow.db'}", str(root / "results"), str(root)
    return e


def sweep_cmd(spec: Path, env: dict, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "bench.cli", "sweep", str(spec), "--results_dir", env["RESULTS"]]
    return [*cmd, "--uri", env["URI"], *extra]


def test_a_cluster_the_sweep_starts_runs_its_workers_at_niceness_0(monkeypatch):
    """Ray's workers start at niceness 15: a local cluster's, the sweep's runs, would yield to any other
    process. ``connect(None)`` starts one with RAY_worker_niceness=0 unless the environment sets it; joining a
    running cluster leaves it as that cluster was started."""
    import ray

    from bench.sweep import ray_cluster

    calls = []
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(os.environ.get("RAY_worker_niceness")))
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert ray_cluster.connect(None) and calls == ["0"]
    monkeypatch.setenv("RAY_worker_niceness", "5")
    ray_cluster.connect(None)
    assert calls[-1] == "5"


def make_cluster(nodes: int = 2):
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [c.add_node(num_cpus=1, include_dashboard=False) for _ in range(nodes)]
    return c, workers


@pytest.fixture(scope="module")
def cluster():
    c, workers = make_cluster(2)
    yield c
    c.shutdown()


def one_line_refusal(p: subprocess.CompletedProcess, message: str) -> None:
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stderr.strip().count("\n") == 0 and message in p.stderr, p.stderr[-2000:]


# ------------------------------------------------------------------ bad input: one line, nothing started
def test_an_unreachable_ray_address_is_one_line(tmp_path, env):
    spec = write_spec(tmp_path, "nowhere")
    p = subprocess.run(sweep_cmd(spec, env, "--ray", "127.0.0.1:9"), capture_output=True, text=True, cwd=REPO, env=env)
    one_line_refusal(p, "no Ray cluster at 127.0.0.1:9")
    assert not (Path(env["RESULTS"]) / "nowhere").exists()


def test_runs_no_node_can_take_are_refused_before_anything_is_written(tmp_path, env, cluster):
    gpu = write_spec(tmp_path, "gpu", **{"trainer.accelerator": "gpu"})
    p = subprocess.run(sweep_cmd(gpu, env, "--ray", cluster.address), capture_output=True, text=True, cwd=REPO, env=env)
    one_line_refusal(p, "needs 1 CPU and 1 GPU on one node; the Ray cluster at")
    many = write_spec(tmp_path, "threads", {"threads": 4})
    p = subprocess.run(
        sweep_cmd(many, env, "--ray", cluster.address), capture_output=True, text=True, cwd=REPO, env=env
    )
    one_line_refusal(p, "needs 4 CPU on one node")
    assert not (Path(env["RESULTS"]) / "gpu").exists() and not (Path(env["RESULTS"]) / "threads").exists()


def test_a_node_that_cannot_see_the_checkpoint_folder_is_named(tmp_path, env, cluster):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to start a Ray node in a mount namespace of its own")
    hidden = tmp_path / "checkpoints"
    hidden.mkdir()
    ray = Path(sys.executable).with_name("ray")
    node = f"mount -t tmpfs none {hidden} && exec {ray} start --address={cluster.address} --num-cpus=1 --block"
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", node], env=env)
    try:
        _wait_for_nodes(cluster.address, 3)
        spec = write_spec(tmp_path, "hidden")
        p = subprocess.run(
            sweep_cmd(spec, {**env, "CREDITBENCH_CHECKPOINTS": str(hidden)}, "--ray", cluster.address),
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**env, "CREDITBENCH_CHECKPOINTS": str(hidden)},
        )
        one_line_refusal(p, f"cannot see checkpoint.dir ({hidden}) as this machine does")
        assert not (Path(env["RESULTS"]) / "hidden").exists() and list(hidden.iterdir()) == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    _wait_for_nodes(cluster.address, 2)


def test_a_run_that_fails_by_itself_is_reported_failed_once_not_run_again(tmp_path, env, cluster):
    cache = tmp_path / "a-file"  # the runs' cache is a file: each run fails at its first write, on a live node
    cache.write_text("")
    e = {**env, "CREDITBENCH_CACHE": str(cache)}
    spec = write_spec(tmp_path, "broken")
    p = subprocess.run(sweep_cmd(spec, e, "--ray", cluster.address), capture_output=True, text=True, cwd=REPO, env=e)
    assert p.returncode != 0
    assert p.stdout.count(": FAILED (exit 1), see ") == 2 and "running it again" not in p.stdout, p.stdout[-2000:]
    assert p.stderr.strip().endswith("run the sweep again to redo them") and "2 of 2 runs failed" in p.stderr
    _, children, parents = _runs(env, "broken")
    assert len(children) <= 2 and all(r.info.status != "RUNNING" for r in children)
    assert [r.info.status for r in parents] == ["FAILED"]


def _wait_for_nodes(address: str, n: int, timeout: float = 90) -> None:
    """Until the cluster at ``address`` has ``n`` live nodes with CPUs (asked from a process of its own)."""
    probe = (
        "import ray,sys; ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR'); "
        "print(sum(1 for n in ray.nodes() if n['Alive'] and n['Resources'].get('CPU', 0) > 0))"
    )
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run([sys.executable, "-c", probe, address], capture_output=True, text=True).stdout.strip()
        if out.splitlines() and out.splitlines()[-1] == str(n):
            return
        time.sleep(1)
    raise AssertionError(f"the cluster did not reach {n} nodes")


# ------------------------------------------------------------------ faults (slow)
LONG = {"checkpoint.every": 1}  # a checkpoint every step: a lost or stopped run resumes close to where it was
LONG_TOP = {"budget": {"samples": 640}}  # 20 steps a run


def _comparable(report: dict) -> dict:
    """The report without what legitimately differs between two sweeps: run times."""
    rows = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if k != "wall_s"}} for r in report["rows"]]
    return {"rows": rows, "credit_maps": report["credit_maps"], "runs": report["runs"]}


def _report(env: dict, sweep: str) -> dict:
    return _comparable(json.loads((Path(env["RESULTS"]) / sweep / "report.json").read_text()))


def _runs(env: dict, sweep: str):
    import mlflow

    client = mlflow.MlflowClient(env["URI"])
    exp = client.get_experiment_by_name("creditbench")
    runs = client.search_runs([exp.experiment_id], f"tags.sweep = '{sweep}'")
    return (
        client,
        [r for r in runs if r.data.tags.get("kind") == "rl"],
        [r for r in runs if r.data.tags.get("kind") == "sweep"],
    )


def assert_consistent(env: dict, sweep: str, reference: dict) -> None:
    """The sweep's report is the uninterrupted one's; each run once in MLflow, FINISHED under one FINISHED
    parent, every (metric, step) logged once; a result file for each run."""
    assert _report(env, sweep) == reference
    client, children, parents = _runs(env, sweep)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.data.tags["run_key"] for r in children) == [
        "grpo-arithmetic-tiny-500k-seed0",
        "gspo-arithmetic-tiny-500k-seed0",
    ]
    for r in children:
        assert r.info.status == "FINISHED" and r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        for key in ("train/reward", "eval/arithmetic/pass_at_1"):
            steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
            assert steps == sorted(set(steps)) and steps, (key, steps)  # each step once
        train = [m.step for m in client.get_metric_history(r.info.run_id, "train/reward")]
        assert train == list(range(1, 21)), train
    assert len(list((Path(env["RESULTS"]) / sweep / "runs").glob("*.json"))) == 2


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env):
    """The uninterrupted sweep, in this machine's worker processes."""
    spec = write_spec(tmp_path_factory.mktemp("reference"), "reference", LONG_TOP, **LONG)
    p = subprocess.run(sweep_cmd(spec, env, "--jobs", "2"), capture_output=True, text=True, cwd=REPO, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return _report(env, "reference")


def _start(cmd: list[str], env: dict, out: Path) -> subprocess.Popen:
    """The sweep in a process group of its own, as a shell starts a foreground job (Ctrl-C reaches the group)."""
    return subprocess.Popen(
        cmd,
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env=env,
        start_new_session=True,
        # as from a terminal: SIGINT not ignored (a shell ignores it in its background jobs, and these
        # tests may run in one)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _until(what, timeout: float = 600, proc: subprocess.Popen | None = None) -> None:
    deadline = time.time() + timeout
    while not what():
        assert time.time() < deadline, "timed out"
        assert proc is None or proc.poll() is None, "the sweep ended first"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_node_lost_mid_sweep_reruns_its_run_elsewhere_from_its_checkpoint(tmp_path, env, reference):
    c, workers = make_cluster(2)
    ckpts = tmp_path / "checkpoints"
    e = {**env, "CREDITBENCH_CHECKPOINTS": str(ckpts)}
    try:
        spec = write_spec(tmp_path, "lost", LONG_TOP, **LONG)
        proc = _start(sweep_cmd(spec, e, "--ray", c.address), e, tmp_path / "out.txt")
        # both runs train, one on each node, each past its first checkpoint: one node goes
        _until(lambda: len(list(ckpts.glob("*/last.ckpt"))) == 2, proc=proc)
        c.remove_node(workers[0])
        assert proc.wait(timeout=900) == 0, (tmp_path / "out.txt").read_text()[-3000:]
    finally:
        c.shutdown()
    out = (tmp_path / "out.txt").read_text()
    assert out.count("its node left the cluster; running it again (attempt 2 of 3)") == 1, out
    assert len(list((Path(env["RESULTS"]) / "lost" / "logs").glob("*.lost-1.log"))) == 1
    assert_consistent(env, "lost", reference)


@pytest.mark.slow
def test_a_killed_driver_resumes_with_the_same_command(tmp_path, env, reference):
    c, _ = make_cluster(2)
    ckpts = tmp_path / "checkpoints"
    e = {**env, "CREDITBENCH_CHECKPOINTS": str(ckpts)}
    try:
        spec = write_spec(tmp_path, "driver", LONG_TOP, **LONG)
        cmd = sweep_cmd(spec, e, "--ray", c.address)
        proc = _start(cmd, e, tmp_path / "out.txt")
        _until(lambda: len(list(ckpts.glob("*/last.ckpt"))) >= 1, proc=proc)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its actors die with it (Ray ends an owner's actors)
        proc.wait(timeout=30)
        time.sleep(5)
        assert not list((Path(env["RESULTS"]) / "driver" / "runs").glob("*.json")), "a run outlived its driver"
        again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=e, timeout=900)
        assert again.returncode == 0 and "0 finished, 2 to run" in again.stdout, again.stdout[-2000:] + again.stderr
    finally:
        c.shutdown()
    assert_consistent(env, "driver", reference)


def _interrupt(proc: subprocess.Popen, out: Path) -> tuple[float, list[str]]:
    """Ctrl-C as a terminal sends it (to the foreground group): the seconds until the sweep exits, and
    the lines it printed after it."""
    before = len(out.read_text().splitlines())
    t0 = time.perf_counter()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    return time.perf_counter() - t0, out.read_text().splitlines()[before:]


def _stopped(env: dict, sweep: str) -> None:
    """Nothing of the sweep is RUNNING in MLflow and its parent is KILLED; nothing finishes afterwards."""
    results = Path(env["RESULTS"]) / sweep / "runs"
    done = sorted(p.name for p in results.glob("*.json"))
    _, children, parents = _runs(env, sweep)
    assert len(parents) == 1 and parents[0].info.status == "KILLED"
    assert all(r.info.status in ("KILLED", "FINISHED") for r in children), [r.info.status for r in children]
    time.sleep(15)
    assert sorted(p.name for p in results.glob("*.json")) == done, "a run went on after Ctrl-C"
    _, later, _ = _runs(env, sweep)
    assert [r.info.status for r in later] == [r.info.status for r in children]


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_mid_run_in_one_line_and_the_same_command_resumes(tmp_path, env, reference):
    spec = write_spec(tmp_path, "ctrlc", LONG_TOP, **LONG)
    ckpts = tmp_path / "checkpoints"
    e = {**env, "CREDITBENCH_CHECKPOINTS": str(ckpts)}
    cmd = sweep_cmd(spec, e, "--jobs", "2")
    proc = _start(cmd, e, tmp_path / "out.txt")
    _until(lambda: len(list(ckpts.glob("*/last.ckpt"))) >= 1, proc=proc)
    seconds, lines = _interrupt(proc, tmp_path / "out.txt")
    assert seconds < 10 and len(lines) == 1 and "interrupted:" in lines[0] and "marked KILLED" in lines[0], lines
    _stopped(env, "ctrlc")
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=e, timeout=900)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert_consistent(env, "ctrlc", reference)


@pytest.mark.slow
def test_ctrl_c_while_ray_actors_start_stops_everything_and_the_same_command_resumes(tmp_path, env, reference, cluster):
    spec = write_spec(tmp_path, "ctrlc-ray", LONG_TOP, **LONG)
    cmd = sweep_cmd(spec, env, "--ray", cluster.address)
    out = tmp_path / "out.txt"
    proc = _start(cmd, env, out)
    _until(lambda: "2 to run" in out.read_text(), proc=proc)
    seconds, lines = _interrupt(proc, out)
    assert seconds < 10 and len(lines) == 1 and "interrupted: 0 of 2 runs finished" in lines[0], lines
    _stopped(env, "ctrlc-ray")
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert_consistent(env, "ctrlc-ray", reference)
