"""The layout is the architecture: a test of the import graph of bench/, tasks/ and methods/.

Layers, lowest first: the plug-in API (the contract of a method and a task, the registry, errors, typed
options, numerics, the collectives of distributed.py, atomic.py's write, what every script shares
(bench.script) and the gold-answer check a task's tests run (bench.gold_check)), the pure statistics
the reports compute (bench.stats: numpy and scipy only), what a number was made with
(bench.environment: the numerics fingerprint and the lock writer), the run configuration (bench.config,
which plug-ins never see), the models (bench.models: tiny policies, loading, the pretrained registry, the Hub
architectures), then bench.engine, the MLflow store (bench.tracking), the base policies and their pins
(bench.bases), one run (bench.run), sweeps of runs (bench.sweep: a sweep imports a run, never the
reverse), bench.paired, bench.report, rerunning committed results and comparing them (bench.reproduce),
the validity studies (bench.studies), the GPU harness (bench.gpu), the speed and memory benchmarks
(bench.perf), and bench.cli on top. A module imports its own
layer and the ones below it, never one above; tasks/ and methods/ are plug-ins and import only the
API (and their own package); nothing in bench/ imports a plug-in (it finds them through the
registry). No two modules import each other, directly or around a longer circle. Imports inside
functions count: a circle that only closes at call time is still a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "tasks", "methods")
API = {
    "bench",
    "bench.atomic",
    "bench.core",
    "bench.registry",
    "bench.errors",
    "bench.options",
    "bench.numerics",
    "bench.distributed",
    "bench.tasks_base",
    "bench.script",
    "bench.gold_check",
    "bench.mc_values",
}
LAYERS = [
    "api",
    "bench.stats",
    "bench.environment",
    "bench.config",
    "bench.models",
    "bench.engine",
    "bench.tracking",
    "bench.bases",
    "bench.run",
    "bench.sweep",
    "bench.paired",
    "bench.report",
    "bench.reproduce",
    "bench.studies",
    "bench.gpu",
    "bench.perf",
    "bench.cli",
]
MAX_LINES = 400


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project's modules ``name`` imports anywhere in its file (``from a import b`` names the
    module a.b where that is a module, else a)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import bench.engine.module` names the module; a.b.c -> a.b
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {name: imports(path, name, set(modules())) for name, path in modules().items()}


def layer(name: str) -> str:
    if name in API:
        return "api"
    for top in LAYERS[1:]:
        if name == top or name.startswith(top + "."):
            return top
    return name.split(".")[0]  # tasks / methods


def test_the_graph_sees_the_layers():
    """The test reads what it should: the engine's module imports the core, the CLI the runner."""
    assert "bench.core" in GRAPH["bench.engine.module"]
    assert any(m.startswith("bench.run.") for m in GRAPH["bench.cli"])
    assert "bench.run.train" in GRAPH["bench.sweep.worker"]  # a sweep imports a run (never the reverse)
    assert "bench.registry" in GRAPH["methods.grpo"]
    assert {layer(m) for m in GRAPH} >= {
        "api",
        "bench.environment",
        "bench.config",
        "bench.models",
        "bench.engine",
        "bench.tracking",
        "bench.bases",
        "bench.run",
        "bench.sweep",
        "bench.report",
        "bench.reproduce",
        "bench.studies",
        "bench.gpu",
        "bench.perf",
        "tasks",
        "methods",
    }


@pytest.mark.parametrize("pkg", ["tasks", "methods"])
def test_plugins_use_only_the_api(pkg):
    bad = {
        f"{m} -> {t}"
        for m, deps in GRAPH.items()
        if m.split(".")[0] == pkg
        for t in deps
        if t.split(".")[0] == "bench" and t not in API
    }
    other = {
        f"{m} -> {t}"
        for m, deps in GRAPH.items()
        if m.split(".")[0] == pkg
        for t in deps
        if t.split(".")[0] in PACKAGES and t.split(".")[0] not in ("bench", pkg)
    }
    assert not bad, f"{pkg}/ may import only bench's plug-in API ({', '.join(sorted(API))}): {sorted(bad)}"
    assert not other, f"{pkg}/ imports the other plug-in package: {sorted(other)}"


def test_no_import_from_a_higher_layer():
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for m, deps in GRAPH.items():
        if m.split(".")[0] != "bench":
            continue
        for t in deps:
            if t.split(".")[0] != "bench":
                bad.append(f"{m} -> {t} (bench reaches tasks and methods through the registry)")
            elif rank[layer(t)] > rank[layer(m)]:
                bad.append(f"{m} ({layer(m)}) -> {t} ({layer(t)})")
    assert not bad, "imports that run up a layer:\n" + "\n".join(sorted(bad))


def test_no_import_circles():
    """Tarjan's strongly connected components: any component of more than one module is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_files_stay_small():
    """No source file over ~400 lines: a longer one is doing more than one job."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in [*modules().values(), *(ROOT / "tests").rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_engine_tests_do_not_import_the_benchmarks():
    """tests/engine tests the engine: what its tests import and launch lives in bench.engine (the
    multi-process parity runs: bench.engine.parity), not in the benchmark scripts of bench.perf."""
    bad = []
    for path in sorted((ROOT / "tests" / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] if node.module else []
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args:
                names = [node.args[0].value] if isinstance(node.args[0], ast.Constant) else []
            else:
                continue
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.startswith("bench.perf")]
    assert not bad, "tests/engine imports bench.perf:\n" + "\n".join(bad)


def test_every_folder_has_a_rank_and_a_line_in_the_architecture():
    """A new package under bench/ takes its place in LAYERS, and docs/architecture.md says what kind of thing it
    holds (its line in "What is in the box" and its row in the drawing of the layers)."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    folders = sorted(p.parent.name for p in (ROOT / "bench").glob("*/__init__.py"))
    assert set(folders) <= {"cli", *(name.removeprefix("bench.") for name in LAYERS)}, folders
    missing = [f for f in folders if f"\n  {f}/" not in doc or f"\nbench.{f} " not in doc]
    assert not missing, f"docs/architecture.md does not draw: {missing}"
