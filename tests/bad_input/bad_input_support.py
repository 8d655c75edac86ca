"""What the bad-input tests share: running ``creditbench`` in this process, reading the one error
line it must print, and the workspace of earlier work that bad input must leave as it was (the
fixtures that build it are in conftest.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.cli import main

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there
SWEEP = "demo"  # the sweep whose results folder already exists
RUN_KEY = "grpo-arithmetic-tiny-500k-seed0"  # the run of that sweep whose result JSON already exists
FAST_S = 30.0  # "fails fast": MLflow's own retries against an unreachable server take minutes


class WorkStarted(AssertionError):
    """Bad input got as far as real work (training, a sweep's run, a model's weights)."""


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``creditbench ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse exits by itself, after printing usage and its own error line
        code = e.code
    except WorkStarted:
        raise
    except Exception as e:  # noqa: BLE001 - a traceback where the user should get one line
        out = capsys.readouterr()
        pytest.fail(
            f"creditbench {' '.join(map(str, argv))} raised {type(e).__name__}: {e} instead of printing "
            f"one error line (stderr: {out.err[-500:]!r})"
        )
    out = capsys.readouterr()
    return code, out.out, out.err


def error_line(code, err: str) -> str:
    """The one line a refused command prints: nothing else on stderr, a nonzero exit status."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("creditbench: error: "), (
        f"expected exactly one line 'creditbench: error: ...' on stderr, got:\n{err}"
    )
    assert isinstance(code, int) and code != 0, f"exit status {code!r} for a refused command"
    return lines[0]


def assert_names(line: str, expected: list[str]) -> None:
    missing = [s for s in expected if s not in line]
    assert not missing, f"the error line lacks {missing}:\n{line}"


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root``: a directory marker or the file's sha256."""
    return {
        str(p.relative_to(root)): "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def mlflow_runs(db: Path) -> list[str]:
    import mlflow

    c = mlflow.MlflowClient(f"sqlite:///{db}")
    exps = [e.experiment_id for e in c.search_experiments()]
    return sorted(r.info.run_id for r in c.search_runs(exps)) if exps else []


@dataclass
class Workspace:
    """The current directory of a test, holding what earlier work left: an MLflow store with one
    finished run, ``results/demo/`` (a finished sweep: spec, report, one run's result JSON, its
    config and log) and ``results/stale/`` (a report whose runs are gone)."""

    root: Path
    db: Path
    run_id: str
    before: dict[str, str]

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.db}"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def run_json(self) -> Path:
        return self.results / SWEEP / "runs" / f"{RUN_KEY}.json"

    def rebaseline(self) -> None:
        self.before = snapshot(self.root)

    def assert_unchanged(self) -> None:
        after = snapshot(self.root)
        added = sorted(set(after) - set(self.before))
        removed = sorted(set(self.before) - set(after))
        changed = sorted(k for k in set(after) & set(self.before) if after[k] != self.before[k])
        assert not (added or removed or changed), (
            f"bad input changed what was on disk: added {added}, removed {removed}, modified {changed}"
        )


def run_result(mlflow_run_id: str) -> dict:
    """A finished run's result JSON, as bench/run/train.py writes it."""

    def ev(p1: float) -> dict:
        return {
            "pass_at_1": p1,
            "pass_at_1_se": 0.05,
            "pass_at_2": p1 + 0.1,
            "pass_at_2_se": 0.06,
            "avg_at_2": p1,
            "num_problems": 12.0,
            "mean_length": 9.0,
            "truncated_frac": 0.0,
            "flexible_avg_at_n": p1,
            "tokens_per_correct": 30.0,
        }

    return {
        "run_name": RUN_KEY,
        "mlflow_run_id": mlflow_run_id,
        "method": "grpo",
        "task": "arithmetic",
        "eval_tasks": ["arithmetic"],
        "model": "tiny-500k",
        "params": 500_000,
        "lora_rank": 0,
        "seed": 0,
        "steps": 5,
        "samples": 160,
        "tokens": 1600,
        "wall_s": 12.0,
        "tags": {"run_key": RUN_KEY, "label": "grpo", "config_hash": "0123456789abcdef", "budget": "160 samples"},
        "budget": {"samples": 160, "tokens": 0},
        "base": ev(0.25),
        "final": ev(0.3),
        "delta_pass_at_1": {"delta": 0.05, "se": 0.03, "z": 1.7},
        "history": [
            {"step": s, "samples": 32 * s, "tokens": 320 * s, "eval": {"arithmetic": ev(0.25 + 0.01 * s)}}
            for s in (0, 2, 4, 5)
        ],
        "credit_probe": None,
    }


def train(capsys, ws: Workspace, *argv):
    """``creditbench train`` into the existing store, as a run of the existing sweep (so a run that
    got through would rewrite results/demo/runs/<run>.json)."""
    return cli(
        capsys,
        "train",
        "--tracking.uri",
        ws.uri,
        "--tracking.sweep",
        SWEEP,
        "--tracking.results_dir",
        ws.results,
        *argv,
    )


BAD_URIS = [
    pytest.param(
        UNREACHABLE, ["cannot reach MLflow tracking server 'http://127.0.0.1:9'", "mlflow server"], id="unreachable"
    ),
    pytest.param("sqlite:///{root}/no/such/dir/mlflow.db", ["no/such/dir", "does not exist"], id="sqlite-missing-dir"),
    pytest.param("file://{root}/results/demo/summary.md", ["is a regular file"], id="file-uri-a-file"),
    pytest.param("{root}/mlflow.db", ["is a regular file", "use 'sqlite:///"], id="store-without-sqlite"),
    pytest.param("file://{root}/mlruns", ["cannot use MLflow tracking URI", "sqlite:///"], id="file-store"),
]
