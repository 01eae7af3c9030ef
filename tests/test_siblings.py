"""The sibling-acceptance curve A(k): its estimator, its storage, and its way into the planner's input."""

import itertools
import json
import sqlite3
from types import SimpleNamespace

import pytest
import torch
from alembic.command import downgrade
from click.testing import CliRunner
from pydantic import ValidationError

from hsd_planner.cli import cli
from hsd_planner.plan import Profile
from hsd_planner.profiling.acceptance import acceptance_from_logits, teacher_forced_logits
from hsd_planner.profiling.siblings import _chain, _Residual, greedy_siblings, sampled_siblings, sibling_acceptance, sibling_sums
from hsd_planner.stats import pool_rows, resample_profiles
from hsd_planner.store import open_db, resolve_url
from hsd_planner.store.db import alembic_config
from hsd_planner.store.document import AcceptanceOut, AcceptancePromptOut
from hsd_planner.store.profiles import load_profile
from hsd_runtime import SamplingConfig, warp
from tests.helpers import QUICK_PROFILE
from tests.tiny import tiny_llama

SAMPLE = SamplingConfig(mode="sample")
FAST = QUICK_PROFILE


def literal_rrs(p: torch.Tensor, q: torch.Tensor, order: tuple[int, ...]) -> list[float]:
    """P(one of the first k of ``order`` accepted), k = 1..len(order), by RRS written out literally (Jeon et al. 2024): residuals and q' as vectors."""
    r, q_left, rejected, out = p.clone(), q.clone(), 1.0, []
    for x in order:
        accept = min(1.0, float(r[x] / q_left[x])) if q_left[x] > 0 else 0.0
        rejected *= 1.0 - accept
        out.append(1.0 - rejected)
        residual = (r - q_left).clamp_min(0.0)
        if residual.sum() > 0:  # else the rejection had probability 0: keep r
            r = residual / residual.sum()
        q_left = q_left.clone()
        q_left[x] = 0.0
        if q_left.sum() > 0:
            q_left = q_left / q_left.sum()
    return out


def exact_curve(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A(k), k = 1..V, summing P(order) * P(accepted | order) over every order of the support."""
    support = [int(x) for x in torch.nonzero(q).flatten()]
    total = torch.zeros(len(p), dtype=torch.float64)
    for order in itertools.permutations(support):
        weight = 1.0
        for i, x in enumerate(order):
            weight *= float(q[x]) / float(q[list(order[i:])].sum())  # the mass left, summed (no cancellation)
        accepted = literal_rrs(p, q, order)
        accepted += [accepted[-1]] * (len(p) - len(accepted))  # no more siblings than tokens with mass
        total += weight * torch.tensor(accepted, dtype=torch.float64)
    return total


def rrs_accept(p: torch.Tensor, q: torch.Tensor, orders: torch.Tensor) -> torch.Tensor:
    """P(one of the first k of ``orders`` accepted by RRS) ``[C, S, K]``.

    ``p``, ``q`` ``[C, V]`` are distributions (float64), ``orders`` ``[C, S, K]`` token ids
    (distinct per order). The exact per-order probability the Monte Carlo averages.
    """
    q_x = q.gather(-1, orders.flatten(1)).view(orders.shape)
    p_x = p.gather(-1, orders.flatten(1)).view(orders.shape)
    left = 1.0 - (q_x.cumsum(-1) - q_x)  # mass not drawn before each sibling
    fresh = torch.zeros_like(p_x[..., 0])
    return _chain(p_x, q_x, left, _Residual(p, q), fresh, torch.ones_like(fresh))


def distributions(seed: int, v: int, scale: float = 1.5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits and float64 distributions (as the estimator warps them) of a verifier p and drafter q."""
    g = torch.Generator().manual_seed(seed)
    p_logits, q_logits = torch.randn(1, v, generator=g) * scale, torch.randn(1, v, generator=g) * scale
    p, q = torch.softmax(p_logits, -1).double(), torch.softmax(q_logits, -1).double()
    return p_logits, q_logits, p / p.sum(), q / q.sum()


def test_the_recursion_is_rrs_step_by_step():
    _, _, p, q = distributions(0, 5)
    orders = list(itertools.permutations(range(5)))
    fast = rrs_accept(p, q, torch.tensor(orders)[None])[0]
    literal = torch.tensor([literal_rrs(p[0], q[0], o) for o in orders], dtype=torch.float64)
    assert torch.allclose(fast, literal, atol=1e-12)


PEAKED = (torch.tensor([[1.0, 0.3, 2.0, -0.5]]), torch.tensor([[28.0, 0.0, 0.7, 1.5]]))  # q holds 1 - 5e-12 on one token


@pytest.mark.parametrize("case", [1, 2, "peaked"])
def test_monte_carlo_agrees_with_exact_enumeration(case):
    p_logits, q_logits = PEAKED if case == "peaked" else distributions(case, 4)[:2]
    p, q = torch.softmax(p_logits, -1).double(), torch.softmax(q_logits, -1).double()
    exact = exact_curve(p[0] / p.sum(), q[0] / q.sum())
    positions = 50  # the same position 50 times: independent estimates, so their spread is the noise
    est = sampled_siblings(q_logits.repeat(positions, 1), p_logits.repeat(positions, 1), SAMPLE, k_max=4, samples=200, seed=7)
    mean, se = est.mean(0), est.std(0) / positions**0.5
    assert abs(float(mean[0]) - float(exact[0])) < 1e-9  # A(1) has no randomness
    assert torch.all((mean - exact).abs() <= 4 * se + 1e-9), (mean, exact, se)
    assert abs(float(mean[3]) - 1.0) < 1e-9  # four siblings cover a support of four


def test_curve_properties_on_a_large_vocabulary():
    g = torch.Generator().manual_seed(3)
    p_logits = torch.randn(12, 3000, generator=g) * 3
    q_logits = p_logits + torch.randn(12, 3000, generator=g) * 2
    a = sampled_siblings(q_logits, p_logits, SAMPLE, seed=0)
    p, q = torch.softmax(p_logits.double(), -1), torch.softmax(q_logits.double(), -1)
    assert a.shape == (12, 8)
    assert torch.allclose(a[:, 0], torch.minimum(p, q).sum(-1), atol=1e-6)  # A(1) = 1 - TV
    assert torch.all(a[:, 1:] >= a[:, :-1]) and torch.all(a <= 1.0)
    again = sampled_siblings(q_logits, p_logits, SAMPLE, seed=0)
    assert torch.equal(a, again)  # seeded: a profile rerun stores the same sums


def test_fewer_tokens_with_mass_than_siblings():
    # top-p keeps two of the drafter's tokens: a third sibling cannot exist, and A stays
    p_logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    q_logits = torch.tensor([[0.0, 3.0, 2.5, -4.0, -4.0]])
    warp_cfg = SamplingConfig(mode="sample", top_p=0.8)
    p, q = warp(p_logits, warp_cfg).double()[0], warp(q_logits, warp_cfg).double()[0]
    assert int((q > 0).sum()) == 2
    a = sampled_siblings(q_logits, p_logits, warp_cfg, k_max=4, samples=64)[0]
    exact = exact_curve(p / p.sum(), q / q.sum())
    assert torch.allclose(a, exact[:4], atol=1e-9)  # two tokens: both orders are covered exactly
    assert a[1] == a[2] == a[3]


def test_greedy_curve_on_hand_made_logits():
    q_logits = torch.tensor(
        [
            [5.0, 4.0, 3.0, 2.0, 1.0],  # verifier's token 2 is the drafter's third
            [0.0, 0.0, 0.0, 0.0, 9.0],  # the drafter's first choice
            [1.0, 1.0, 1.0, 0.0, 0.0],  # a tie: index order puts token 2 third
            [0.0, 1.0, 2.0, 3.0, 4.0],  # the drafter's last
        ]
    )
    p_logits = torch.zeros(4, 5)
    p_logits[0, 2] = p_logits[1, 4] = p_logits[2, 2] = p_logits[3, 0] = 1.0
    a = greedy_siblings(q_logits, p_logits, 5)
    assert a.tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]
    greedy = SamplingConfig(mode="greedy")
    assert torch.equal(a[:, 0], acceptance_from_logits(q_logits, p_logits, greedy))
    assert torch.equal(sibling_acceptance(q_logits, p_logits, greedy, k_max=5), a)


def prompt_row(a: torch.Tensor) -> SimpleNamespace:
    """A per-prompt acceptance row whose a_t(1) is its alpha, with the sibling sums of ``a`` ``[m, K]``."""
    sums, n = sibling_sums(a)
    return SimpleNamespace(
        positions=n,
        alpha_sum=sums[0],
        run_sum=[n, sums[0]],
        run_count=[n, n],
        visit_sum=None,
        visit_count=None,
        siblings_sum=sums,
        siblings_count=n,
    )


def test_sums_pool_exactly_across_prompts():
    g = torch.Generator().manual_seed(4)
    first, second = (
        torch.rand(7, 8, generator=g, dtype=torch.float64).sort(-1).values,
        torch.rand(5, 8, generator=g, dtype=torch.float64).sort(-1).values,
    )
    rows = [prompt_row(first), prompt_row(second)]
    pooled = pool_rows(rows).siblings
    assert pooled == pytest.approx(torch.cat([first, second]).mean(0).tolist(), abs=1e-12)
    without = SimpleNamespace(**{**vars(rows[0]), "siblings_sum": None, "siblings_count": None})
    assert pool_rows([*rows, without]).siblings is None  # never half a workload
    # a bootstrap resample pools the same sums
    base = Profile(
        target="t",
        models=[{"name": "d", "latency": {64: {1: 2.0}}}, {"name": "t", "latency": {64: {1: 20.0}}}],
        acceptance=[{"drafter": "d", "verifier": "t", "alpha": 0.5}],
    )
    per_prompt = {k: prompt_row(a) for k, a in enumerate((first, second))}
    for resampled in resample_profiles(base, {("d", "t"): per_prompt}, count=5):
        curve = resampled.acceptance[0].siblings
        assert curve is not None and len(curve) == 8 and curve[0] == pytest.approx(resampled.acceptance[0].alpha)


@pytest.mark.parametrize("sampling", [SamplingConfig(mode="greedy"), SamplingConfig(mode="sample", temperature=0.8, top_p=0.9)])
def test_a1_is_alpha_on_tiny_models(sampling):
    target, draft = tiny_llama(0, layers=2, head_scale=4.0), tiny_llama(1, layers=1, head_scale=4.0)
    prompt, continuation = list(range(3, 10)), list(range(10, 40))
    p_logits = teacher_forced_logits(target, prompt, continuation, 64)
    q_logits = teacher_forced_logits(draft, prompt, continuation, 64)
    alpha = acceptance_from_logits(q_logits, p_logits, sampling)
    a = sibling_acceptance(q_logits, p_logits, sampling)
    assert a.shape == (30, 8) and torch.allclose(a[:, 0], alpha, atol=1e-6)
    assert torch.all(a[:, 1:] >= a[:, :-1])


def test_the_curve_validates_on_import():
    base = dict(
        drafter="ngram", verifier="ngram", workload="h", setting=dict(mode="greedy", temperature=1, top_p=1, dtype="fp32", max_new_tokens=4)
    )
    row = dict(base, alpha=0.5, positions=4, prompts=1, run_lengths=[1.0, 0.5])
    assert AcceptanceOut(**row, siblings=[0.5, 0.6, 0.6 - 1e-9]).siblings is not None  # rounding is not a dip
    for bad in ([0.5, 0.4], [0.5, 1.2], [float("nan")], [0.5] * 65, []):
        with pytest.raises(ValidationError):
            AcceptanceOut(**row, siblings=bad)
    prompt = dict(base, prompt_index=0, positions=4, alpha_sum=2.0, run_sum=[4.0, 2.0], run_count=[4, 4])
    assert AcceptancePromptOut(**prompt, siblings_sum=[2.0, 3.0], siblings_count=4).siblings_count == 4
    for sums, count in (([2.0, 3.0], None), ([2.0, 5.0], 4), ([3.0, 2.0], 4)):
        with pytest.raises(ValidationError):
            AcceptancePromptOut(**prompt, siblings_sum=sums, siblings_count=count)


@pytest.fixture(scope="module")
def profiled(tiny_dirs, tmp_path_factory):
    """A greedy profile of ngram, draft and target on two prompts (one run for the tests below)."""
    root = tmp_path_factory.mktemp("siblings")
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{i} w{i + 1}" for i in range(2)))
    db = root / "profiled.db"
    names = ",".join(["ngram", str(tiny_dirs["draft"]), str(tiny_dirs["target"])])
    args = ["profile", "--models", names, "--prompts", str(prompts), *FAST, "--json", "--db", str(db)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return SimpleNamespace(db=db, args=args, summary=json.loads(result.stdout), draft=str(tiny_dirs["draft"]))


def curves(db) -> dict:
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT d.spec, v.spec, a.alpha, a.siblings FROM acceptance a JOIN models d ON d.id = a.drafter_id JOIN models v ON v.id = a.verifier_id"
        )
        return {(d, v): (alpha, json.loads(s) if s else None) for d, v, alpha, s in rows}


def test_a_profile_stores_the_curve_of_model_drafters(profiled, tmp_path):
    stored = curves(profiled.db)
    assert len(stored) == 3
    for (drafter, _), (alpha, siblings) in stored.items():
        if drafter == "ngram":
            assert siblings is None  # chains only
        else:
            assert len(siblings) == 8 and siblings[0] == pytest.approx(alpha, abs=1e-12)
            assert all(b >= a for a, b in zip(siblings, siblings[1:]))
    summary = {(a["drafter"], a["verifier"]): a["siblings"] for a in profiled.summary["acceptance"]}
    assert summary == {pair: s for pair, (_, s) in stored.items()}
    profile, _ = load_profile(open_db(str(profiled.db)))
    by_pair = {(a.drafter, a.verifier): a.siblings for a in profile.acceptance}
    assert by_pair == summary  # the planner's input carries the curve
    shown = CliRunner().invoke(cli, ["profiles", "show", "--db", str(profiled.db)])
    draft_line = next(line for line in shown.output.splitlines() if line.startswith(f"acceptance {profiled.draft} ->"))
    assert ", A(k) " in draft_line and len(draft_line.split("A(k) ")[1].split()) == 8
    as_json = json.loads(CliRunner().invoke(cli, ["profiles", "show", "--json", "--db", str(profiled.db)]).stdout)
    assert any(a["siblings"] for a in as_json["acceptance"]) and all(
        p["siblings_count"] for p in as_json["acceptance_prompts"] if p["siblings_sum"]
    )
    # export and import carry the curve and its sums unchanged
    exported, fresh = tmp_path / "export.json", tmp_path / "fresh.db"
    assert CliRunner().invoke(cli, ["profiles", "export", str(exported), "--db", str(profiled.db)]).exit_code == 0
    assert CliRunner().invoke(cli, ["profiles", "import", str(exported), "--db", str(fresh)]).exit_code == 0
    assert curves(fresh) == stored
    again = tmp_path / "again.json"
    CliRunner().invoke(cli, ["profiles", "export", str(again), "--db", str(fresh)])
    assert json.loads(again.read_text()) == json.loads(exported.read_text())


def test_an_old_database_upgrades_and_fills_in_when_measured_again(profiled, tmp_path):
    db = tmp_path / "old.db"
    with sqlite3.connect(profiled.db) as src, sqlite3.connect(db) as dst:
        src.backup(dst)  # a consistent copy (the database runs in WAL mode)
    downgrade(alembic_config(resolve_url(str(db))), "0010_floor_probe")  # the schema before sibling curves
    with sqlite3.connect(db) as con:
        columns = {row[1] for row in con.execute("PRAGMA table_info(acceptance)")}
    assert "siblings" not in columns
    open_db(str(db)).dispose()  # every open upgrades to head
    upgraded = curves(db)
    assert {pair: alpha for pair, (alpha, _) in upgraded.items()} == {pair: alpha for pair, (alpha, _) in curves(profiled.db).items()}
    assert all(s is None for _, s in upgraded.values())
    profile, _ = load_profile(open_db(str(db)))
    assert all(a.siblings is None for a in profile.acceptance)  # chains only until measured again
    args = [a if a != str(profiled.db) else str(db) for a in profiled.args]
    rerun = CliRunner().invoke(cli, args)
    assert rerun.exit_code == 0 and json.loads(rerun.stdout)["measured"] == 0  # nothing re-measured without --force
    assert all(s is None for _, s in curves(db).values())
    forced = CliRunner().invoke(cli, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert curves(db) == curves(profiled.db)  # the same passes, the same sums
