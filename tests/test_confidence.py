"""``pmin=``: a level-0 draft model that ends its draft where its top share is below P, as
llama-server's draft-simple does: the spec, where the executor runs it, and the profiler's draft
lengths against what the executor drafts."""

import pytest
import torch

from hsd_planner.profiling.acceptance import confident_lengths, teacher_forced_logits
from hsd_runtime import ChainError, Hierarchy, ModelSpecError, TreeShape, parse_spec
from hsd_runtime.decoding.confidence import Confident, top_share
from tests.tiny import tiny_llama


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("m:pmin=0", "between 0 and 1"),
        ("m:pmin=1", "between 0 and 1"),
        ("m:pmin=abc", "between 0 and 1"),
        ("m:pmin=nan", "between 0 and 1"),
        ("ngram:pmin=0.5", "ngram takes only"),
        ("m:steer=dir:pmin=0.5", "steered drafter"),
        ("bpd:heads:pmin=0.5", "unknown option"),
        ("m:nmin=2", "takes pmin="),
        ("ngram:nmin=2", "drop nmin="),
        ("m:pmin=0.5:nmin=0", "integer from 1"),
    ],
)
def test_a_bad_pmin_is_refused_in_one_line(text, fragment):
    with pytest.raises(ModelSpecError, match=fragment) as refused:
        parse_spec(text)
    assert "\n" not in str(refused.value)


def test_pmin_changes_how_a_model_drafts_not_which_model_loads():
    spec = parse_spec("m:layers=2:pmin=.75:nmin=2")
    assert spec.p_min == 0.75 and spec.n_min == 2 and str(spec) == "m:layers=2:pmin=.75:nmin=2"
    assert str(spec.loads) == "m:layers=2" and str(spec.base) == "m"
    assert parse_spec("m:pmin=0.5").n_min == 0


def test_top_share_is_among_the_ten_likeliest_tokens():
    logits = torch.tensor([[5.0] + [0.0] * 9 + [4.0] * 20])  # ten likeliest: 5.0 and nine 4.0s
    assert float(top_share(logits)[0]) == pytest.approx(torch.e / (torch.e + 9.0))


def test_only_level_0_below_the_target_drafts_on_its_confidence():
    d, m, t = tiny_llama(1), tiny_llama(2), tiny_llama(0, layers=4)
    with pytest.raises(ChainError, match="level 1 stops") as refused:
        Hierarchy([d, Confident(m, 0.5), t], [2, 2])
    assert "\n" not in str(refused.value)
    with pytest.raises(ChainError, match="level 0 stops its drafts"):
        Hierarchy([Confident(t, 0.5)], [])
    with pytest.raises(ChainError, match="chains, not trees"):
        Hierarchy([Confident(d, 0.5), t], [TreeShape((2, 2))])


@pytest.mark.parametrize("p_min, n_min", [(0.155, 0), (0.2, 0), (0.16, 2), (0.155, 3)])
def test_the_profilers_draft_lengths_are_what_the_executor_drafts(p_min, n_min):
    """The target drafting for itself accepts every token it drafts, so its own text is the
    continuation and its teacher-forced rows are its drafting rows: a decoder visiting starts as
    the profiler's lengths say (a draft shorter than n_min dropped) takes exactly the rounds,
    drafts exactly the tokens and runs exactly the drafter passes (min(L + 1, width) a round) the
    executor does."""
    model = tiny_llama(0, layers=2, head_scale=8.0)  # top shares 0.15-0.22 of 64 tokens
    prompt, new, width = [3, 7, 11, 7, 3], 40, 4
    hierarchy = Hierarchy([Confident(model, p_min, n_min), model], [width])
    out = hierarchy.generate(prompt, new, keep_logits=False)
    continuation = out.tokens
    lengths = confident_lengths(teacher_forced_logits(model, prompt, continuation, 64), p_min)
    # the prefill is counted apart, and its logits row serves the first round's first step; so
    # does a dropped draft's first token, fed by its second step and committed by its round (the
    # target drafts its own tokens), for the next round: its first step is served from the cache
    t, rounds, drafted, passes, served = 0, 0, 0, 0, True
    while t < new:
        most = min(width, new - t - 1)  # a draft keeps room for the round's own token
        ran = min(lengths[t] + 1, most)  # the pass that found it unsure ran
        passes += ran - (served and ran > 0)
        n = min(lengths[t], most)
        served = 0 < n < n_min and ran >= 2
        n = n if n >= n_min else 0
        rounds, drafted, t = rounds + 1, drafted + n, t + n + 1
    assert 0 < drafted < width * rounds  # some drafts stopped early, some ran
    assert (out.target_rounds, out.levels[0].proposed, out.levels[0].forward_passes) == (rounds, drafted, passes)
