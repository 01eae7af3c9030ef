"""The llama.cpp engine behind the runtime's seam: its cache, trees and the sampled law.

Tiny Llamas are written as GGUF files in-process (``tests/gguf_tiny.py``) and run by llama.cpp.
The law harness is the torch engine's (``tests/law.py``), with the target's exact law computed
from llama.cpp's own uncached passes: what is tested is that the hierarchy over this engine
samples from this engine's target, whatever llama.cpp's arithmetic (its K/V cache is f16).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest
import torch

from hsd_runtime import CachePool, ChainError, Hierarchy, NgramDrafter, PromptError, SamplingConfig, TreeShape
from hsd_runtime.decoding import verify
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.results import LevelStats
from hsd_runtime.models.llamacpp import GgufModel, LlamaCppCache
from hsd_runtime.terms.tree import DraftTree
from tests import law
from tests.gguf_tiny import write_gguf
from tests.law import ALPHA, law_check, law_model

SKIPPED = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1"
pytestmark = pytest.mark.skipif(SKIPPED, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf")


@cache
def _torch_models() -> dict[str, torch.nn.Module]:
    return {
        "T": law_model(10, layers=2),
        "M": law_model(11),
        "B": law_model(12),
        "S": law_model(12, sharpness=3.0),
    }


@pytest.fixture(scope="module")
def zoo(gguf_dir) -> dict[str, GgufModel]:
    """The law models of temperature 1 as GGUF files on llama.cpp, one thread each."""
    return {name: GgufModel(write_gguf(m, gguf_dir / f"{name}.gguf"), name, threads=1, n_ctx=128) for name, m in _torch_models().items()}


def _uncached(model: GgufModel, tokens: list[int]) -> torch.Tensor:
    """The logits after ``tokens`` ``[V]`` from a fresh context."""
    return model.open_cache(model.n_vocab).feed(tokens, 0, 1)[0]


def test_the_written_gguf_computes_the_torch_model(zoo):
    prompt = [0, 3, 4, 5, 3, 4, 2, 1, 5]
    with torch.inference_mode():
        expected = _torch_models()["T"](torch.tensor([prompt])).logits[0]  # [9, V]
    got = zoo["T"].open_cache(law.V).feed(prompt, 0, len(prompt))
    # llama.cpp keeps keys and values in f16: logits of size ~20 agree to about 1e-2
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-2)


def test_cached_rows_rollback_and_refeeding_match_uncached_passes(zoo):
    model = zoo["T"]
    cached = CachedModel(model, law.V, LevelStats("T"))
    seq = [0, 3, 4, 5, 3, 4, 2, 1]
    cached.prefill(seq[:4])
    rows = cached.logits(seq, 3)  # [5, V]: after positions 3..7
    for i, pos in enumerate(range(3, len(seq))):
        torch.testing.assert_close(rows[i], _uncached(model, seq[: pos + 1]), rtol=0, atol=2e-3)
    other = seq[:5] + [5, 5]  # a rejection below position 5: the cache crops and feeds the new tail
    rows = cached.logits(other, len(other) - 1)
    torch.testing.assert_close(rows[0], _uncached(model, other), rtol=0, atol=2e-3)
    assert cached.stats.tokens_fed == 4 + 2  # 4 new tokens, then only the 2 after the common prefix


_KEEP_PATH = LlamaCppCache.keep_path


def _keep_the_wrong_branch(self: LlamaCppCache, held: int, path: list[int], fed: int) -> bool:
    """Wrong: at each depth of the path another node of that depth is kept (where there is one)."""
    wrong = [next((i for i in range(fed) if self._positions[i] == self._positions[p] and i != p), p) for p in path]
    return _KEEP_PATH(self, held, wrong, fed)


def test_a_pass_longer_than_a_batch_is_fed_in_pieces_and_keeps_the_last_rows(zoo, monkeypatch):
    from hsd_runtime.models import llamacpp as engine

    tokens = [0, 3, 4, 5, 3, 4, 2, 1, 5, 2, 3]
    whole = zoo["T"].open_cache(law.V).feed(tokens, 0, 7)  # [7, V]: rows 4..10
    cache = zoo["T"].open_cache(law.V)  # a context of 512-token batches, fed in pieces of 4 below
    monkeypatch.setattr(engine, "DECODE_CHUNK", 4)  # pieces 0-3, 4-7, 8-10: the rows kept span two of them
    pieces = cache.feed(tokens, 0, 7)
    torch.testing.assert_close(pieces, whole, rtol=0, atol=2e-3)


def _tree_and_kept_path(model: GgufModel) -> None:
    """Feed a tree in two depths, check every node's row against an uncached pass over its path,
    then take a path and one token more and check the row after them."""
    cached = CachedModel(model, law.V, LevelStats("T"))
    base = [0, 3, 4, 5]
    cached.prefill(base)
    tree = DraftTree()
    a, b = tree.add(3, -1), tree.add(5, -1)
    rows = cached.tree_logits(base, tree)  # [3, V]
    c, d = tree.add(4, a), tree.add(2, b)  # grown by a depth: only the new nodes are fed
    rows = cached.tree_logits(base, tree)  # [5, V]
    assert cached.stats.tokens_fed == 2 + 2
    for node in (a, b, c, d):
        path = [tree.tokens[i] for i in tree.path(node)]
        torch.testing.assert_close(rows[1 + node], _uncached(model, base + path), rtol=0, atol=2e-3)
    # the text takes the path b, d and one token more: the kept nodes are not fed again
    seq = base + [5, 2, 4]
    rows = cached.logits(seq, len(seq) - 1)
    torch.testing.assert_close(rows[0], _uncached(model, seq), rtol=0, atol=2e-3)
    assert cached.stats.tokens_fed == 4 + 1


def test_a_tree_sees_its_ancestors_only_and_its_kept_path_becomes_the_text(zoo):
    _tree_and_kept_path(zoo["T"])


def test_the_tree_check_fails_when_another_branch_is_kept(zoo, monkeypatch):
    monkeypatch.setattr(LlamaCppCache, "keep_path", _keep_the_wrong_branch)
    with pytest.raises(AssertionError):
        _tree_and_kept_path(zoo["T"])


@pytest.mark.parametrize("chain, widths", [("MT", [3]), ("ST", [TreeShape((2, 2))])], ids=["chain", "tree"])
def test_kept_target_logits_match_a_pass_over_the_output_on_llamacpp(zoo, chain, widths):
    """The target's rows kept from its verification passes (keep_logits) against one pass of
    llama.cpp over prompt + output: equal up to llama.cpp's arithmetic for passes of other sizes."""
    prompt = [0, 3, 4, 5, 3, 4]
    result = Hierarchy([zoo[c] for c in chain], widths).generate(prompt, 20, SamplingConfig(mode="sample", seed=3), keep_logits=True)
    m = len(result.tokens)
    whole = zoo["T"].open_cache(zoo["T"].n_vocab).feed(prompt + result.tokens, 0, m + 1)[:m]  # [m, V]
    assert result.target_logits is not None and result.target_logits.shape == whole.shape
    torch.testing.assert_close(result.target_logits.float(), whole.float(), rtol=0, atol=2e-3)


@pytest.mark.parametrize("chain, widths", [("MT", [3]), ("ST", [TreeShape((2, 2))])], ids=["chain", "tree"])
def test_a_reused_prompt_on_llamacpp_decodes_as_a_fresh_prefill_does(zoo, chain, widths):
    """reuse_prompt on llama.cpp: the prompt's cells and its prefill's row are kept (the last
    generation's cells, a hanging tree's too, removed), and the same seed samples the same tokens."""
    h = Hierarchy([zoo[c] for c in chain], widths)
    sampling = SamplingConfig(mode="sample", seed=7)
    first = h.generate([0, 3, 4, 5, 3, 4], 20, sampling)
    again = h.generate([0, 3, 4, 5, 3, 4], 20, sampling, reuse_prompt=True)
    assert again.tokens == first.tokens and all(lv.prefill_tokens == 0 for lv in again.levels)


def test_a_pool_with_cells_opens_contexts_that_size_and_plans_share_them(zoo):
    """A CachePool of 64 cells opens llama.cpp contexts of 64 positions (not the model's 128);
    two plans on it share the target's prefill and decode what a fresh hierarchy decodes, and a
    generation that needs more cells than the pool holds (a tree counted by its nodes) is refused
    before it starts."""
    pool, sampling = CachePool(cells=64), SamplingConfig(mode="sample", seed=3)
    alone = Hierarchy([zoo["T"]], [], caches=pool)
    chain = Hierarchy([zoo["M"], zoo["T"]], [3], caches=pool)
    assert alone.top.cached.kv.n_ctx == 64 and chain.top.cached is alone.top.cached
    prompt = [0, 3, 4, 5, 3, 4]
    alone.generate(prompt, 20, sampling)
    got = chain.generate(prompt, 20, sampling, reuse_prompt=True)
    assert got.levels[-1].prefill_tokens == 0 and got.levels[0].prefill_tokens == len(prompt)
    assert got.tokens == Hierarchy([zoo["M"], zoo["T"]], [3]).generate(prompt, 20, sampling).tokens
    with pytest.raises(PromptError, match="needs 73 cache cells, more than the 64 its caches hold"):
        chain.generate(prompt, 60, sampling)
    # a tree of depth 2 reaches 4 positions ahead but holds 20 nodes, each in a cell of its own
    tree = Hierarchy([zoo["M"], zoo["T"]], [TreeShape((4, 4))], caches=pool)
    with pytest.raises(PromptError, match="needs 67 cache cells, more than the 64"):
        tree.generate(prompt, 20, sampling)
    assert len(tree.generate(prompt, 16, sampling).tokens) == 16


def test_a_tree_larger_than_the_engine_holds_is_refused_in_one_line(zoo):
    cached = CachedModel(zoo["T"], law.V, LevelStats("T"))
    cached.prefill([0, 3])
    tree = DraftTree()
    for i in range(70):
        tree.add(i % law.V, -1)
    with pytest.raises(Exception, match="at most 63 nodes"):
        cached.tree_logits([0, 3], tree)


def test_a_context_of_a_few_cells_computes_the_same_and_refuses_a_position_past_them(zoo):
    from hsd_runtime.models.llamacpp import TREE_SEQS

    tokens = [0, 3, 4, 5, 3, 4, 2, 1, 5]
    small = zoo["T"].open_cache(law.V, cells=len(tokens))  # a pass over one known text, as teacher forcing opens
    assert small.n_ctx == TREE_SEQS  # llama.cpp aborts the process on a context of fewer cells than sequence ids
    torch.testing.assert_close(small.feed(tokens, 0, 3), zoo["T"].open_cache(law.V).feed(tokens, 0, 3), rtol=0, atol=2e-3)
    with pytest.raises(ChainError, match=f"position {TREE_SEQS} is past its context of {TREE_SEQS} tokens"):
        small.feed([2], TREE_SEQS, 1)


def test_a_timer_reopens_its_cache_for_a_pass_wider_than_its_room(zoo, monkeypatch):
    from hsd_planner.profiling import timing

    monkeypatch.setattr(timing, "ROOM", 4)
    timer = timing.PassTimer(zoo["T"], context_len=60)
    assert timer._kv.n_ctx == 64
    assert timer(3) > 0 and timer._kv.n_ctx == 64
    assert timer(20) > 0 and timer._kv.n_ctx == 80  # reopened with room for 20 after the 60 cached
    assert timer(3) > 0  # the narrower pass still runs on the wider cache


CELLS = {
    "depth1": ("B,T", (2,), {}),
    "depth2": ("B,M,T", (1, 2), {}),
    "ngram-depth2": ("ngram,M,T", (2, 2), {}),
    "tree-3x2x1": ("S,T", ("3x2x1",), {}),
    "tree-2x2-under-middle": ("S,M,T", ("2x2", 2), {}),
    "topk-topp-depth1": ("B,T", (2,), {"top_k": 3, "top_p": 0.9}),
}


def _build(zoo: dict[str, GgufModel], cell: str) -> tuple[Hierarchy, SamplingConfig]:
    chain, widths, sampling = CELLS[cell]
    members = [NgramDrafter(n=2) if name == "ngram" else zoo[name] for name in chain.split(",")]
    shapes = [TreeShape(tuple(int(b) for b in w.split("x"))) if isinstance(w, str) else w for w in widths]
    return Hierarchy(members, shapes), SamplingConfig(mode="sample", **sampling)


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS)
def test_sampled_law_matches_the_target_on_llamacpp(zoo, cell):
    hierarchy, cfg = _build(zoo, cell)
    check = law_check(hierarchy, zoo["T"], cfg)
    print(check.describe())
    assert check.pvalue > ALPHA
    s = check.sampled
    for k in range(len(s.proposed) - 1):
        assert 0 < s.accepted[k] < s.proposed[k]


CONTROLS = {
    "residual-is-p": ("depth1", verify, "residual", law.mixed_residual(1.0)),
    "passes-q-upward": ("depth2", None, "", law.PassesDrafterQ),
}


@pytest.mark.slow
@pytest.mark.parametrize("cell, owner, name, wrong", CONTROLS.values(), ids=CONTROLS.keys())
def test_wrong_rule_fails_the_same_test_on_llamacpp(zoo, monkeypatch, cell, owner, name, wrong):
    hierarchy, cfg = _build(zoo, cell)
    if owner is None:  # a level of another class: the middle level passes its drafter's q upward
        monkeypatch.setattr(hierarchy.levels[1], "__class__", wrong)
    else:
        monkeypatch.setattr(owner, name, wrong)
    check = law_check(hierarchy, zoo["T"], cfg)
    print(check.describe())
    assert check.pvalue < ALPHA


@pytest.mark.slow
def test_a_cache_not_rolled_back_is_refused_by_llamacpp_itself(zoo, monkeypatch):
    """The torch engine's control for a rejected token left in the cache fails the law; llama.cpp
    refuses it outright: a pass must start right after the sequence's last cached position."""
    hierarchy, cfg = _build(zoo, "depth1")
    monkeypatch.setattr(CachedModel, "_rollback", law.no_rollback)
    with pytest.raises(ChainError, match="could not run a pass"):
        law_check(hierarchy, zoo["T"], cfg)
