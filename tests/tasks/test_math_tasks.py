"""The math benchmarks: loading from a data directory (the real files), gold-answer conventions,
prompt templates, decontamination, and one-line errors for missing files and wrong schemas."""

import json

import pytest
from shared_data import DATA, needs_data

from bench.errors import CreditBenchError
from bench.gold_check import THRESHOLD, check_rows, shifted
from bench.registry import TASKS
from tasks.data import DATA_ENV
from tasks.math_benchmarks import integer_answer, last_boxed, olympiad_answer

MATH_TASKS = ["gsm8k", "math", "math500", "aime24", "aime25", "amc23", "minerva", "olympiadbench"]
EXPECTED = {
    ("gsm8k", "train"): 7473,
    ("gsm8k", "eval"): 1319,
    ("math", "eval"): 5000,
    ("math500", "eval"): 500,
    ("aime24", "train"): 975,
    ("aime24", "eval"): 30,
    ("aime25", "eval"): 30,
    ("amc23", "eval"): 40,
    ("minerva", "eval"): 272,
    ("olympiadbench", "eval"): 675,
}
LEVEL_3_TO_5 = 5559  # SOURCES.md counts 5563 DeepScaleR MATH rows at difficulty >= 3; 4 have no answer


def task(name, **options):
    cls = TASKS.get(name)
    return cls(cls.Config(**{"data_dir": str(DATA), **options}))


@needs_data
@pytest.mark.parametrize("name", MATH_TASKS)
def test_every_split_loads_with_the_common_schema(name):
    t = task(name)
    assert t.VERSION and t.description
    for split in t.splits:
        rows = t.load(split)
        assert set(rows.column_names) == {"id", "question", "answer", "level", "subject"}
        if (name, split) in EXPECTED:
            assert len(rows) == EXPECTED[(name, split)]
        assert all(r["question"].strip() and r["answer"].strip() for r in rows)
        assert len(set(rows["id"])) == len(rows)


@needs_data
def test_gold_answer_conventions():
    gsm = task("gsm8k").load("eval")
    assert gsm[0]["answer"] == "18" and not any("," in a for a in gsm["answer"])
    aime = task("aime24").load("eval")
    assert all(a == str(int(a)) and 0 <= int(a) <= 999 for a in aime["answer"])  # "025" -> "25"
    assert task("amc23").load("eval")[0]["answer"] == "27"  # 27.0 -> "27"
    oly = task("olympiadbench").load("eval")
    assert not any("$" in a for a in oly["answer"])
    assert task("aime25").load("eval")[0]["answer"] == "70"  # a JSON int upstream


def test_answer_helpers():
    assert last_boxed("so \\boxed{1} then \\boxed{\\frac{a}{b^{2}}} done") == "\\frac{a}{b^{2}}"
    assert last_boxed("no box") is None and last_boxed("\\boxed{unclosed") is None
    assert integer_answer("025") == "25" and integer_answer(27.0) == "27" and integer_answer(2.5) == "2.5"
    assert olympiad_answer(["$69$,$84$"]) == "69,84" and olympiad_answer(["$\\$5$."]) == "\\$5"
    assert shifted("\\frac{3}{4}") == "\\frac{4}{4}" and shifted("52_8") == "53_8" and shifted("x") == "x+1"


@needs_data
def test_math_train_filters_levels_and_never_contains_math500():
    from tasks.math_benchmarks import _problem_key

    train = task("math", levels=[3, 4, 5]).load("train")
    assert len(train) == LEVEL_3_TO_5 and set(train["level"]) == {3, 4, 5}
    held_out = {_problem_key(q) for q in task("math500").load("eval")["question"]}
    assert held_out.isdisjoint(_problem_key(q) for q in task("math").load("train")["question"])


def test_math_train_drops_math500_problems(tmp_path):
    (tmp_path / "deepscaler_train").mkdir()
    (tmp_path / "math500").mkdir()
    shared = "What is $1+1$?"
    rows = [
        {"problem": shared, "answer": "2", "difficulty": 1.0, "type": "Algebra"},
        {"problem": "What is $2+2$?", "answer": "4", "difficulty": 1.0, "type": "Algebra"},
        {"problem": "What is $3+3$?", "answer": None, "difficulty": 1.0, "type": "Algebra"},
    ]
    (tmp_path / "deepscaler_train" / "math.json").write_text(json.dumps(rows))
    (tmp_path / "math500" / "test.jsonl").write_text(
        json.dumps(
            {
                "problem": shared + "  ",
                "solution": "\\boxed{2}",
                "answer": "2",
                "subject": "Algebra",
                "level": 1,
                "unique_id": "test/algebra/1.json",
            }
        )
        + "\n"
    )
    train = TASKS.get("math500")(TASKS.get("math500").Config(data_dir=str(tmp_path))).load("train")
    assert train["question"] == ["What is $2+2$?"]  # the MATH-500 problem and the answerless row are gone


@needs_data
def test_data_directory_from_the_environment(monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(DATA))
    cls = TASKS.get("amc23")
    assert len(cls().load("eval")) == 40


def test_missing_file_wrong_schema_and_missing_split(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    cls = TASKS.get("gsm8k")
    with pytest.raises(CreditBenchError, match=r"data file '.*gsm8k/test.jsonl' not found"):
        cls(cls.Config(data_dir=str(tmp_path))).load("eval")
    with pytest.raises(CreditBenchError, match="data directory '/no/such/dir' does not exist"):
        cls(cls.Config(data_dir="/no/such/dir")).load("eval")
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"q": "1+1", "a": "2"}\n')
    with pytest.raises(CreditBenchError, match=r"wrong schema: row 0 lacks question, answer \(it has: a, q\)"):
        cls(cls.Config(data_dir=str(tmp_path))).load("eval")
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "1+1", "answer": 2}\n')
    with pytest.raises(CreditBenchError, match="wrong schema: row 0 cannot be read"):
        cls(cls.Config(data_dir=str(tmp_path))).load("eval")
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "1+1",\n')
    with pytest.raises(CreditBenchError, match="could not read"):
        cls(cls.Config(data_dir=str(tmp_path))).load("eval")
    amc = TASKS.get("amc23")
    with pytest.raises(CreditBenchError, match="has no 'train' split; valid: eval"):
        amc(amc.Config(data_dir=str(tmp_path))).load("train")


def test_hub_loading_offline_says_how_to_use_a_local_copy(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cls = TASKS.get("aime25")
    with pytest.raises(
        CreditBenchError,
        match=r"could not load math-ai/aime25 split test from the Hugging Face Hub.*"
        r"CREDITBENCH_DATA.*aime25/test.jsonl",
    ):
        cls().load("eval")


def test_prompt_templates():
    from bench.models.policy import char_tokenizer

    row = {"question": "What is $1+1$?"}
    cls = TASKS.get("math500")
    qwen = cls(cls.Config(template="qwen-math")).prompt(row)
    assert qwen.startswith(
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    assert qwen.endswith("What is $1+1$?<|im_end|>\n<|im_start|>assistant\n")
    tok = char_tokenizer()
    plain = cls(cls.Config(template="chat")).prompt(row, tok)  # no chat template: the plain instruction
    assert plain == "What is $1+1$?\nPlease reason step by step, and put your final answer within \\boxed{}."
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    assert cls(cls.Config(template="chat")).prompt(row, tok) == f"[user] {plain}\n[assistant] "
    assert cls(cls.Config(template="compact")).prompt(row) == "What is $1+1$?; \\boxed{}:"
    with pytest.raises(CreditBenchError, match="valid: qwen-math, chat, instruct, compact"):
        cls.Config(template="qwen")
    with pytest.raises(CreditBenchError, match="levels must be a non-empty subset of 1-5"):
        TASKS.get("math").Config(levels=[0, 3])


@needs_data
@pytest.mark.parametrize("name", MATH_TASKS)
def test_gold_answers_grade_correct_and_shifted_answers_wrong_on_a_sample(name):
    """The full check over every row is ``python -m bench.gold_check`` (results/tasks/gold_check.md)
    and the slow test below; here the first 25 rows of the eval split."""
    t = task(name)
    res = check_rows(t, list(t.load("eval").select(range(25))))
    assert res["gold_correct_strict"] == res["gold_correct_flexible"] == 1.0, res["failures"]
    assert res["shifted_wrong_strict"] == 1.0, res["failures"]


@needs_data
@pytest.mark.slow
def test_gold_check_on_every_row_of_every_math_dataset():
    from bench.gold_check import datasets, run

    names = datasets(str(DATA))
    assert len(names) == 11  # every math file in the data directory, once
    results = run(str(DATA), names)
    for key, r in results.items():
        for rate in ("gold_correct_strict", "gold_correct_flexible", "shifted_wrong_strict", "shifted_wrong_flexible"):
            assert r[rate] >= THRESHOLD, (key, rate, r[rate], r["failures"])
