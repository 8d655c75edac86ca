"""``creditbench eval``: pass@k of any checkpoint on any task, with standard errors over problems,
to stdout and one MLflow run (bench/run/evaluate.py).

    creditbench eval --model PATH_OR_HUB_ID --task math500 [--n 16 --k 1,4,16]
                     [--temperature 0.6 --top_p 0.95 --max_new_tokens 3072] [--num_problems N]
                     [--template qwen-math] [--data_dir DIR] [--allow_code_execution]
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.run.args import ArgumentParser
from bench.run.evaluate import DEFAULTS, EvalSettings, format_result, run_eval

USAGE = "eval --model PATH_OR_ID --task NAME [--n 16 --k 1,4,16]"
HELP = "pass@k of a checkpoint on a task"


def parser() -> ArgumentParser:
    d = EvalSettings(model="")
    p = ArgumentParser(prog="creditbench eval", description="Evaluate a checkpoint on a task (pass@k).")
    p.add_argument(
        "--model",
        required=True,
        help="a saved model directory, a Hugging Face Hub id, or the MLflow run id of a training run "
        "(its saved policy; the run's own task, options and eval settings are then the defaults)",
    )
    p.add_argument("--task", default=None, help="a registered task (see `creditbench tasks`)")
    p.add_argument("--n", type=int, default=None, help=f"samples per problem (default {DEFAULTS['n']})")
    p.add_argument("--k", default=None, help=f"comma-separated k for pass@k, each <= n (default {DEFAULTS['k']})")
    p.add_argument("--num_problems", type=int, default=None, help="evaluate the first N problems (default 0: all)")
    p.add_argument("--split", default=d.split, help="task split (default eval)")
    p.add_argument("--temperature", type=float, default=None, help=f"(default {DEFAULTS['temperature']})")
    p.add_argument("--top_p", type=float, default=None, help=f"(default {DEFAULTS['top_p']})")
    p.add_argument("--max_new_tokens", type=int, default=None, help=f"(default {DEFAULTS['max_new_tokens']})")
    p.add_argument("--batch_size", type=int, default=d.batch_size, help="sequences per generate call")
    p.add_argument("--template", default=None, help="the task's prompt template (default: the task's own)")
    p.add_argument(
        "--data_dir",
        default=None,
        help="local directory with the upstream data files (default $CREDITBENCH_DATA, else the Hub)",
    )
    p.add_argument(
        "--task_option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other task option (value parsed as JSON when it can be)",
    )
    p.add_argument(
        "--allow_code_execution",
        action="store_true",
        help="run model-written programs in the sandbox (required by code tasks)",
    )
    p.add_argument(
        "--dtype",
        default=d.dtype,
        choices=["auto", "float32", "bfloat16", "float16"],
        help="weights dtype (auto: bfloat16 on GPU, float32 on CPU)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--uri", default=d.uri)
    p.add_argument("--experiment", default=d.experiment)
    p.add_argument("--run_name", default=None)
    p.add_argument("--samples_to_log", type=int, default=d.samples_to_log, help="completions logged as an MLflow table")
    p.add_argument("--out", default=None, help="also write the result JSON here")
    return p


def main(argv: list[str]) -> int:
    flags = vars(parser().parse_args(argv))
    out = flags.pop("out")
    result = run_eval(EvalSettings(**flags))
    print(format_result(result))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2))
    return 0
