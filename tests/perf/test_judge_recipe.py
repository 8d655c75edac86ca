"""bench.perf.judge_recipe: the recipe's setup read from its page, the phases and the card's words read
from what a judge writes (hand-made files), the report's figures; a page without a judge run fails in one
line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.errors import CreditBenchError
from bench.perf import judge_recipe as jr


def test_the_setup_is_the_recipes_blocks_before_its_judge_run():
    script, method = jr.setup(jr.ROOT / "docs" / "recipes" / "add-a-method.md")
    assert method == "early_credit" and script.startswith("set -eo pipefail\n")
    assert "cat > methods/early_credit.py" in script and "from methods import early_credit" in script
    assert "creditbench judge" not in script and "creditbench sweep" not in script


def test_a_page_without_a_judge_run_fails_in_one_line(tmp_path):
    page = tmp_path / "r.md"
    page.write_text("```bash\necho hi\n```\n")
    with pytest.raises(CreditBenchError, match="has no block that runs 'creditbench judge METHOD --jobs N'"):
        jr.setup(page)
    with pytest.raises(CreditBenchError, match="no recipe at .*: give --recipe a page of docs/recipes/"):
        jr.setup(tmp_path / "missing.md")
    with pytest.raises(CreditBenchError, match="--jobs must be >= 1, got 0"):
        jr.measure(page, 0, None)
    (tmp_path / "keep" / "repo").mkdir(parents=True)
    with pytest.raises(CreditBenchError, match="exists: --keep needs a folder without a repo/ in it"):
        jr.measure(page, 2, tmp_path / "keep")
    assert list((tmp_path / "keep" / "repo").iterdir()) == []  # nothing written


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_phases_and_words_come_from_what_the_judge_wrote(tmp_path):
    _write(tmp_path / "results" / "judge-m" / "tuning.json", {"wall_s": 300.0})
    _write(tmp_path / "results" / "probes" / "judge-m" / "report.json", {"wall_s": 600.0})
    p = jr.phases(tmp_path, "m", 1500.0)
    assert p == {"tuning": 300.0, "probe": 600.0, "rounds and card": 600.0, "total": 1500.0}
    card = {"label": "m", "comparisons": [
        {"control": "m-twin", "readings": {"tiny-500k": "better at every rate"},
         "end_to_end": {"verdict": "better", "seeds": 18}},
        {"control": "m-placebo", "readings": {}, "end_to_end": None}]}  # fmt: skip
    _write(tmp_path / "results" / "judge-m" / "card.json", card)
    rows = jr.verdicts(tmp_path, "m")
    assert rows[0] == {"method": "m", "control": "m-twin", "per_update": "tiny-500k: better at every rate",
                       "end_to_end": "better (18 seeds)"}  # fmt: skip
    assert rows[1]["per_update"] is None and rows[1]["end_to_end"] is None
    machine = {"gpu": None, "cpu": "x86", "cpus": 2, "torch_threads": 1, "torch": "2.13.0"}
    data = {"recipe": "docs/recipes/add-a-method.md", "command": "creditbench judge m --jobs 2", "cache_warm": True,
            "phases": p, "target_s": 1800, "comparisons": rows, "machine": machine}  # fmt: skip
    md = jr.markdown(data)
    assert "**25.0 min** against the recipe's 30 (met); the tiny-500k base checkpoint came from the cache." in md
    assert "| rounds and card | 600 | 10.0 |" in md and "| m | m-placebo | – | – |" in md
    data["phases"] = {**p, "total": 1900.0}
    assert "**31.7 min** against the recipe's 30 (not met)" in jr.markdown(data)
    data["cache_warm"], data["base_pinned"] = False, True  # an empty cache: the pinned copy is installed
    assert "was installed from its pinned copy (results/bases) into an empty cache." in jr.markdown(data)
    data["base_pinned"] = False
    assert "base checkpoint was built first (no cache, no pinned copy)." in jr.markdown(data)
