"""Benchmark: how long ``creditbench judge`` takes on the add-a-method recipe's worked example, from a clean
copy of this commit to its report card, against the 30 minutes the recipe promises.

    python -m bench.perf.judge_recipe [--recipe docs/recipes/add-a-method.md] [--jobs 2] [--keep DIR]
                                      [--out results/benchmarks]

It copies the committed tree (``git archive HEAD``: no results of an earlier judge, no runs) into a scratch
folder with this checkout's ``.venv`` linked in, runs the recipe's blocks that write and register the
method (those before its first ``creditbench judge``; the method's name is read from that line), then
times ``creditbench judge METHOD --jobs N`` as the recipe runs it, unshrunk. The phases come from what the
judge writes: the learning-rate tuning (results/judge-<label>/tuning.json), the credit probe (its report's
``wall_s``), and the rest (the seeds in rounds, the reports and the card). The tiny-500k base checkpoint
on chain comes from this checkout's cache ($CREDITBENCH_CACHE, else .creditbench/cache) as a user's second
judge would find it; the report says whether it was there, else installed from its pinned copy
(results/bases), else built first. Writes ``<out>/judge_recipe.{md,json}``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs

PROG = "python -m bench.perf.judge_recipe"
ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 30 * 60
FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
JUDGE = re.compile(r"^creditbench judge (\S+) --jobs \d+", re.M)


def setup(page: Path) -> tuple[str, str]:
    """The recipe's blocks before its first judge run, as one script, and the method that run judges."""
    if not page.is_file():
        raise CreditBenchError(f"no recipe at {page}: give --recipe a page of docs/recipes/")
    blocks = FENCE.findall(page.read_text())
    for i, body in enumerate(blocks):
        m = JUDGE.search(body)
        if m:
            return "\n".join(["set -eo pipefail", *blocks[:i]]) + "\n", m[1]
    raise CreditBenchError(f"{page} has no block that runs 'creditbench judge METHOD --jobs N'")


def copy_commit(dest: Path) -> Path:
    """The committed tree of this checkout under ``dest``, with its ``.venv`` linked in."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    return dest


def phases(copy: Path, label: str, total_s: float) -> dict[str, float]:
    """Tuning, probe and the rest, in seconds, from what the judge wrote."""
    tuning = json.loads((copy / "results" / f"judge-{label}" / "tuning.json").read_text())["wall_s"]
    probe = json.loads((copy / "results" / "probes" / f"judge-{label}" / "report.json").read_text())["wall_s"]
    return {"tuning": tuning, "probe": probe, "rounds and card": max(total_s - tuning - probe, 0.0), "total": total_s}


def verdicts(copy: Path, label: str) -> list[dict[str, Any]]:
    """Each comparison of the card: its per-update reading across rates at each size and its end-to-end
    verdict with the seeds the rounds used."""
    card = json.loads((copy / "results" / f"judge-{label}" / "card.json").read_text())
    out = []
    for c in card["comparisons"]:
        end = c.get("end_to_end") or {}
        words = "; ".join(f"{size}: {text}" for size, text in (c.get("readings") or {}).items())
        out.append({"method": card["label"], "control": c["control"], "per_update": words or None,
                    "end_to_end": f"{end['verdict']} ({end['seeds']} seeds)" if end else None})  # fmt: skip
    return out


def measure(recipe: Path, jobs: int, keep: Path | None) -> dict[str, Any]:
    if jobs < 1:
        raise CreditBenchError(f"--jobs must be >= 1, got {jobs}")
    if keep is not None and (keep / "repo").exists():
        raise CreditBenchError(f"{keep / 'repo'} exists: --keep needs a folder without a repo/ in it")
    script, method = setup(recipe)
    scratch = keep or Path(tempfile.mkdtemp(prefix="judge-recipe-"))
    copy = copy_commit(scratch / "repo")
    env = {**os.environ, "PYTHONPATH": str(copy), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["PATH"] = f"{copy / '.venv' / 'bin'}:{env['PATH']}"
    cache = Path(env.get("CREDITBENCH_CACHE") or ROOT / ".creditbench" / "cache").resolve()
    env["CREDITBENCH_CACHE"] = str(cache)  # this checkout's, not the copy's empty one
    warm = (cache / "base" / "chain").is_dir() and any((cache / "base" / "chain").glob("tiny-500k-*"))
    pinned = any((copy / "results" / "bases" / "chain").glob("tiny-500k-*"))
    subprocess.run(["bash", "-c", script], cwd=copy, env=env, check=True, capture_output=True)
    cmd = ["creditbench", "judge", method, "--jobs", str(jobs)]
    log = scratch / "judge.log"
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT)
    total = time.monotonic() - start
    if proc.returncode:
        tail = log.read_text()[-2000:]
        raise CreditBenchError(f"{shlex.join(cmd)} failed (exit {proc.returncode}); {log}:\n{tail}")
    return {"recipe": str(recipe.relative_to(ROOT)), "method": method, "command": shlex.join(cmd), "jobs": jobs,
            "cache_warm": warm, "base_pinned": pinned, "phases": phases(copy, method, total), "target_s": TARGET_S,
            "comparisons": verdicts(copy, method), "machine": machine(1)}  # fmt: skip


def base_words(data: dict[str, Any]) -> str:
    """Where the judge's tiny-500k base came from: the cache, its pinned copy (results/bases, installed into
    an empty cache in a moment), or a warm-start the judge ran first."""
    if data["cache_warm"]:
        return "came from the cache."
    if data.get("base_pinned"):
        return "was installed from its pinned copy (results/bases) into an empty cache."
    return "was built first (no cache, no pinned copy)."


def markdown(data: dict[str, Any]) -> str:
    p = data["phases"]
    met = "met" if p["total"] <= data["target_s"] else "not met"
    rows = [[name, f"{s:.0f}", f"{s / 60:.1f}"] for name, s in p.items()]
    cards = [[c["method"], c["control"], c["per_update"] or "–", c["end_to_end"] or "–"] for c in data["comparisons"]]
    return "\n".join([
        f"# `creditbench judge` on the recipe's worked example ({data['recipe']})",
        "",
        f"`{data['command']}` from a clean copy of the commit to its card: **{p['total'] / 60:.1f} min** against "
        f"the recipe's {data['target_s'] / 60:.0f} ({met}); the tiny-500k base checkpoint "
        + base_words(data),
        "",
        *md_table(["phase", "wall s", "min"], rows),
        "",
        *md_table(["method", "control", "per update", "end to end"], cards),
        "",
        machine_line(data["machine"]),
    ]) + "\n"  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, PROG)
    ap.add_argument("--recipe", default=str(ROOT / "docs" / "recipes" / "add-a-method.md"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="work here (kept) instead of a scratch folder")
    ap.add_argument("--out", default="results/benchmarks")
    a = ap.parse_args(argv)
    data = measure(Path(a.recipe).resolve(), a.jobs, a.keep)
    md, js = write_outputs(a.out, "judge_recipe", markdown(data), data)
    print(markdown(data), end="")
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    run_script(main, PROG)
