"""Does the verifier grade the datasets' own answers right? For every row of every math dataset
in the data directory, the gold answer written in ``\\boxed{}`` must grade correct and a shifted
wrong answer must grade wrong, with strict and with flexible extraction.

    python -m bench.gold_check [--data-dir ../shared/data] [--tasks TASK/SPLIT,...] [--limit N]

The shifted answer adds one to the first integer in the gold string (``\\frac{3}{4}`` ->
``\\frac{4}{4}``, ``(2, 5)`` -> ``(3, 5)``, ``52_8`` -> ``53_8``), or appends ``+1`` when it has
no digit. Writes
results/tasks/gold_check.{md,json} with the rates per dataset and every failing row with why.
"""

from __future__ import annotations

import re
import time
from typing import Any

from bench.script import md_table, script_parser, write_report

THRESHOLD = 0.995
RATES = ("gold_correct_strict", "gold_correct_flexible", "shifted_wrong_strict", "shifted_wrong_flexible")


def datasets(data_dir: str) -> list[tuple[str, str]]:
    """(task, split) for every registered task graded against gold answers (data files, no code
    execution), each data file once."""
    import dataclasses

    from bench.registry import TASKS

    seen, out = set(), []
    for name in TASKS.names():
        cls = TASKS.get(name)
        fields = {f.name for f in dataclasses.fields(cls.Config)}
        if cls.executes_code or "data_dir" not in fields or not getattr(cls, "sources", None):
            continue
        for split, source in cls.sources.items():
            if source.local not in seen:
                seen.add(source.local)
                out.append((name, split))
    return out


def shifted(answer: str) -> str:
    """A wrong answer close to the gold one: the first integer plus one, else ``gold+1``."""
    m = re.search(r"\d+", answer)
    if m is None:
        return f"{answer}+1"
    return answer[: m.start()] + str(int(m.group()) + 1) + answer[m.end() :]


def check_rows(task, rows: list[dict[str, Any]]) -> dict[str, Any]:
    gold = [f"The final answer is \\boxed{{{r['answer']}}}." for r in rows]
    wrong = [f"The final answer is \\boxed{{{shifted(r['answer'])}}}." for r in rows]
    t0 = time.perf_counter()
    right_out = task.verify(gold, rows, details=True)
    wrong_out = task.verify(wrong, rows, details=True)
    wall = time.perf_counter() - t0
    n = len(rows)
    failures = []
    for r, ok, bad in zip(rows, right_out, wrong_out):
        reasons = []
        if not ok.correct:
            reasons.append(f"gold graded wrong (strict{', ' + ok.error if ok.error else ''}; parsed {ok.parsed!r})")
        if not ok.correct_flexible:
            reasons.append("gold graded wrong (flexible)")
        if bad.correct:
            reasons.append(f"shifted answer {shifted(r['answer'])!r} graded correct (strict; parsed {bad.parsed!r})")
        if bad.correct_flexible:
            reasons.append("shifted answer graded correct (flexible)")
        if reasons:
            failures.append({"id": r["id"], "answer": r["answer"], "why": "; ".join(reasons)})
    return {
        "rows": n,
        "gold_correct_strict": sum(o.correct for o in right_out) / n,
        "gold_correct_flexible": sum(bool(o.correct_flexible) for o in right_out) / n,
        "shifted_wrong_strict": sum(not o.correct for o in wrong_out) / n,
        "shifted_wrong_flexible": sum(not o.correct_flexible for o in wrong_out) / n,
        "verifications_per_s": 2 * n / wall,
        "failures": failures,
    }


def run(data_dir: str, names: list[tuple[str, str]], limit: int = 0) -> dict[str, Any]:
    from bench.registry import TASKS

    out = {}
    for name, split in names:
        cls = TASKS.get(name)
        task = cls(cls.Config(data_dir=data_dir))
        rows = list(task.load(split))
        if limit:
            rows = rows[:limit]
        res = check_rows(task, rows)
        res["source"] = task.sources[split].local
        out[f"{name}/{split}"] = res
        worst = min(res[k] for k in RATES)
        print(
            f"{name}/{split}: {res['rows']} rows, worst rate {worst:.4f}, {len(res['failures'])} failing rows, "
            f"{res['verifications_per_s']:.0f} verifications/s",
            flush=True,
        )
    return out


def markdown(results: dict[str, Any]) -> str:
    header = (
        "dataset (task/split) | file | rows | gold correct strict | gold correct flexible | shifted wrong strict "
        "| shifted wrong flexible | failing rows | verifications/s"
    )
    rows = [
        [
            key,
            f"`{r['source']}`",
            r["rows"],
            *(f"{r[k]:.4f}" for k in RATES),
            len(r["failures"]),
            f"{r['verifications_per_s']:.0f}",
        ]
        for key, r in results.items()
    ]
    lines = [
        "# Verifier check on the datasets' own answers",
        "",
        "Gold answer in `\\boxed{}` must grade correct, a shifted answer (first integer + 1) must grade wrong, "
        f"for at least {THRESHOLD:.1%} of rows. Produced by `python -m bench.gold_check`.",
        "",
        *md_table(header, rows, align="llrrrrrrr"),
        "",
        "## Failing rows",
        "",
    ]
    for key, r in results.items():
        for f in r["failures"]:
            lines.append(f"- {key} `{f['id']}` gold `{f['answer'][:120]}`: {f['why']}")
    if not any(r["failures"] for r in results.values()):
        lines.append("(none)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = script_parser(__doc__, "python -m bench.gold_check")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--tasks", default="", help="comma-separated task/split; default every math dataset")
    ap.add_argument("--limit", type=int, default=0, help="first N rows of each dataset (0: all)")
    ap.add_argument("--out", default="results/tasks/gold_check")
    a = ap.parse_args(argv)
    names = [tuple(s.split("/")) for s in a.tasks.split(",") if s] or datasets(a.data_dir)
    results = run(a.data_dir, names, a.limit)
    md_path, _ = write_report(a.out, markdown(results), results)
    print(f"wrote {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
