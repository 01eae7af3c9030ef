"""The training data pipeline: batched sampling, the teacher's dense signal, the corpus cache."""

import json

import pytest
import torch

from hsd_planner.errors import DistillError
from hsd_planner.profiling.acceptance import teacher_forced_logits
from hsd_planner.training.corpus import CorpusKey, build_corpus, model_digest
from hsd_planner.training.divergences import DIVERGENCES, divergence, sparse_divergence
from hsd_planner.training.sampling import sample_batched
from hsd_planner.training.teacher import TeacherRows, continuation_logits, teacher_signal
from hsd_runtime import ModelLoader, SamplingConfig

PROMPTS = [[3, 7, 9], [11, 4], [5, 6, 7, 8, 9, 10], [12], [20, 21, 22, 23]]


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return ModelLoader(device="cpu", dtype="fp32", prepack=False).load(str(tiny_dirs["target"]))


def key(target, **changes):
    fields = dict(
        target="t",
        weights=model_digest(target.model),
        prompts="p",
        prompts_hash="h",
        samples_per_prompt=2,
        max_new_tokens=8,
        temperature=1.0,
        top_k=16,
        seed=3,
    )
    return CorpusKey(**(fields | changes))


def test_batched_sampling_equals_sampling_each_sequence_alone(target):
    sampling = SamplingConfig(mode="sample", temperature=1.0)
    seeds = [11, 12, 13, 14, 15]
    together = sample_batched(target.model, target, PROMPTS, 10, sampling, seeds, gen_batch=5)
    alone = [sample_batched(target.model, target, [p], 10, sampling, [s], gen_batch=1)[0] for p, s in zip(PROMPTS, seeds)]
    assert together == alone
    assert len({tuple(x) for x in together}) == len(PROMPTS) and any(len(x) == 10 for x in together)
    again = sample_batched(target.model, target, PROMPTS, 10, sampling, [s + 1 for s in seeds], gen_batch=2)
    assert again != together  # the seed, not the batch, decides


def test_one_padded_teacher_pass_gives_each_sequence_its_own_logits(target):
    continuations = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10], [2]]
    batched = continuation_logits(target.model, PROMPTS, continuations, target.logits_width)  # [R, V]
    alone = torch.cat([teacher_forced_logits(target.model, p, c, target.logits_width) for p, c in zip(PROMPTS, continuations)])
    assert batched.shape == alone.shape == (sum(map(len, continuations)), target.logits_width)
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
def test_top_k_signal_gives_the_full_divergence_exactly_at_k_v_and_a_lower_bound_below(target, name):
    torch.manual_seed(0)
    p = torch.randn(40, target.logits_width) * 3
    q = (torch.randn(40, target.logits_width) * 3).requires_grad_()
    for temperature in (1.0, 0.7):
        full = divergence(name, p, q, temperature)
        complete = TeacherRows.from_logits(p, 0, temperature)
        assert complete.complete
        torch.testing.assert_close(sparse_divergence(name, complete, q, temperature), full, atol=1e-6, rtol=1e-5)
        for k in (4, 16, 48):
            bucketed = sparse_divergence(name, TeacherRows.from_logits(p, k, temperature), q, temperature)
            # merging the tail into one bucket can only lower a divergence (data processing)
            assert float(bucketed.detach()) <= float(full.detach()) * (1 + 1e-5) + 1e-6
        # the gradient flows to the student through the bucketed divergence
        sparse_divergence(name, TeacherRows.from_logits(p, 8, temperature), q, temperature).backward()
        assert q.grad is not None and torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
        q.grad = None


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
def test_a_trimmed_students_divergence_is_taken_against_p_on_its_support(name):
    """A student that scores N tokens only (logits -inf elsewhere) is compared with p restricted to
    those N and renormalized: exactly the full divergence over the kept columns when the rows are
    complete, finite with top-k rows, and no gradient reaches the tokens it cannot propose."""
    torch.manual_seed(2)
    width, kept = 40, torch.tensor([0, 1, 2, 5, 8, 13, 21, 30, 34, 39])
    p = torch.randn(24, width) * 3
    q_kept = (torch.randn(24, len(kept)) * 3).requires_grad_()
    for temperature in (1.0, 0.7):
        q = torch.full((24, width), float("-inf")).index_copy(-1, kept, q_kept)  # [24, 40]: what a trimmed head returns
        got = sparse_divergence(name, TeacherRows.from_logits(p, 0, temperature), q, temperature)
        torch.testing.assert_close(got, divergence(name, p[:, kept], q_kept, temperature), atol=1e-6, rtol=1e-5)
        topk = sparse_divergence(name, TeacherRows.from_logits(p, 8, temperature), q, temperature)
        assert torch.isfinite(topk)
        # the kept columns alone ([24, 10] over their token ids) give the same, complete or top-k
        for k in (0, 8):
            rows = TeacherRows.from_logits(p, k, temperature)
            narrow = sparse_divergence(name, rows, q_kept, temperature, kept)
            torch.testing.assert_close(narrow, sparse_divergence(name, rows, q, temperature), atol=1e-6, rtol=1e-5)
        topk.backward()
        assert q_kept.grad is not None and torch.isfinite(q_kept.grad).all() and q_kept.grad.abs().sum() > 0
        q_kept.grad = None


def test_top_k_signal_approaches_the_full_kl_as_k_grows(target):
    """The stated tolerance: at k = 16 of 64 tokens, forward KL within 10 % of the full value on a sharp teacher."""
    torch.manual_seed(1)
    p, q = torch.randn(64, target.logits_width) * 4, torch.randn(64, target.logits_width) * 2
    full = float(divergence("fkl", p, q))
    gaps = [full - float(sparse_divergence("fkl", TeacherRows.from_logits(p, k, 1.0), q)) for k in (4, 16, 32, 64)]
    assert gaps == sorted(gaps, reverse=True) and abs(gaps[-1]) < 1e-5 and gaps[1] < 0.1 * full


def test_signal_rows_follow_each_sequence(target):
    continuations = [[1, 2, 3], [], [5, 6], [7]]  # run grouped by length: [3, 0], then [2]
    prompts = PROMPTS[:4]
    rows = teacher_signal(target.model, prompts, continuations, target.logits_width, 8, 1.0, gen_batch=2)
    full = torch.cat([teacher_forced_logits(target.model, p, c, target.logits_width) for p, c in zip(prompts, continuations) if c])
    assert rows.ids.shape == (6, 8)
    assert torch.equal(rows.ids[:, 0], full.argmax(-1))
    torch.testing.assert_close(rows.logz, torch.logsumexp(full, -1), atol=1e-5, rtol=1e-5)


def test_the_cache_returns_the_same_signal_bit_for_bit(target, tmp_path):
    made, cached = build_corpus(target, key(target), PROMPTS, gen_batch=3, root=tmp_path)
    again, hit = build_corpus(target, key(target), PROMPTS, gen_batch=2, root=tmp_path)
    assert not cached and hit
    assert again.continuations == made.continuations and again.prompts == made.prompts and again.offsets == made.offsets
    for field in ("ids", "logits", "logz"):
        assert torch.equal(getattr(again.signal, field), getattr(made.signal, field))
    assert len(made.prompts) == 2 * len(PROMPTS) and made.positions == made.signal.ids.shape[0]
    # another setting is another entry, not a reuse
    other, hit = build_corpus(target, key(target, top_k=4), PROMPTS, gen_batch=3, root=tmp_path)
    assert not hit and other.signal.ids.shape[1] == 4 and other.continuations == made.continuations


def test_a_stale_or_damaged_cache_entry_is_refused_with_one_line(target, tiny_dirs, tmp_path):
    corpus, _ = build_corpus(target, key(target), PROMPTS, gen_batch=5, root=tmp_path)
    folder = tmp_path / corpus.key.request
    other = ModelLoader(device="cpu", dtype="fp32", prepack=False).load(str(tiny_dirs["draft"]))
    with pytest.raises(DistillError, match="is stale: it was made with weights") as err:
        build_corpus(target, key(target, weights=model_digest(other.model)), PROMPTS, gen_batch=5, root=tmp_path)
    assert "\n" not in str(err.value) and str(folder) in str(err.value)
    data = (folder / "corpus.pt").read_bytes()
    (folder / "corpus.pt").write_bytes(data[:-100])
    with pytest.raises(DistillError, match="is damaged"):
        build_corpus(target, key(target), PROMPTS, gen_batch=5, root=tmp_path)
    (folder / "corpus.pt").write_bytes(data)
    meta = json.loads((folder / "key.json").read_text())
    meta["key"]["format"] = 0
    (folder / "key.json").write_text(json.dumps(meta))
    with pytest.raises(DistillError, match="stale: it was made with format 0"):
        build_corpus(target, key(target), PROMPTS, gen_batch=5, root=tmp_path)
    (folder / "key.json").write_text("{not json")
    with pytest.raises(DistillError, match="unreadable key"):
        build_corpus(target, key(target), PROMPTS, gen_batch=5, root=tmp_path)


def test_model_digest_sees_a_changed_weight(tiny_dirs):
    loaded = ModelLoader(device="cpu", dtype="fp32", prepack=False).load(str(tiny_dirs["target"]))
    before = model_digest(loaded.model)
    with torch.no_grad():
        loaded.model.model.norm.weight[0] += 1e-3
    assert model_digest(loaded.model) != before
