"""How tests/test_docs.py runs a recipe of docs/recipes/: in a copy of the repository, every ```bash
block in order as one shell script (so `source`, `cd` and exports carry over, as in a reader's
terminal), with the inputs shrunk so that a recipe takes a minute or two instead of hours.

What the copy changes, and nothing else (the commands themselves run verbatim):

1. ``bench/bootstrap.sh`` only puts the test's own environment on PATH (``.venv`` links to it):
   installing is the bootstrap's job, which ``bash tests/run.sh`` exercises in CI on every run.
2. Before every block, each sweep spec under ``results/sweeps/`` and ``results/papers/`` is shrunk
   (:func:`shrink_spec`): one seed (no rounds), at most two methods (the baseline and the last one listed), one
   model, one RL step of 2 prompts x G=4, a few eval problems, 16 new tokens, one process, fp32
   with HF generation, tuning at two rates on one seed, the credit probe at one checkpoint and one rate,
   2 batches, one look at 3 trajectories. The
   arithmetic task takes tests/tiny_sweep.py's easy options and short
   warm-start, so every recipe shares one cached warm-start with the sweep tests.
3. A Hub model (the tests run offline) is replaced by a randomly initialised tiny
   Qwen3 under the model's own name (a link ``.../Qwen3-1.7B``): the paper table then matches the
   measured row to the paper's model exactly as it matches the real one. The Hub benchmarks'
   data comes from the local copy ($CREDITBENCH_DATA).
4. A block preceded by ``<!-- docs-test: skip: REASON -->`` is not run (a UI that serves until
   stopped, hours of compute); the reason is required.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml
from tiny_sweep import SPEC

FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
SKIP = re.compile(r"<!-- docs-test: skip: (?P<reason>[^>]*\S)\s*-->\s*$")
ARITHMETIC = SPEC["tasks"][0]
SHRINK = {
    "rl.prompts_per_step": 2,
    "rl.group_size": 4,
    "rl.minibatches": 1,
    "rl.ppo_epochs": 1,
    "rl.warmup_steps": 0,
    "rl.sampling.max_new_tokens": 16,
    "eval.sampling.max_new_tokens": 16,
    "rollout.engine": "hf",
    "precision": "32-true",
    "model.dtype": "float32",
    "model.gradient_checkpointing": False,
    "trainer.strategy": "auto",
    "trainer.devices": 1,
    "trainer.num_nodes": 1,
    **{k: v for k, v in SPEC["overrides"].items() if k.startswith("warmstart.")},
}
"""Run-config overrides of every shrunk spec: one small RL step (budget 8 = 2 prompts x G=4)."""
NOT_COPIED = {
    ".git",
    ".venv",
    ".venv-vllm",
    "__pycache__",
    ".pytest_cache",
    ".creditbench",
    "mlruns",
    "mlartifacts",
    "lightning_logs",
    "build",
    "mlflow.db",
    ".ruff_cache",
}


def blocks(page: Path) -> list[tuple[str, str | None]]:
    """The page's ```bash blocks in order, each with its skip reason (None: it runs)."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip().splitlines()
        skip = SKIP.search(before[-1]) if before else None
        out.append((m[1], skip["reason"] if skip else None))
    return out


def copy_repo(root: Path, dest: Path) -> Path:
    """The repository's sources, docs and results (no environment, caches or stores) under ``dest``."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n in NOT_COPIED or n.endswith(".egg-info") or n.startswith("mlflow.db")}
        if Path(folder).parent.name == "results":  # a sweep's per-run files are outputs, not inputs
            skip |= {n for n in names if n in ("runs", "configs", "logs", ".lock", "store.json")}  # and its store
        return skip

    shutil.copytree(root, dest, ignore=ignore, symlinks=True)
    (dest / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (dest / "bench" / "bootstrap.sh").write_text(
        "# docs test: the test's own environment; nothing is installed (see tests/docs_recipes.py)\n"
        f'export PATH="{Path(sys.prefix) / "bin"}:$PATH" VIRTUAL_ENV="{sys.prefix}"\n'
    )
    return dest


def tiny_policy(path: Path) -> Path:
    """A randomly initialised tiny Qwen3 and its tokenizer saved at ``path`` (once)."""
    if not (path / "config.json").is_file():
        from bench.models.policy import build_tiny

        model, tokenizer = build_tiny("tiny-500k", seed=0, max_positions=4096)  # math prompts are long
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return path


def stand_in(root: Path, hub_id: str) -> str:
    """``<root>/.creditbench/stand-ins/<last part of hub_id>``: a link to the tiny policy that
    $DOCS_STAND_IN names (tests/test_docs.py builds it once per test run), else to one built here."""
    path = root / ".creditbench" / "stand-ins" / hub_id.rstrip("/").split("/")[-1]
    if not path.is_symlink():
        tiny = os.environ.get("DOCS_STAND_IN") or str(tiny_policy(path.parent / ".tiny-500k"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(tiny, target_is_directory=True)
    return str(path)


def shrink_spec(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """The small form of a sweep spec (see the module docstring); shrinking twice changes nothing."""
    out = dict(spec)
    out["seeds"] = list(spec.get("seeds") or [0])[:1]
    out.pop("sequential", None)  # rounds need at least 3 seeds: the one seed runs once
    methods = list(spec["methods"])
    label = {id(m): m if isinstance(m, str) else m.get("label", m["name"]) for m in methods}
    keep = [m for m in methods if label[id(m)] == spec.get("baseline", "grpo")][:1]
    if not keep and "all" in methods:  # the baseline is one of every registered method
        keep = [spec.get("baseline", "grpo")]
    out["methods"] = keep + [m for m in [m for m in methods if m != "all"][-1:] if m not in keep]
    model = spec["models"][0]
    name = model if isinstance(model, str) else model["name"]
    out["models"] = [name if name.startswith("tiny-") or name.startswith("/") else stand_in(root, name)]
    out["tasks"] = [
        ARITHMETIC if (t if isinstance(t, str) else t["name"]) == "arithmetic" else t for t in spec["tasks"]
    ]
    out["budget"] = {"samples": 8}
    ev = dict(spec.get("eval") or {})
    n = int(ev.get("n", 4))
    out["eval"] = {
        "every": 1,
        "n": n,
        "k": [k for k in ev.get("k", [1]) if k <= n],
        "num_problems": 2,
        "batch_problems": 2,
    }
    out["overrides"] = {**(spec.get("overrides") or {}), **SHRINK}
    # the probe: one checkpoint, one rate, 2 batches, one look at 3 trajectories
    out["credit_probe"] = {"batches": 2, "blame_batches": 1, "first": 3, "cap": 3, "phases": [1.0], "lrs": [1.0e-4]}
    if spec.get("tune"):  # two rates on one tuning seed
        out["tune"] = {**spec["tune"], "lr": list(spec["tune"]["lr"])[:2], "seeds": list(spec["tune"]["seeds"])[:1]}
    out["threads"] = 1
    return out


def shrink_all(root: Path) -> None:
    """Shrink every sweep spec of the copy at ``root`` in place."""
    for path in [*(root / "results" / "sweeps").glob("*.yaml"), *(root / "results" / "papers").glob("*.sweep.yaml")]:
        spec = yaml.safe_load(path.read_text())
        small = shrink_spec(spec, root)
        if small != spec:
            path.write_text(yaml.safe_dump(small, sort_keys=False))


def script(page: Path, copy: Path) -> str:
    """The recipe as one bash script: shrink, then each block that runs, each announced on stderr."""
    tests = Path(__file__).resolve().parent
    shrink = (
        f'"{sys.executable}" -c "import sys; sys.path.insert(0, \'{tests}\'); '
        f"from docs_recipes import shrink_all; from pathlib import Path; shrink_all(Path('{copy}'))\""
    )
    lines = ["set -eo pipefail"]
    for i, (body, skip) in enumerate(blocks(page), 1):
        if skip is None:
            lines += [shrink, f'echo ">>> {page.name}, block {i} at ${{SECONDS}} s" >&2', body]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # print the script of a recipe: python tests/docs_recipes.py docs/recipes/X.md COPY
    print(script(Path(sys.argv[1]), Path(sys.argv[2])))
