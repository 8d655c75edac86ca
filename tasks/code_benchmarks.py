"""Code benchmarks, graded by running the program against the dataset's tests in the sandbox.

============ ===================================================== ==================================
task         eval split (local file / Hub dataset)                 train split
============ ===================================================== ==================================
humaneval    humaneval/HumanEval.jsonl.gz / openai/openai_humaneval (none)
mbpp         mbpp/sanitized-mbpp.json task_id 11-510 (257) /        the other 170 sanitized tasks /
             google-research-datasets/mbpp sanitized test           sanitized train+validation+prompt
============ ===================================================== ==================================

A completion passes when the dataset's tests run to the end against it in :mod:`tasks.sandbox`:
the program runs contained by the kernel (bubblewrap: namespaces, a read-only filesystem, a
private tmpfs, a uid and a cgroup of each run's own, seccomp, rlimits, a wall-clock timeout), and the tests run in a
separate trusted process that calls the program's functions and gets back plain data, so no
program can make its own tests pass. HumanEval's prompt helpers that its tests call (e.g.
``encode_cyclic``) run with the tests, not as the model's code. A row whose test code asks for
object identity the sandbox cannot keep (``id()``, ``x is y`` between results; see
:mod:`tasks.sandbox.testcheck`) fails the load with one line naming it. Model-written code only runs after an
explicit opt-in (see :func:`bench.core.code_execution_allowed`), as lm-evaluation-harness
requires ``--confirm_run_unsafe_code``.

How a completion becomes a program:
- When it holds a fenced code block, the first block that defines the entry point (else the last
  block) is the code. For HumanEval a block that defines the function is the whole program (the
  prompt's imports are prepended); a block that does not is the function body after the prompt.
- Otherwise (base models continuing the prompt): HumanEval's prompt + the completion cut at the
  first of Codex's stop sequences (``\\nclass``, ``\\ndef``, ``\\n#``, ``\\nif``, ``\\nprint``);
  MBPP's completion up to ``[DONE]``.

Prompt templates: HumanEval ``completion`` (default; the raw prompt, as in the Codex paper) or
``chat``; MBPP ``instruct`` (default; lm-evaluation-harness's "You are an expert Python
programmer..." with the three tests) or ``chat``. ``chat`` goes through the tokenizer's chat
template when it has one and asks for a fenced code block.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from bench.core import Outcome, Task, TaskConfig, check, code_execution_allowed, code_execution_refused
from bench.errors import CreditBenchError
from bench.registry import TASKS
from tasks.data import Source, data_dir, load_rows, require, to_dataset
from tasks.prompts import chat_prompt
from tasks.sandbox import Sandbox, SandboxLimits
from tasks.sandbox.testcheck import check_test

STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class CodeTaskConfig(TaskConfig):
    template: str = "completion"
    """Prompt template (humaneval: completion or chat; mbpp: instruct or chat)."""
    data_dir: str | None = None
    """Directory holding the upstream files (e.g. humaneval/HumanEval.jsonl.gz); default
    $CREDITBENCH_DATA, else the Hugging Face Hub."""
    cpu_s: int = 10
    """CPU seconds per program: the limit that decides slow programs (it does not depend on load;
    the slowest reference solution, MBPP 123, needs about 5)."""
    timeout_s: float = 30.0
    """Wall-clock seconds per program: a backstop for programs that sleep or block."""
    memory_mb: int = 1024
    """Address-space limit per process of a program, and (plus its 64 MB tmpfs) the memory limit of
    its run's cgroup: shared memory, memfds and forked children together."""
    require_cgroups: bool = False
    """Refuse to grade where per-run cgroups cannot be made, instead of bounding memory and processes
    per process only (set it on a shared training node)."""
    workers: int | None = None
    """Programs run at once (None: min(2, cpus))."""

    def __post_init__(self) -> None:
        check(self.cpu_s >= 1, f"cpu_s must be >= 1, got {self.cpu_s}")
        check(self.timeout_s > 0, f"timeout_s must be > 0, got {self.timeout_s}")
        check(self.memory_mb >= 64, f"memory_mb must be >= 64, got {self.memory_mb}")
        check(self.workers is None or self.workers >= 1, f"workers must be >= 1 (or null for auto), got {self.workers}")


def fenced_blocks(text: str) -> list[str]:
    blocks = FENCE.findall(text)
    if not blocks and "```" in text:  # an unterminated block at the end of a truncated completion
        tail = text.split("```")[-1]
        blocks = [tail.split("\n", 1)[1] if "\n" in tail else ""]
    return blocks


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def cut_at_stop(text: str, stops: tuple[str, ...] = STOP_SEQUENCES) -> str:
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
    return text[:cut]


class CodeBenchmark(Task):
    Config = CodeTaskConfig
    VERSION = "2"  # 2: the verdict is computed outside the program's process (tasks/sandbox/__init__.py)
    executes_code = True
    sources: ClassVar[dict[str, Source]] = {}
    fields: ClassVar[tuple[tuple[str, ...], ...]] = ()
    templates: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: CodeTaskConfig | None = None):
        super().__init__(config)
        if self.config.template not in self.templates:
            raise CreditBenchError(
                f"unknown template {self.config.template!r} for task {self.name!r}; valid: {', '.join(self.templates)}"
            )
        cfg = self.config
        self.limits = SandboxLimits(
            timeout_s=cfg.timeout_s, cpu_s=cfg.cpu_s, memory_mb=cfg.memory_mb, require_cgroups=cfg.require_cgroups
        )
        self._allowed = False
        self._sandbox: Sandbox | None = None

    @property
    def splits(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self.sources)

    def allow_code_execution(self) -> None:
        """The explicit opt-in: after this, :meth:`verify` runs programs in the sandbox."""
        self._allowed = True

    def load(self, split: str):
        if split not in self.sources:
            raise CreditBenchError(f"task {self.name!r} has no {split!r} split; valid: {', '.join(self.sources)}")
        raw, where = load_rows(self.name, self.sources[split], data_dir(self.config.data_dir))
        require(raw, where, *self.fields)
        rows = []
        for i, r in enumerate(raw):
            try:
                row = self.row(r, split)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                raise CreditBenchError(
                    f"{where} has the wrong schema: row {i} cannot be read "
                    f"({type(e).__name__}: {e}); fields: {', '.join(sorted(r))}"
                ) from None
            if row is not None:
                check_test(row["test"], f"{where}: {row['id']}")
                rows.append(row)
        return to_dataset(rows)

    def row(self, raw: dict[str, Any], split: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def program(self, completion: str, row: dict[str, Any]) -> str:
        raise NotImplementedError

    def verify(self, completions: list[str], rows: list[dict[str, Any]], details: bool = True) -> list[Outcome]:
        if not code_execution_allowed(self._allowed):
            raise CreditBenchError(code_execution_refused(self.name))
        if self._sandbox is None:
            self._sandbox = Sandbox(self.limits, workers=self.config.workers or min(2, os.cpu_count() or 1))
        jobs = [(self.program(c, r), r["test"], r["entry_point"]) for c, r in zip(completions, rows, strict=True)]
        out = []
        for res in self._sandbox.run_many(jobs):
            out.append(
                Outcome(
                    reward=float(res.passed),
                    correct=res.passed,
                    parsed=res.status,
                    correct_flexible=res.passed,
                    error=None if res.passed else f"{res.status}: {res.detail}"[:300],
                )
            )
        return out


@TASKS.register("humaneval")
class HumanEval(CodeBenchmark):
    description = "HumanEval (164 Python functions from docstrings), run against its tests in the sandbox"
    sources = {"eval": Source("openai/openai_humaneval", "test", None, "humaneval/HumanEval.jsonl.gz")}
    fields = (("task_id",), ("prompt",), ("canonical_solution",), ("test",), ("entry_point",))
    templates = ("completion", "chat")

    def row(self, raw, split):
        return {
            "id": raw["task_id"],
            "question": raw["prompt"],
            "answer": raw["canonical_solution"],
            "test": f"{_helpers(raw['prompt'], raw['entry_point'])}{raw['test']}\ncheck({raw['entry_point']})\n",
            "entry_point": raw["entry_point"],
        }

    def prompt(self, row, tokenizer=None) -> str:
        if self.config.template == "completion":
            return row["question"]
        text = (
            "Complete the following Python function. Reply with the whole function in one ```python code "
            f"block.\n```python\n{row['question']}```"
        )
        return chat_prompt(text, tokenizer)

    def program(self, completion: str, row: dict[str, Any]) -> str:
        prompt, entry = row["question"], row["entry_point"]
        blocks = fenced_blocks(completion)
        if blocks:
            code = next((b for b in blocks if defines(b, entry)), blocks[-1])
            if defines(code, entry):
                imports = "\n".join(l for l in prompt.splitlines() if l.startswith(("import ", "from ")))
                return f"{imports}\n{code}"
            return prompt + code
        return prompt + cut_at_stop(completion)


@dataclass(frozen=True)
class MBPPConfig(CodeTaskConfig):
    template: str = "instruct"
    """Prompt template: instruct (lm-evaluation-harness's wording with the three tests) or chat."""


@TASKS.register("mbpp")
class MBPP(CodeBenchmark):
    Config = MBPPConfig
    description = "MBPP sanitized (257 test tasks), function written from the text and its three asserts"
    sources = {
        "train": Source(
            "google-research-datasets/mbpp", "train+validation+prompt", "sanitized", "mbpp/sanitized-mbpp.json"
        ),
        "eval": Source("google-research-datasets/mbpp", "test", "sanitized", "mbpp/sanitized-mbpp.json"),
    }
    fields = (("task_id",), ("prompt",), ("code",), ("test_list",))
    templates = ("instruct", "chat")
    TEST_IDS = range(11, 511)  # the standard test split

    def row(self, raw, split):
        tid = int(raw["task_id"])
        in_test = tid in self.TEST_IDS
        if (split == "eval") != in_test:  # the local file holds every split
            return None
        tests = list(raw["test_list"])
        setup = "\n".join(raw.get("test_imports") or [])
        return {
            "id": f"mbpp/{tid}",
            "question": raw["prompt"],
            "answer": raw["code"],
            "test": f"{setup}\n" + "\n".join(tests) + "\n",
            "shown_tests": "\n".join(tests),
            "entry_point": _entry_point(raw["code"], tests),
        }

    def prompt(self, row, tokenizer=None) -> str:
        text = (
            f"You are an expert Python programmer, and here is your task: {row['question']} "
            f"Your code should pass these tests:\n\n{row['shown_tests']}\n"
        )
        if self.config.template == "instruct":
            return text
        return chat_prompt(text + "Reply with the code in one ```python code block.", tokenizer)

    def program(self, completion: str, row: dict[str, Any]) -> str:
        blocks = fenced_blocks(completion)
        if blocks:
            return next((b for b in blocks if defines(b, row["entry_point"])), blocks[-1])
        return completion.split("[DONE]")[0]


def _helpers(prompt: str, entry_point: str) -> str:
    """The prompt's own code that its tests use (HumanEval 32, 38 and 50 call a function the prompt
    defines, e.g. ``encode_cyclic``): every top-level statement but the entry point's stub, to run
    with the tests, on the trusted side, rather than as part of the model's program."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    keep = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name == entry_point)]
    return "".join(ast.get_source_segment(prompt, n, padded=True) + "\n" for n in keep) + "\n"


def _entry_point(code: str, tests: list[str]) -> str:
    """The function the asserts call: the first function the reference defines that they name."""
    names = re.findall(r"^\s*def\s+(\w+)\s*\(", code, re.MULTILINE)
    joined = "\n".join(tests)
    return next((n for n in names if re.search(rf"\b{n}\s*\(", joined)), names[0] if names else "")
