"""Speculative sampling follows the target's distribution exactly, for every shape the runtime runs.

The harness (``tests/law.py``) enumerates the target's exact joint law of the first L = 4 new
tokens on a 6-token vocabulary and G-tests many seeded runs of a hierarchy against it. The matrix
covers depth 1, 2 and 3, the n-gram drafter at the bottom, draft trees (alone and under a middle
level), temperatures 0.5, 1 and 2, top-k, top-p and both, int8 copies as drafters, and trimmed
heads (a drafter whose q is zero on tokens the target emits) at the bottom and in the middle,
block-draft heads on the level above (sampled per head, the 3 best rescored paths verified as a
deterministic tree, or one path rescored by a small model) under the target and under a middle
level, and drafters steered by the level above (at the bottom, in the middle, drafting trees);
every cell
also checks that its runs crossed several rounds with acceptances and rejections at every level.

Each rule the harness covers has a failing control: the same harness, on a cell that passes with
the right rule, must reject the hierarchy with that one rule broken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import pytest
import torch

from hsd_runtime import Hierarchy, NgramDrafter, SamplingConfig, TreeShape, parse_spec, quantized_copy, trimmed_model
from hsd_runtime.decoding import drafters, verify
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.confidence import Confident
from hsd_runtime.learned.bpd import BpdDrafter
from hsd_runtime.learned.heads import BlockHeads, HeadsCard
from hsd_runtime.learned.steering import SteeredDrafter, Steerer, SteeringCard, SteeringProjection, default_taps, steered_model
from tests import law
from tests.law import ALPHA, RUNS, law_check, law_model

KEPT = torch.tensor([0, 2, 3, 5])  # the tokens a trimmed head scores (of V = 6)


@cache
def models(temperature: float) -> dict[str, torch.nn.Module]:
    """The law models of one temperature: target, middle, bottom, lowest, a sharp drafter, an int8 target."""
    target = law_model(10, layers=2, temperature=temperature)
    return {
        "T": target,
        "M": law_model(11, temperature=temperature),
        "B": law_model(12, temperature=temperature),
        "W": law_model(13, temperature=temperature),
        "S": law_model(12, temperature=temperature, sharpness=3.0),  # a confident tree drafter
        "Q": quantized_copy(target),  # int8 weights, fp32 activations
        # trimmed heads: tokens 1 and 4 are never proposed (q = 0), though the target emits them
        "R": trimmed_model(law_model(12, temperature=temperature), KEPT),
        "N": trimmed_model(law_model(11, temperature=temperature), KEPT),  # a trimmed middle level
    }


# block-draft heads on the level above: sampled, 3-best rescored by a bigram, rescored by a small model (B)
BPD = {"P": "bpd:law", "P3": "bpd:law:k=3:p=3:rescore=ngram", "PN": "bpd:law:k=3:rescore=B"}


def _drafter(name: str, zoo: dict[str, torch.nn.Module]) -> NgramDrafter | BpdDrafter:
    """A fresh drafter without a model of its own: the n-gram lookup, or random heads on its host."""
    if name.startswith("ngram"):  # a lookup of order 2 unless the name says: ngram, ngram:min=2, llama-server's rules
        spec = parse_spec(name)
        return NgramDrafter.of(spec if spec.get("n") else parse_spec(f"{name}:n=2"))
    torch.manual_seed(7)
    heads = BlockHeads(16, 4)
    with torch.no_grad():
        for block in heads.blocks:
            block.down.weight.normal_(0, 1.0)  # heads that draft tokens of their own, not head 1's
    card = HeadsCard(host="law", hidden_size=16, heads=4, inner=16, logits_width=law.V)
    spec = parse_spec(BPD[name])
    return BpdDrafter(heads.eval(), card, spec, rescorer=zoo[spec.bpd_option("rescore")] if name == "PN" else None)


# level-0 models that stop on their confidence: B below a top share of 0.4 (about half its
# positions), a sharper B below 0.75, and B dropping its drafts of one token
CONFIDENT = {"C": ("B", 0.4, 0), "CS": ("S", 0.75, 0), "CN": ("B", 0.4, 2)}  # CN drops its one-token drafts

# steered drafters: B steered by T, M steered by T (a middle level), B steered by M
STEERED = {"G": ("B", "T"), "H": ("M", "T"), "G2": ("B", "M")}


def _steered(name: str, zoo: dict[str, torch.nn.Module]) -> torch.nn.Module:
    """A fresh steered copy (its own vectors) with random W_g, strong enough to move the drafter's
    law: the steered and unsteered q of B are 0.12-0.23 apart in total variation (0.02-0.05 at a
    scale of 2, too close for the harness to tell a q reported unsteered from the right one)."""
    drafter, verifier = (zoo[n] for n in STEERED[name])
    layers = verifier.config.num_hidden_layers
    card = SteeringCard(
        drafter=name, verifier=STEERED[name][1], taps=default_taps(layers), verifier_hidden=16,
        drafter_layers=drafter.config.num_hidden_layers, width=32, form="lowrank", rank=4,
    )  # fmt: skip
    torch.manual_seed(8)
    projection = SteeringProjection(card)
    with torch.no_grad():
        projection.up.weight.normal_(0, 20.0)
    return steered_model(drafter, Steerer(projection.eval(), card))


@dataclass(frozen=True)
class Cell:
    """One shape of the matrix: members by name (``ngram`` or a key of :func:`models`), widths, sampling."""

    chain: str  # e.g. "ngram,M,T"
    widths: tuple[int | str, ...]
    sampling: dict = field(default_factory=dict)

    def build(self) -> tuple[Hierarchy, torch.nn.Module, SamplingConfig]:
        cfg = SamplingConfig(mode="sample", **self.sampling)
        zoo = models(cfg.temperature)
        members = [
            _drafter(name, zoo)
            if name.startswith("ngram") or name in BPD
            else _steered(name, zoo)
            if name in STEERED
            else Confident(zoo[CONFIDENT[name][0]], *CONFIDENT[name][1:])
            if name in CONFIDENT
            else zoo[name]
            for name in self.chain.split(",")
        ]
        widths = [TreeShape(tuple(int(b) for b in w.split("x"))) if isinstance(w, str) else w for w in self.widths]
        return Hierarchy(members, widths), zoo["T"], cfg


FAST = {
    "depth1": Cell("B,T", (1,)),
    "depth2": Cell("B,M,T", (1, 2)),
    "ngram-depth2": Cell("ngram,M,T", (2, 2)),
    "tree-3x2x1": Cell("S,T", ("3x2x1",)),
    "topk-topp-depth1": Cell("B,T", (2,), {"top_k": 3, "top_p": 0.9}),
    "trimmed-depth1": Cell("R,T", (2,)),
    "bpd-depth1": Cell("P,T", (3,)),
    "bpd-3best-tree": Cell("P3,T", (3,)),
    "steered-depth1": Cell("G,T", (2,)),
    "confident-depth1": Cell("C,T", (3,)),
}
SLOW = {
    "depth3": Cell("W,B,M,T", (1, 2, 2)),
    "ngram-depth1": Cell("ngram,T", (3,)),
    "ngram-depth3": Cell("ngram,B,M,T", (2, 1, 2)),
    "ngram-min2-depth2": Cell("ngram:min=2,M,T", (3, 2)),
    "ngram-server-depth1": Cell("ngram:n=2:rule=llama-server,T", (3,)),
    "ngram-mod-depth1": Cell("ngram:n=2:rule=ngram-mod:nmin=2,T", (3,)),
    # n = 1 both: ngram-simple drafts from a token seen since position 1, ngram-mod from one seen only at 0
    "ngram-list-depth1": Cell("ngram:n=1:rule=llama-server+ngram-mod:nmatch=1,T", (2,)),
    "ngram-map-k-depth1": Cell("ngram:n=1:rule=ngram-map-k,T", (2,)),  # n = 1: the 6-token prompt holds 2n + k tokens
    "ngram-map-k4v-depth2": Cell("ngram:n=1:rule=ngram-map-k4v,M,T", (2, 2)),
    "tree-2x2-under-middle": Cell("S,M,T", ("2x2", 2)),
    "t0.5-depth1": Cell("B,T", (3,), {"temperature": 0.5}),
    "t0.5-depth2": Cell("B,M,T", (2, 2), {"temperature": 0.5}),
    "t0.5-tree-3x2x1": Cell("S,T", ("3x2x1",), {"temperature": 0.5}),
    "t2-depth2": Cell("B,M,T", (2, 1), {"temperature": 2.0}),
    "t2-ngram-depth2": Cell("ngram,M,T", (3, 2), {"temperature": 2.0}),
    "t2-tree-2x2-under-middle": Cell("S,M,T", ("2x2", 2), {"temperature": 2.0}),
    "topk-depth2": Cell("B,M,T", (1, 2), {"top_k": 3}),
    "topk-tree-3x2x1": Cell("S,T", ("3x2x1",), {"top_k": 3}),
    "topp-depth2": Cell("B,M,T", (2, 2), {"top_p": 0.8}),
    "topp-ngram-depth1": Cell("ngram,T", (2,), {"top_p": 0.8}),
    "topk-topp-t0.5-depth3": Cell("W,B,M,T", (2, 1, 2), {"temperature": 0.5, "top_k": 4, "top_p": 0.9}),
    "topk-topp-t2-tree-under-middle": Cell("S,M,T", ("2x2", 2), {"temperature": 2.0, "top_k": 4, "top_p": 0.9}),
    "int8-depth1": Cell("Q,T", (1,)),  # the int8 copy agrees almost always: width 1 keeps rounds short
    "int8-depth2": Cell("B,Q,T", (2, 2)),
    "int8-tree-2x2": Cell("Q,T", ("2x2",)),
    "trimmed-middle": Cell("B,N,T", (2, 2)),
    "trimmed-tree-2x2": Cell("R,T", ("2x2",)),
    "bpd-under-middle": Cell("P,M,T", (3, 2)),
    "bpd-3best-under-middle": Cell("P3,M,T", (2, 2)),
    "t0.5-bpd-depth1": Cell("P,T", (3,), {"temperature": 0.5}),
    "topk-topp-bpd-3best": Cell("P3,T", (3,), {"top_k": 3, "top_p": 0.9}),
    "bpd-rescored-by-a-model-under-middle": Cell("PN,M,T", (3, 2)),
    "steered-middle": Cell("B,H,T", (1, 2)),
    "steered-under-middle": Cell("G2,M,T", (2, 2)),
    "steered-tree-2x2": Cell("G,T", ("2x2",)),
    "t0.5-topk-steered-depth1": Cell("G,T", (3,), {"temperature": 0.5, "top_k": 4}),
    "confident-sharp-under-middle": Cell("CS,M,T", (4, 2)),
    "t0.5-topk-confident-depth1": Cell("C,T", (4,), {"temperature": 0.5, "top_k": 3}),
    "confident-nmin2-depth1": Cell("CN,T", (4,)),
}


def _check(cell: Cell) -> law.LawCheck:
    hierarchy, target, cfg = cell.build()
    return law_check(hierarchy, target, cfg)


def _assert_exercised(check: law.LawCheck) -> None:
    """Every level below the target had tokens accepted and rejected, over several rounds per run."""
    s = check.sampled
    for k in range(len(s.proposed) - 1):
        assert 0 < s.accepted[k] < s.proposed[k], f"level {k}: proposed {s.proposed[k]}, accepted {s.accepted[k]}"
    assert s.rounds > 1.3 * RUNS  # more than one target round per 4-token run on average


def test_exact_joint_is_a_law_and_not_degenerate():
    for temperature in (0.5, 1.0, 2.0):
        probs = law.exact_joint(models(temperature)["T"], law.PROMPT, SamplingConfig(mode="sample", temperature=temperature))
        assert abs(probs.sum() - 1.0) < 1e-5
        # neither flat nor one-hot: the first token's likeliest value has 0.25 to 0.5 of the mass, no
        # 4-token sequence has 2 %, and after pooling at least 100 cells are tested
        first = probs.reshape(law.V, -1).sum(1)
        groups = law.pooled_groups(probs, RUNS, law.V)
        assert 0.25 < first.max() < 0.5 and probs.max() < 0.02 and groups.max() + 1 >= 100


def test_g_test_pools_rare_cells_by_prefix_and_flags_impossible_outcomes():
    import numpy as np

    probs = np.array([0.5, 0.3, 0.1, 0.06, 0.04, 0.0, 0.0, 0.0, 0.0])  # V = 3, L = 2
    group = law.pooled_groups(probs, runs=50, vocab=3, length=2)
    # 25 and 15 expected stand alone; 5 too; 3 + 2 (prefix 1) pool; zero-mass cells are apart
    assert group[0] != group[1] != group[2] and group[3] == group[4] and (group[5:] == -1).all()
    counts = probs * 50
    assert law.g_test(counts, probs, 3, 2).pvalue > 0.99
    counts[7] += 1  # one run produced an impossible outcome
    assert law.g_test(counts, probs, 3, 2).pvalue == 0.0


@pytest.mark.parametrize("cell", FAST.values(), ids=FAST.keys())
def test_sampled_law_matches_target(cell):
    check = _check(cell)
    print(check.describe())
    assert check.pvalue > ALPHA
    _assert_exercised(check)


@pytest.mark.slow
@pytest.mark.parametrize("cell", SLOW.values(), ids=SLOW.keys())
def test_sampled_law_matches_target_matrix(cell):
    check = _check(cell)
    print(check.describe())
    assert check.pvalue > ALPHA
    _assert_exercised(check)


# --- failing controls: one rule broken, the same harness on a cell that passes with the right rule ---


def _as(cls: type, level: int):
    def patch(hierarchy: Hierarchy, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(hierarchy.levels[level], "__class__", cls)

    return patch


def _attr(obj: object, name: str, value: object):
    def patch(hierarchy: Hierarchy, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(obj, name, value)

    return patch


CONTROLS = {
    "passes-q-upward": ("depth2", _as(law.PassesDrafterQ, 1)),
    "residual-is-p": ("depth1", _attr(verify, "residual", law.mixed_residual(1.0))),
    "bonus-from-drafter": ("depth1", _as(law.BonusFromDrafter, 1)),
    "siblings-with-replacement": ("tree-3x2x1", _attr(drafters, "draw_without_replacement", law.with_replacement)),
    "warp-verifier-not-drafter": ("topk-topp-depth1", _attr(drafters, "_choose", law.unwarped_draw)),
    "cache-not-rolled-back": ("depth1", _attr(CachedModel, "_rollback", law.no_rollback)),
    "heads-draw-argmax-report-q": ("bpd-depth1", _attr(BpdDrafter, "propose", law.argmax_with_q)),
    # the drafter B steered by T: tokens from the steered law, q of B unsteered
    "steered-draw-unsteered-q": ("steered-depth1", _attr(SteeredDrafter, "propose", law.steered_draw_unsteered_q(models(1.0)["B"]))),
    # the stop read off the drawn token's own q, after the draw, instead of the drafter's top share before it
    "confidence-read-after-the-draw": (
        "confident-depth1",
        _attr(drafters.ModelDrafter, "propose", law.stops_on_the_drawn_token(drafters.ModelDrafter.propose)),
    ),
}


@pytest.mark.parametrize("cell_id, patch", CONTROLS.values(), ids=CONTROLS.keys())
def test_wrong_rule_fails_the_same_test(monkeypatch, cell_id, patch):
    hierarchy, target, cfg = FAST[cell_id].build()
    patch(hierarchy, monkeypatch)
    check = law_check(hierarchy, target, cfg)
    print(check.describe())
    assert check.pvalue < ALPHA


@pytest.mark.slow
def test_a_drafter_that_never_warps_is_still_exact(monkeypatch):
    """Speculative sampling is exact for any q the drafter really draws from: a drafter that ignores
    top-k and top-p, drawing from and reporting its raw softmax, still gives the target's warped law."""

    def raw(logits: torch.Tensor, ctx, row: int) -> tuple[int, torch.Tensor]:
        q = torch.softmax(logits.float(), dim=-1)  # [1, V]
        return int(torch.multinomial(q[0], 1, generator=ctx.generators[row])), q

    hierarchy, target, cfg = FAST["topk-topp-depth1"].build()
    monkeypatch.setattr(drafters, "_choose", raw)
    check = law_check(hierarchy, target, cfg)
    print(check.describe())
    assert check.pvalue > ALPHA
