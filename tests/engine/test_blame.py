"""Blame alignment (bench/engine/blame.py): the blame token found from a character offset, the
alignment numbers on credit worked out by hand, the probe set found on a real policy (and kept
through a checkpoint), and the module measuring it at every eval point of a short run."""

from dataclasses import dataclass

import pytest
import torch

from bench.config import EvalConfig, RLConfig, SamplingConfig
from bench.core import Outcome
from bench.engine.blame import (
    alignment,
    blame_probe_from_state,
    blame_probe_state,
    char_to_token,
    find_blame_probe,
)
from bench.engine.module import RLVRModule
from bench.models.policy import char_tokenizer, load_policy
from bench.registry import TASKS
from methods.grpo import GRPO, GRPOConfig

Arithmetic = TASKS.get("arithmetic")


@dataclass(frozen=True)
class BlamedOutcome(Outcome):
    blame: int | None = None


class NoCapitals(Arithmetic):
    """Arithmetic's problems, graded so that a random policy's groups mix: an answer is right when it
    has no capital letter, and goes wrong at its first one."""

    def verify(self, completions, rows, details=True):
        out = []
        for text in completions:
            first = next((i for i, ch in enumerate(text) if ch.isupper()), None)
            out.append(BlamedOutcome(float(first is None), first is None, blame=first))
        return out


if "no-capitals" not in TASKS.names():  # this module is also imported by tests/run/test_per_problem.py
    TASKS.register("no-capitals")(NoCapitals)


def bpe_tokenizer():
    """A GPT-2 style byte-level BPE tokenizer trained on a few arithmetic scratchpads: multi-character tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["12+34=46,46-10=36,\\boxed{36}", "the answer is 36", "12+30=42, so \\boxed{42}"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def test_char_to_token_is_the_identity_on_the_character_tokenizer():
    tok = char_tokenizer()
    text = "12+34=46,\\boxed{46}"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert [char_to_token(tok, ids, i) for i in range(len(text))] == list(range(len(text)))
    assert char_to_token(tok, ids, len(text)) == len(text), "the end of the text is the eos token"
    assert char_to_token(tok, ids[:-1], len(text)) is None and char_to_token(tok, ids, len(text) + 1) is None


def test_char_to_token_on_multi_character_tokens():
    tok = bpe_tokenizer()
    text = "12+34=46, so \\boxed{46}"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    pieces = [tok.decode([i]) for i in ids]
    assert max(len(p) for p in pieces) > 1 and "".join(pieces) == text + "<eos>"
    starts = [sum(len(p) for p in pieces[:j]) for j in range(len(pieces))]
    for offset in range(len(text)):
        j = char_to_token(tok, ids, offset)
        assert starts[j] <= offset < starts[j] + len(pieces[j]), (offset, pieces[j])
    assert char_to_token(tok, ids, len(text)) == len(ids) - 1


def test_uniform_credit_shares_one_over_length_and_ranks_at_chance():
    """Row 0 has 4 tokens of credit 0.5 each, blame on token 2: share 1/4, all four tie, so the mid-rank
    is 1 + 3/2 = 2.5 and rank_frac (2.5 - 1) / 3 = 0.5; row 1 (2 tokens, credit -1, blame 0) gives
    share 1/2, rank 1.5, rank_frac 0.5. Neither is top-1."""
    credit = torch.tensor([[0.5, 0.5, 0.5, 0.5], [-1.0, -1.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    got = alignment(credit, mask, [0, 1], [2, 0])
    assert got == pytest.approx(
        {"share": 0.375, "rank": 2.0, "rank_frac": 0.5, "top1": 0.0, "uniform_share": 0.375, "n": 2.0}
    )


def test_credit_on_the_blame_token_alone_shares_one_and_ranks_first():
    """Row 0: all credit on its blame token, share 1, rank 1, top-1; row 1 gets no credit and is left
    out. Then |credit| [2, 1, 0.5, 0] with the blame on 0.5: share 0.5 / 3.5, two tokens above it,
    rank 3 and rank_frac 2/3."""
    credit = torch.tensor([[0.0, -3.0, 0.0], [0.0, 0.0, 0.0]])
    assert alignment(credit, torch.ones(2, 3), [0, 1], [1, 0]) == pytest.approx(
        {"share": 1.0, "rank": 1.0, "rank_frac": 0.0, "top1": 1.0, "uniform_share": 1 / 3, "n": 1.0}
    )
    got = alignment(torch.tensor([[2.0, -1.0, 0.5, 0.0]]), torch.ones(1, 4), [0], [2])
    assert got == pytest.approx(
        {"share": 0.5 / 3.5, "rank": 3.0, "rank_frac": 2 / 3, "top1": 0.0, "uniform_share": 0.25, "n": 1.0}
    )
    assert alignment(torch.zeros(1, 3), torch.ones(1, 3), [0], [1]) == {"n": 0.0}


def _module(policy_dir, task, max_new_tokens=8):
    model, tok = load_policy(policy_dir)
    rl = RLConfig(
        steps=2, prompts_per_step=4, group_size=8, lr=1e-3, sampling=SamplingConfig(max_new_tokens=max_new_tokens)
    )
    ev = EvalConfig(every=1, n=2, k=[1, 2], num_problems=4)
    return RLVRModule(model, tok, GRPO(GRPOConfig(kl_coef=0.0)), task, "no-capitals", rl, ev), rl


def test_blame_probe_holds_failed_rows_of_mixed_groups_and_survives_a_checkpoint(policy_dir):
    task = NoCapitals(Arithmetic.Config(train_size=500))
    module, rl = _module(policy_dir, task)
    rows = list(task.load("eval").select(range(16)))
    probe = find_blame_probe(module.sampler, rows, rl, [], max_rows=20)
    assert probe is not None
    batch = probe.batch
    assert batch.size % rl.group_size == 0 and len(probe.rows) == len(probe.tokens) == 20
    for g in range(batch.size // rl.group_size):  # every group mixes
        r = batch.rewards[g * rl.group_size : (g + 1) * rl.group_size]
        assert r.max() > r.min()
    for row, token in zip(probe.rows, probe.tokens):  # the blame token is the first capital letter
        assert not batch.correct[row]
        ids = batch.completion_ids[row][batch.completion_mask[row].bool()].tolist()
        assert module.tokenizer.decode([ids[token]]).isupper()
        assert not any(ch.isupper() for ch in module.tokenizer.decode(ids[:token]))
    again = find_blame_probe(module.sampler, rows, rl, [], max_rows=20)
    assert torch.equal(again.batch.completion_ids, batch.completion_ids), "a fixed seed: the same probe"
    restored = blame_probe_from_state(blame_probe_state(probe))
    assert (restored.rows, restored.tokens) == (probe.rows, probe.tokens)
    assert torch.equal(restored.batch.completion_ids, batch.completion_ids)
    module._blame_probe = probe
    a, b = module.blame(), module.blame()
    assert a == b and a["n"] == 20 and 0 < a["share"] <= 1 and 0 <= a["rank_frac"] <= 1
    # GRPO's credit is the same on every token of a row: the share is 1/L and the rank is chance
    assert a["share"] == pytest.approx(a["uniform_share"]) and a["rank_frac"] == pytest.approx(0.5)


class NoCapitalsUnblamed(NoCapitals):
    """The same verdicts, mixed in most groups, without saying where an answer went wrong."""

    def verify(self, completions, rows, details=True):
        return [Outcome(o.reward, o.correct) for o in super().verify(completions, rows, details)]


def test_a_task_without_blame_has_no_probe(policy_dir):
    task = NoCapitalsUnblamed(Arithmetic.Config(train_size=500))
    module, rl = _module(policy_dir, task)
    assert not module.make_blame_probe(list(task.load("eval").select(range(4))))
    assert module.blame() == {}


def test_the_credit_map_names_its_blame_token(policy_dir):
    task = NoCapitals(Arithmetic.Config(train_size=500))
    module, _ = _module(policy_dir, task)
    assert module.make_fixed_sets(list(task.load("eval").select(range(8))))
    probe = module.measure_credit_map()
    text = "".join(probe["completion_tokens"])
    assert probe["reward"] == 0.0 and probe["completion_tokens"][probe["blame"]].isupper()
    assert not any(ch.isupper() for ch in text[: probe["blame"]])


def test_the_credit_map_outlines_the_blame_token(tmp_path, monkeypatch):
    """The blame token's box (and only it) is drawn with the red outline, in every method's row."""
    from matplotlib.patches import Rectangle

    from bench.report.plots.common import LineStyle
    from bench.report.plots.credit import BLAME_COLOR, plot_credit_map

    cm = {"prompt": "12+34", "completion_tokens": list("46,\\boxed{46}"), "reward": 0.0, "blame": 1}
    cm["methods"] = {"grpo": [0.5] * 13, "other": [float(i) for i in range(13)]}
    outlined = []
    real = Rectangle.__init__

    def record(self, xy, *args, **kwargs):
        real(self, xy, *args, **kwargs)
        if kwargs.get("edgecolor") == BLAME_COLOR:
            outlined.append(xy)

    monkeypatch.setattr(Rectangle, "__init__", record)
    path = plot_credit_map("tiny-500k", cm, LineStyle({"credit_maps": {"tiny-500k": cm}}), tmp_path / "map.png")
    assert path is not None and path.stat().st_size > 0
    assert [round(x) for x, _ in outlined] == [1, 1], "token 1, once per method row"


class _Placed(torch.nn.Module):
    """A module that records where it is asked to go (a CUDA device cannot be reached here)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.moves: list[str] = []

    def to(self, device):
        self.moves.append(str(device))
        return self


def test_probes_are_made_on_the_trainers_device_and_scored_where_the_policy_is():
    """Lightning's validate() leaves the module on the CPU before fit(): the probe is made on the
    trainer's device and the policies go back after; a probe batch from a checkpoint (on the CPU)
    follows the policy when it is scored."""
    from bench.engine.credit_map import moved_to

    policy, ref = _Placed(), _Placed()
    with moved_to(torch.device("cuda", 0), policy, None, ref):
        assert policy.moves == ref.moves == ["cuda:0"]
    assert policy.moves == ref.moves == ["cuda:0", "cpu"]
    for device in (None, torch.device("cpu")):  # no trainer, or already there: nothing moves
        with moved_to(device, policy):
            pass
    assert policy.moves == ["cuda:0", "cpu"]
    batch = _batch_for_devices()
    moved = batch.to("cpu")
    assert moved is not batch and moved.extra is not batch.extra
    assert torch.equal(moved.completion_ids, batch.completion_ids) and torch.equal(moved.extra["w"], batch.extra["w"])
    assert moved.prompts == batch.prompts and moved.max_new_tokens == batch.max_new_tokens


def _batch_for_devices():
    from bench.core import RolloutBatch

    ids = torch.ones(2, 3, dtype=torch.long)
    return RolloutBatch(
        ids,
        ids,
        ids,
        ids,
        torch.tensor([0, 0]),
        torch.zeros(2),
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.bool),
        3,
        extra={"w": torch.ones(2)},
        prompts=["a", "b"],
    )
