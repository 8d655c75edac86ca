import pytest
import torch

from bench.numerics import AGGREGATIONS, aggregate, entropy_from_logits, k3_kl, masked_mean, token_logprobs

LOSS = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


def test_aggregation_modes_hand_worked():
    """Valid tokens: seq 0 = [1, 2, 3] (L=3), seq 1 = [4] (L=1); N = 4, B = 2, L_max = 4.

    token-mean:              (1+2+3+4)/4           = 2.5
    seq-mean-token-mean:     ((6/3) + (4/1)) / 2   = 3.0
    seq-mean-token-sum:      (6 + 4) / 2           = 5.0
    seq-mean-token-sum-norm: (6 + 4) / (2*4)       = 1.25
    """
    assert aggregate(LOSS, MASK, "token-mean") == pytest.approx(2.5)
    assert aggregate(LOSS, MASK, "seq-mean-token-mean") == pytest.approx(3.0)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum") == pytest.approx(5.0)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", max_len=4) == pytest.approx(1.25)
    assert set(AGGREGATIONS) == {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"}


@pytest.mark.parametrize("mode", list(AGGREGATIONS))
def test_micro_batches_with_global_counts_sum_to_the_whole(mode):
    torch.manual_seed(0)
    loss = torch.randn(6, 5)
    mask = (torch.rand(6, 5) > 0.3).long()
    mask[:, 0] = 1
    whole = aggregate(loss, mask, mode, max_len=5)
    parts = sum(
        aggregate(loss[i : i + 2], mask[i : i + 2], mode, max_len=5, num_tokens=mask.sum(), num_seqs=6)
        for i in range(0, 6, 2)
    )
    assert parts == pytest.approx(float(whole), abs=1e-6)


def test_unknown_aggregation_names_the_choices():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, MASK, "mean")


def test_k3_kl_hand_worked_and_nonnegative():
    # d = log pi_ref - log pi = log 2 => e^d - d - 1 = 2 - log 2 - 1
    logp = torch.log(torch.tensor([0.25]))
    ref = torch.log(torch.tensor([0.5]))
    assert k3_kl(logp, ref) == pytest.approx(1 - torch.log(torch.tensor(2.0)).item())
    assert k3_kl(logp, logp) == pytest.approx(0.0)
    assert (k3_kl(torch.randn(100), torch.randn(100)) >= 0).all()


def test_token_logprobs_and_entropy():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]])
    lp = token_logprobs(logits, torch.tensor([[3, 0]]))
    assert lp[0, 0] == pytest.approx(torch.log(torch.tensor(0.25)).item())
    assert lp[0, 1] == pytest.approx(2.0 - torch.logsumexp(torch.tensor([2.0, 0, 0, 0]), 0).item())
    ent = entropy_from_logits(logits)
    assert ent[0, 0] == pytest.approx(torch.log(torch.tensor(4.0)).item())
    # temperature scales logits before the softmax
    assert token_logprobs(logits, torch.tensor([[0, 0]]), temperature=2.0)[0, 1] == pytest.approx(
        1.0 - torch.logsumexp(torch.tensor([1.0, 0, 0, 0]), 0).item()
    )


def test_masked_mean_empty_mask_is_zero():
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)) == 0
    assert masked_mean(LOSS, MASK) == pytest.approx(2.5)
