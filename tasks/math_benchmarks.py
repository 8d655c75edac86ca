"""The math benchmarks the papers train and evaluate on, graded by the one math-verify grader.

========== ============================================ =========================================
task       eval split (local file / Hub dataset)        train split
========== ============================================ =========================================
gsm8k      gsm8k/test.jsonl / openai/gsm8k main test    gsm8k/train.jsonl / openai/gsm8k train
math       math/test.jsonl (5000) / MATH-lighteval test MATH train: deepscaler_train/math.json /
                                                        DigitalLearningGmbH/MATH-lighteval train,
                                                        filtered by ``levels``, MATH-500 removed
math500    math500/test.jsonl / HuggingFaceH4/MATH-500  as ``math``
aime24     aime24/test.jsonl / HuggingFaceH4/aime_2024  AIME 1983-2023: deepscaler_train/aime.json
                                                        / di-zhang-fdu/AIME_1983_2024 (year<=2023)
aime25     aime25/test.jsonl / math-ai/aime25 test      as ``aime24``
amc23      amc23/test.jsonl / math-ai/amc23 test        (none)
minerva    minerva_math/test.jsonl / math-ai/minervamath (none)
olympiadbench olympiadbench/test.jsonl / Hothan/OlympiadBench OE_TO_maths_en_COMP   (none)
========== ============================================ =========================================

Local paths are relative to the data directory (the ``data_dir`` option or ``$CREDITBENCH_DATA``);
they are the upstream files' own names and layout. Each dataset's gold answer follows its own
convention: GSM8K after the last ``####`` (commas removed), MATH in the last ``\\boxed{}`` of the
solution (balanced braces), AIME as an integer (``"025"`` -> ``25``), AMC's floats as integers
when integral, OlympiadBench's one-item ``final_answer`` list without its ``$``.

Prompt templates (``template``):
- ``qwen-math`` (default): the Qwen2.5-Math chain-of-thought prompt used by Dr. GRPO and the
  papers that start from Qwen2.5-Math base models (system "Please reason step by step, and put
  your final answer within \\boxed{}." in ChatML).
- ``chat``: the question plus that instruction through the tokenizer's own chat template, when it
  has one (else the plain ``instruct`` text).
- ``instruct``: the question plus the instruction as plain text (no chat markup).
- ``compact``: ``{question}; \\boxed{}:`` for the tiny character-level models.
- ``boxed-problem``: "Solve this math problem step by step. Put your final answer in \\boxed{}."
  then ``Problem: {question}`` as plain text, the prompt of ARCA's official code (its data.py) for
  base models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bench.core import Outcome, Task, TaskConfig, check
from bench.errors import CreditBenchError
from bench.registry import TASKS
from tasks.data import Source, data_dir, first, load_rows, require, to_dataset
from tasks.grading.math_grader import MathGrader
from tasks.grading.math_verdict import marked_answer
from tasks.prompts import chat_prompt

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = {
    "qwen-math": "<|im_start|>system\n" + INSTRUCTION + "<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
    "<|im_start|>assistant\n",
    "chat": None,  # the tokenizer's chat template
    "instruct": "{question}\n" + INSTRUCTION,
    "compact": "{question}; \\boxed{}:",
    "boxed-problem": "Solve this math problem step by step. Put your final answer in \\boxed{}.\n\n"
    "Problem: {question}\n",
}


@dataclass(frozen=True)
class MathTaskConfig(TaskConfig):
    template: str = "qwen-math"
    """Prompt template: qwen-math, chat, instruct or compact (see the module docstring)."""
    data_dir: str | None = None
    """Directory holding the upstream files (e.g. gsm8k/test.jsonl); default $CREDITBENCH_DATA,
    else the Hugging Face Hub."""
    grader_timeout: int = 5
    """Seconds math-verify may spend on each parse/compare of one completion."""
    grader_workers: int | None = None
    """Grading processes (None: min(2, cpus); 0: in the calling thread, no hard timeout)."""

    def __post_init__(self) -> None:
        check(self.template in TEMPLATES, f"unknown template {self.template!r}; valid: {', '.join(TEMPLATES)}")
        check(self.grader_timeout >= 1, f"grader_timeout must be >= 1 second, got {self.grader_timeout}")
        check(
            self.grader_workers is None or self.grader_workers >= 0,
            f"grader_workers must be >= 0 (or null for auto), got {self.grader_workers}",
        )


# ------------------------------------------------------------------ gold-answer conventions
def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def gsm8k_answer(solution: str) -> str:
    """The text after the last ``####`` (the whole solution without one), commas removed."""
    answer = marked_answer(solution)
    return (solution.strip() if answer is None else answer).replace(",", "")


def integer_answer(value: Any) -> str:
    """AIME/AMC answers: ``"025"`` -> ``"25"``, ``27.0`` -> ``"27"``; non-integral floats kept."""
    x = float(value)
    return str(int(x)) if x.is_integer() else repr(x)


def strip_math_delimiters(text: str) -> str:
    """Remove unescaped ``$`` (``"69$,$84"`` -> ``"69,84"``; ``\\$5`` stays) and a trailing period."""
    return re.sub(r"(?<!\\)\$", "", text).strip().rstrip(".").strip()


def olympiad_answer(final_answer: list[str] | str) -> str:
    """OlympiadBench's one-item ``final_answer`` list; multiple answers are joined by ``$,$``."""
    return strip_math_delimiters(final_answer[0] if isinstance(final_answer, list) else final_answer)


def math_level(row: dict[str, Any]) -> int:
    """MATH level 1-5 from ``level`` ("Level 3" or 3) or DeepScaleR's ``difficulty`` (3.0); 0 if unknown."""
    value = row.get("level", row.get("difficulty"))
    m = re.search(r"\d", str(value)) if value is not None else None
    return int(m.group()) if m else 0


def _problem_key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# ------------------------------------------------------------------ the task family
class MathBenchmark(Task):
    """A math dataset: sources per split, a normaliser per row, and the shared grader.

    Rows have ``id``, ``question``, ``answer`` (the gold string), ``level`` (0 if unknown) and
    ``subject``; subclasses set ``sources`` and :meth:`row`.
    """

    Config = MathTaskConfig
    VERSION = "1"
    sources: ClassVar[dict[str, Source]] = {}
    fields: ClassVar[tuple[tuple[str, ...], ...]] = (("problem", "question"),)

    def __init__(self, config: MathTaskConfig | None = None):
        super().__init__(config)
        self.grader = MathGrader(timeout=self.config.grader_timeout, workers=self.config.grader_workers)

    @property
    def splits(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self.sources)

    def load(self, split: str):
        if split not in self.sources:
            raise CreditBenchError(f"task {self.name!r} has no {split!r} split; valid: {', '.join(self.sources)}")
        source = self.sources[split]
        raw, where = load_rows(self.name, source, data_dir(self.config.data_dir))
        require(raw, where, *self.fields)
        rows = []
        for i, r in enumerate(raw):
            try:
                row = self.row(r, i, split)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                raise CreditBenchError(
                    f"{where} has the wrong schema: row {i} cannot be read "
                    f"({type(e).__name__}: {e}); fields: {', '.join(sorted(r))}"
                ) from None
            if row is not None:
                rows.append(
                    {
                        "id": str(row.get("id", f"{split}/{i}")),
                        "question": row["question"],
                        "answer": row["answer"],
                        "level": int(row.get("level", 0)),
                        "subject": str(row.get("subject", "")),
                    }
                )
        rows = self.filter(rows, split)
        if not rows:
            raise CreditBenchError(f"task {self.name!r}: the {split} split of {where} is empty after filtering")
        return to_dataset(rows)

    def row(self, raw: dict[str, Any], index: int, split: str) -> dict[str, Any] | None:
        """The normalised row (or None to drop it, e.g. a row without a gold answer)."""
        raise NotImplementedError

    def filter(self, rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
        return rows

    def prompt(self, row: dict[str, Any], tokenizer=None) -> str:
        template = self.config.template
        if template == "chat":
            return chat_prompt(TEMPLATES["instruct"].replace("{question}", row["question"]), tokenizer)
        return TEMPLATES[template].replace("{question}", row["question"])

    def verify(self, completions: list[str], rows: list[dict[str, Any]], details: bool = True) -> list[Outcome]:
        return self.grader(completions, [r["answer"] for r in rows], flexible=details)


@TASKS.register("gsm8k")
class GSM8K(MathBenchmark):
    description = "grade-school word problems (GSM8K, 1319 test / 7473 train), answer after ####"
    sources = {
        "train": Source("openai/gsm8k", "train", "main", "gsm8k/train.jsonl"),
        "eval": Source("openai/gsm8k", "test", "main", "gsm8k/test.jsonl"),
    }
    fields = (("question",), ("answer",))

    def row(self, raw, index, split):
        return {"id": f"gsm8k/{split}/{index}", "question": raw["question"], "answer": gsm8k_answer(raw["answer"])}


@dataclass(frozen=True)
class MATHConfig(MathTaskConfig):
    levels: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    """MATH levels kept in the train split (e.g. [3, 4, 5] as SimpleRL-Zoo and Dr. GRPO train)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [lv for lv in self.levels if lv not in (1, 2, 3, 4, 5)]
        check(self.levels and not bad, f"levels must be a non-empty subset of 1-5, got {self.levels}")


MATH_TRAIN = Source("DigitalLearningGmbH/MATH-lighteval", "train", None, "deepscaler_train/math.json")
MATH500 = Source("HuggingFaceH4/MATH-500", "test", None, "math500/test.jsonl")


class _MATHFamily(MathBenchmark):
    Config = MATHConfig

    def row(self, raw, index, split):
        answer = raw.get("answer") or last_boxed(raw.get("solution") or "")
        if not answer:  # two DeepScaleR rows have no answer
            return None
        rid = raw.get("unique_id") or (f"math/{split}/{raw['idx']}" if "idx" in raw else f"math/{split}/{index}")
        return {
            "id": rid,
            "question": raw["problem"],
            "answer": str(answer),
            "level": math_level(raw),
            "subject": raw.get("subject") or raw.get("type") or "",
        }

    def filter(self, rows, split):
        if split != "train":
            return rows
        rows = [r for r in rows if r["level"] in self.config.levels]
        # MATH-500 must never be trained on: drop any train problem that is also a MATH-500 problem
        held_out, _ = load_rows(self.name, MATH500, data_dir(self.config.data_dir))
        banned = {_problem_key(r["problem"]) for r in held_out}
        return [r for r in rows if _problem_key(r["question"]) not in banned]


@TASKS.register("math")
class MATH(_MATHFamily):
    description = "MATH competition problems: train on MATH train (levels filter), eval on the full 5000 test"
    sources = {
        "train": MATH_TRAIN,
        "eval": Source("DigitalLearningGmbH/MATH-lighteval", "test", None, "math/test.jsonl"),
    }
    fields = (("problem",), ("answer", "solution"))


@TASKS.register("math500")
class MATH500Task(_MATHFamily):
    description = "MATH-500 (PRM800K's 500-problem test split); train on MATH train"
    sources = {"train": MATH_TRAIN, "eval": MATH500}
    fields = (("problem",), ("answer", "solution"))


AIME_TRAIN = Source("di-zhang-fdu/AIME_1983_2024", "train", None, "deepscaler_train/aime.json")


class _AIME(MathBenchmark):
    fields = (("problem", "Problem", "question", "Question"), ("answer", "Answer"))

    def row(self, raw, index, split):
        year = raw.get("year", raw.get("Year"))
        if split == "train" and year is not None and int(year) > 2023:  # the Hub copy also has 2024
            return None
        return {
            "id": f"{self.name}/{split}/{raw.get('id', raw.get('ID', index))}",
            "question": first(raw, "problem", "Problem", "question", "Question"),
            "answer": integer_answer(first(raw, "answer", "Answer")),
        }


@TASKS.register("aime24")
class AIME24(_AIME):
    description = "AIME 2024 I and II (30 problems, integer answers); train on AIME 1983-2023"
    sources = {"train": AIME_TRAIN, "eval": Source("HuggingFaceH4/aime_2024", "train", None, "aime24/test.jsonl")}


@TASKS.register("aime25")
class AIME25(_AIME):
    description = "AIME 2025 I and II (30 problems, integer answers); train on AIME 1983-2023"
    sources = {"train": AIME_TRAIN, "eval": Source("math-ai/aime25", "test", None, "aime25/test.jsonl")}


@TASKS.register("amc23")
class AMC23(MathBenchmark):
    description = "AMC 12 2023 A and B (40 problems, numeric answers)"
    sources = {"eval": Source("math-ai/amc23", "test", None, "amc23/test.jsonl")}
    fields = (("problem", "question"), ("answer",))

    def row(self, raw, index, split):
        return {
            "id": f"amc23/{raw.get('id', index)}",
            "question": first(raw, "problem", "question"),
            "answer": integer_answer(raw["answer"]),
        }


@TASKS.register("minerva")
class Minerva(MathBenchmark):
    description = "Minerva Math (272 MIT OCW science problems, answers with units and precision)"
    sources = {"eval": Source("math-ai/minervamath", "test", None, "minerva_math/test.jsonl")}
    fields = (("problem", "question"), ("solution", "answer"))

    def row(self, raw, index, split):
        answer = raw["answer"] if "answer" in raw else last_boxed(raw["solution"])
        if answer is None:
            raise ValueError("the solution has no \\boxed{} answer")
        return {
            "id": f"minerva/{raw.get('idx', index)}",
            "question": first(raw, "problem", "question"),
            "answer": strip_math_delimiters(str(answer)),
            "subject": raw.get("type", ""),
        }


@TASKS.register("olympiadbench")
class OlympiadBench(MathBenchmark):
    description = "OlympiadBench OE_TO_maths_en_COMP (675 text-only English competition problems)"
    sources = {"eval": Source("Hothan/OlympiadBench", "train", "OE_TO_maths_en_COMP", "olympiadbench/test.jsonl")}
    fields = (("question",), ("final_answer",))

    def row(self, raw, index, split):
        return {
            "id": f"olympiadbench/{raw.get('id', index)}",
            "question": raw["question"],
            "answer": olympiad_answer(raw["final_answer"]),
            "subject": raw.get("subfield") or "",
        }
