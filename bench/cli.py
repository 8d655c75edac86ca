"""The ``creditbench`` command line.

    creditbench train --config run.yaml [--rl.steps 50 ...]   one RL run (typed YAML config)
    creditbench eval --model PATH_OR_ID --task NAME [--n 16 --k 1,4,16]   pass@k of a checkpoint
    creditbench methods | tasks                                list the registries
    creditbench summarize --sweep NAME                         results/<NAME>/summary.csv
    creditbench ui [--port 5000]                               MLflow UI on 127.0.0.1
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings


def _quiet() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")
    warnings.filterwarnings("ignore", message=".*(LeafSpec|eval mode|litlogger|does not have many workers|is_gradient_checkpointing).*")
    for name in ("transformers", "lightning.pytorch.utilities.rank_zero", "lightning.fabric"):
        import logging

        logging.getLogger(name).setLevel(logging.WARNING)


def _train_parser():
    from jsonargparse import ArgumentParser

    from bench.config import RunConfig

    p = ArgumentParser(prog="creditbench train", description="Train one policy with one method on one task.",
                       exit_on_error=False, default_env=False)
    p.add_argument("--config", action="config", help="a run YAML file (see results/configs/)")
    p.add_argument("--no-progress", action="store_true", help="hide Lightning's progress bars")
    p.add_class_arguments(RunConfig, None)
    return p


def cmd_train(argv: list[str]) -> int:
    from bench.config import RunConfig
    from bench.train import resolve, run

    p = _train_parser()
    try:
        ns = p.parse_args(argv)
        progress = not ns.pop("no_progress")
        ns.pop("config", None)
        cfg = p.instantiate(ns)
    except Exception as e:  # jsonargparse reports malformed YAML, bad types and unknown keys this way
        msg = _first_line(e)
        return _fail(f"bad configuration: {msg}")
    cfg = RunConfig(**{k: v for k, v in vars(cfg).items() if k in RunConfig.__dataclass_fields__})
    resolve(cfg)
    res = run(cfg, progress=progress)
    b, f, d = res["base"], res["final"], res["delta_pass_at_1"]
    print(f"{res['run_name']}: eval pass@1 {b['pass_at_1']:.3f} -> {f['pass_at_1']:.3f} "
          f"(delta {d['delta']:+.3f} +/- {d['se']:.3f} paired SE, z={d['z']:.1f}); "
          f"{res['samples']} samples, {res['tokens']} tokens, {res['wall_s']:.0f} s; MLflow run {res['mlflow_run_id']}")
    return 0


def _first_line(e: BaseException) -> str:
    lines = [l.strip() for l in str(e).splitlines() if l.strip() and not l.strip().startswith(("usage:", "tip:"))]
    text = " ".join(lines[:3]) if lines else type(e).__name__
    return text[:500]


def _fail(msg: str) -> int:
    print(f"creditbench: error: {msg}", file=sys.stderr)
    return 2


def cmd_list(kind: str) -> int:
    from bench.registry import METHODS, TASKS

    reg = METHODS if kind == "methods" else TASKS
    width = max(map(len, reg.names()))
    for name in reg.names():
        obj = reg.get(name)
        extra = f"  [{obj.paper}]" if kind == "methods" else f"  (v{obj.VERSION})"
        print(f"{name:<{width}}  {obj.description}{extra}")
    return 0


def cmd_ui(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="creditbench ui", description="Serve the MLflow UI on 127.0.0.1.")
    ap.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db"))
    ap.add_argument("--port", type=int, default=5000)
    a = ap.parse_args(argv)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", a.uri, "--host", "127.0.0.1",
           "--port", str(a.port), "--workers", "1"]
    print(f"MLflow UI for {a.uri} on http://127.0.0.1:{a.port} (Ctrl-C to stop)")
    os.execv(sys.executable, cmd)


def cmd_summarize(argv: list[str]) -> int:
    from bench.summary import summarize

    ap = argparse.ArgumentParser(prog="creditbench summarize", description="Summarise a sweep's runs.")
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--results-dir", default="results")
    a = ap.parse_args(argv)
    print(summarize(a.results_dir, a.sweep))
    return 0


COMMANDS = {"train": "one RL run", "eval": "pass@k of a checkpoint on a task", "methods": "list methods", "tasks": "list tasks",
            "summarize": "summary table of a sweep", "ui": "MLflow UI on 127.0.0.1"}


def main(argv: list[str] | None = None) -> int:
    from bench.errors import CreditBenchError, did_you_mean

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    _quiet()
    try:
        if cmd not in COMMANDS:
            raise did_you_mean("command", cmd, COMMANDS)
        if cmd == "train":
            return cmd_train(rest)
        if cmd == "eval":
            from bench.evaluate import main as cmd_eval

            return cmd_eval(rest)
        if cmd in ("methods", "tasks"):
            return cmd_list(cmd)
        if cmd == "ui":
            return cmd_ui(rest)
        return cmd_summarize(rest)
    except CreditBenchError as e:
        return _fail(str(e))


if __name__ == "__main__":
    raise SystemExit(main())
