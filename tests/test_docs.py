"""The documentation cannot rot: every relative link in README.md and docs/ leads to a file (and a
heading, where it names one), the result tables equal what bench.report.docs_tables generates from
results/, and each recipe in docs/recipes/ runs, in its small form (tests/docs_recipes.py says what
is shrunk), from the first command to the last."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from docs_recipes import blocks, copy_repo, script, tiny_policy
from shared_data import DATA, needs_data

from bench.cli.docs_tables import main as docs_tables_command
from bench.report import docs_tables

ROOT = Path(__file__).resolve().parents[1]
PAGES = docs_tables.pages(ROOT)
RECIPES = sorted((ROOT / "docs" / "recipes").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)  # no headings inside code
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


# ------------------------------------------------------------------------------------ links and tables
def test_readme_is_short_and_links_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    docs = {p.relative_to(ROOT).as_posix() for p in PAGES if p.parent != ROOT}
    assert {"docs/methods.md", "docs/tasks.md", "docs/sweeps-and-reports.md", "docs/mlflow-ui.md"} <= docs
    assert {"docs/reliability.md", "docs/scale.md", "docs/performance.md"} <= docs
    assert [p.name for p in RECIPES] == ["add-a-method.md", "reproduce-a-paper-table.md", "run-the-benchmark.md"]
    assert not docs - set(LINK.findall(readme)), "pages the README does not link to"


@pytest.mark.parametrize("kind", ["methods", "tasks"])
def test_every_registered_plugin_is_documented(kind):
    """A method or task added to the tree shows up in its docs page (as `name`); plug-ins from other
    packages are their own packages' to document."""
    from bench.registry import METHODS, TASKS

    registry = METHODS if kind == "methods" else TASKS
    text = (ROOT / "docs" / f"{kind}.md").read_text()
    in_tree = [name for name in registry.names() if registry.get(name).__module__.startswith(f"{kind}.")]
    missing = [name for name in in_tree if f"`{name}`" not in text]
    assert not missing, f"docs/{kind}.md does not mention {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_lead_somewhere(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no file {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_plugin_snippet_is_the_example_plugins_code():
    """docs/methods.md shows the example plug-in's method as examples/plugin/ has it, line for line."""
    page = (ROOT / "docs" / "methods.md").read_text()
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "class LateCredit(" in b)
    source = (ROOT / "examples/plugin/creditbench_example/late_credit.py").read_text()
    assert snippet in source, "docs/methods.md's plug-in snippet drifted from examples/plugin/: copy the file's code"


def test_result_tables_are_generated_from_results():
    """Rerun ``creditbench docs-tables`` after a benchmark or sweep rewrote results/."""
    for page in PAGES:
        assert docs_tables.render(page, ROOT / "results") == page.read_text(), (
            f"{page.relative_to(ROOT)} differs from results/: run creditbench docs-tables"
        )
    assert docs_tables_command(["--check"]) == 0


def test_every_results_block_names_a_source_it_can_read():
    sources = [m["source"] for page in PAGES for m in docs_tables.BLOCK.finditer(page.read_text())]
    assert {
        "embedded/run",
        "embedded/credit",
        "embedded/comparisons",
        "embedded/budget",
        "embedded/robust",
        "embedded/blame",
        "benchmarks/rl_step.md",
        "benchmarks/trl.md#1",
    } <= set(sources)
    comparisons, _ = docs_tables.generate("embedded/comparisons", ROOT / "results")
    assert "p_Holm" in comparisons and "detects a difference of" in comparisons
    credit, _ = docs_tables.generate("embedded/credit", ROOT / "results")
    assert "s_trace-twin (baseline)" in credit and "`entropy_top` vs `entropy_top-placebo`" in credit
    budget, _ = docs_tables.generate("embedded/budget", ROOT / "results")
    assert budget.startswith("| model | task | label | samples |") and "| 0, 2,048 |" in budget
    blame, _ = docs_tables.generate("embedded/blame", ROOT / "results")
    assert blame.startswith("| model | task | method |") and "| chain |" in blame
    with pytest.raises(docs_tables.CreditBenchError, match="unknown results block source"):
        docs_tables.generate("embedded/everything", ROOT / "results")
    with pytest.raises(docs_tables.CreditBenchError, match=r"'#99' must be a number in 1\.\."):
        docs_tables.generate("benchmarks/trl.md#99", ROOT / "results")


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_blocks_are_bash_and_skips_say_why(recipe):
    found = blocks(recipe)
    assert sum(skip is None for _, skip in found) >= 2, "a recipe is commands that run"
    for body, _ in found:
        proc = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
        assert proc.returncode == 0, f"{recipe.name}: not valid bash:\n{body}\n{proc.stderr}"


# ------------------------------------------------------------------------------------------- recipes
@pytest.fixture(scope="session")
def stand_in_policy(tmp_path_factory):
    """The tiny policy every Hub model of a shrunk spec links to."""
    return tiny_policy(tmp_path_factory.mktemp("stand-in") / "tiny-500k")


RECIPE_TESTS = {
    "test_recipe_run_the_benchmark": "run-the-benchmark.md",
    "test_recipe_add_a_method": "add-a-method.md",
    "test_recipe_reproduce_a_paper_table": "reproduce-a-paper-table.md",
}
"""Each recipe's test; the one that needs the benchmark files is left out where they are missing."""


@pytest.fixture(scope="module")
def run_recipe(request, tmp_path_factory, warm_cache, stand_in_policy):
    """Start every selected recipe at once, each in a fresh copy of the repository: most of a recipe
    is single-threaded start-up, so together they keep both cores busy (and share one warm-start).
    ``run_recipe(name)`` waits for one and returns its copy and its output."""
    wanted = {RECIPE_TESTS[item.name] for item in request.session.items if item.name in RECIPE_TESTS}
    if not (DATA / "SOURCES.md").is_file():
        wanted.discard("reproduce-a-paper-table.md")
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "CREDITBENCH_CHECKPOINTS")}
    env.update(
        CREDITBENCH_CACHE=warm_cache,
        CREDITBENCH_DATA=str(DATA),
        DOCS_STAND_IN=str(stand_in_policy),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        OMP_NUM_THREADS="1",
        JOBS="2",
    )
    started = {}
    for name in sorted(wanted):
        copy = copy_repo(ROOT, tmp_path_factory.mktemp(Path(name).stem) / "repo")
        log = open(copy.parent / "output.txt", "w+")
        proc = subprocess.Popen(
            ["bash", "-c", script(ROOT / "docs" / "recipes" / name, copy)],
            cwd=copy,
            env={**env, "PYTHONPATH": str(copy)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole below
        )
        started[name] = (copy, proc, log)

    def wait(name: str) -> tuple[Path, str]:
        copy, proc, log = started[name]
        rc = proc.wait(timeout=900)
        log.seek(0)
        out = log.read()
        assert rc == 0, f"{name} failed (exit {rc}):\n{out[-6000:]}"
        return copy, out

    yield wait
    for _, proc, log in started.values():
        if proc.poll() is None:  # a test failed before waiting for it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.mark.slow  # a whole quick sweep and its report (about 75 s): CI runs it (-m slow)
def test_recipe_run_the_benchmark(run_recipe):
    copy, out = run_recipe("run-the-benchmark.md")
    report = copy / "results" / "embedded-quick"
    summary = (report / "summary.md").read_text()
    assert "| tiny-500k | grpo | 1 |" in summary and "| tiny-500k | s_trace | 1 |" in summary
    assert (report / "run_all.json").is_file() and (report / "pass1_vs_samples.png").is_file()
    assert "runs; budget {'samples': 8}; baseline grpo" in out  # the (shrunk) full benchmark's dry run
    # the docs now show the new run: the regenerated quick-run table has the shrunk run's one seed
    assert docs_tables.render(copy / "docs" / "results.md", copy / "results") == (copy / "docs/results.md").read_text()
    assert "2 runs of 8 samples each" in (copy / "docs" / "results.md").read_text()


def test_recipe_add_a_method(run_recipe):
    copy, out = run_recipe("add-a-method.md")
    assert "early_credit" in out and " passed" in out and not re.search(r"\b\d+ failed\b", out)  # pytest's count
    summary = (copy / "results" / "early-credit" / "summary.md").read_text()
    assert "| tiny-500k | grpo | 1 |" in summary and "| tiny-500k | early_credit | 1 |" in summary
    card = (copy / "results" / "judge-early_credit" / "card.md").read_text()  # the judge's, on the shrunk design
    assert "## `early_credit` vs `early_credit-twin`" in card and "## `early_credit` vs `early_credit-placebo`" in card
    assert "| per update, tiny-500k | 0.0001 |" in card and "| end to end, pass@1 | tuned |" not in card  # one seed


@needs_data
def test_recipe_reproduce_a_paper_table(run_recipe):
    copy, out = run_recipe("reproduce-a-paper-table.md")
    rows = [line for line in out.splitlines() if line.startswith("| s_trace | Qwen3-")]
    assert len(rows) == 2 * 3, rows  # the three verified deltas, printed before and after the run
    before, after = rows[:3], rows[3:]
    assert all(r.split("|")[6].strip() == "-" for r in before)
    measured = {r.split("|")[2].strip(): r.split("|")[6].strip() for r in after}
    assert measured["Qwen3-1.7B"] != "-" and "(n=1)" in measured["Qwen3-1.7B"], after
    assert measured["Qwen3-4B"] == "-" and measured["Qwen3-8B"] == "-"
