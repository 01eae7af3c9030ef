"""The table of drafter kinds: every spec the parser accepts is of one kind, and the runtime's build
and the profiler do with each kind what its entry says."""

from types import SimpleNamespace
from typing import get_args

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from torch import nn

from hsd_planner.profiling import ProfileConfig, run_profile
from hsd_planner.profiling.config import ProfiledModel
from hsd_planner.profiling.pairs import MEASURES
from hsd_planner.profiling.runner import BINDINGS, _verifications
from hsd_planner.profiling.sweep import TIMERS, latency_points
from hsd_planner.prompts import load_prompts
from hsd_planner.store import AcceptancePrompt, Latency, open_db
from hsd_planner.store.profiles import load_profile
from hsd_runtime import ChainError, ModelLoader, ModelSpecError, NgramDrafter, build_hierarchy, parse_spec
from hsd_runtime.build import MEMBERS
from hsd_runtime.decoding.cache import engine_cache
from hsd_runtime.decoding.confidence import Confident
from hsd_runtime.learned.bpd import BpdDrafter
from hsd_runtime.learned.heads import save_heads
from hsd_runtime.learned.steering import save_steering
from hsd_runtime.terms.choices import ENGINES
from hsd_runtime.terms.kinds import BLOCK_HEADS, CONFIDENT, KINDS, MODEL, NGRAM_LOOKUP, STEERED, Measure, Timing, kind_of
from hsd_runtime.terms.spec import check_engine
from tests.test_bpd import card as heads_card
from tests.test_bpd import random_heads
from tests.test_steering import card as steering_card
from tests.test_steering import projection

# every form of spec the parser accepts, with the kind it names
SPECS = {
    "smollm2-135m": MODEL,
    "smollm2-135m:layers=8:dtype=bf16": MODEL,
    "smollm2-135m:quant=int8": MODEL,
    "smollm2-135m:vocab=4000": MODEL,
    "smollm2-135m:vocab=ranking.txt": MODEL,
    "smollm2-135m:weights=random": MODEL,
    "qwen2.5-coder-0.5b:engine=llamacpp:quant=q4_0": MODEL,
    "/models/student": MODEL,
    "/models/m.gguf:engine=llamacpp:layers=2": MODEL,
    "ngram": NGRAM_LOOKUP,
    "ngram:n=3:min=2": NGRAM_LOOKUP,
    "bpd:heads": BLOCK_HEADS,
    "bpd:heads:k=3:p=3:rescore=ngram:alpha=2:corpus=c.txt": BLOCK_HEADS,
    "bpd:heads:rescore=smollm2-135m:vocab=20": BLOCK_HEADS,
    "smollm2-135m:steer=dir": STEERED,
    "/models/student:layers=2:steer=dir:dtype=bf16": STEERED,
    "smollm2-135m:pmin=0.5": CONFIDENT,
    "/models/m.gguf:engine=llamacpp:layers=2:pmin=.9": CONFIDENT,
}


def test_every_spec_the_parser_accepts_is_of_one_kind_in_the_table_and_every_kind_is_named():
    assert {kind_of(parse_spec(text)) for text in SPECS} == set(KINDS)
    for text, kind in SPECS.items():
        spec = parse_spec(text)
        assert kind_of(spec) is kind, text
        # the loader loads exactly the kinds with a model of their own
        assert kind.own_model == spec.is_model
    assert len({k.name for k in KINDS}) == len(KINDS)


def test_each_kinds_facts_hang_together():
    for kind in KINDS:
        assert kind.engines and set(kind.engines) <= set(ENGINES)
        assert kind.timing in get_args(Timing) and kind.acceptance in get_args(Measure)
        # a kind bound to the level above drafts under it only: in one sequence, never verifying
        assert not (kind.host and (kind.batched or kind.verifies))
        assert kind.drafts_trees == (not (kind.lookup or kind.stops))
        assert kind.stops == (kind is CONFIDENT)
        assert kind.projection == (kind is STEERED)
    assert [k for k in KINDS if k.verifies] == [MODEL]


def test_a_kind_is_refused_on_the_engines_it_does_not_run_on():
    for engine in MODEL.engines:
        check_engine(parse_spec("smollm2-135m"), engine)
    steered = parse_spec("smollm2-135m:steer=dir")
    check_engine(steered, "torch")
    with pytest.raises(ModelSpecError, match="torch engine only"):
        check_engine(steered, "llamacpp")

    from hsd_runtime.models.static_engine import StaticModel
    from tests.tiny import tiny_llama

    # heads read their host's hidden rows, steering its verifier's: refused on any other engine's model
    assert BLOCK_HEADS.engines == STEERED.engines == ("torch",)
    with pytest.raises(ChainError, match="torch engine alone"):
        engine_cache(StaticModel(tiny_llama(0, layers=1, vocab=64), "static", n_ctx=64), 8, keep_hidden=True)


def test_the_build_and_the_profiler_choose_for_every_kind_in_the_table():
    assert set(MEMBERS) == set(KINDS)
    assert set(TIMERS) == set(get_args(Timing)) >= {k.timing for k in KINDS}
    assert set(MEASURES) == set(get_args(Measure)) >= {k.acceptance for k in KINDS}
    assert set(BINDINGS) == {k for k in KINDS if k.host is not None}


def _candidate(text: str, row_id: int, host: str | None = None) -> ProfiledModel:
    spec = parse_spec(text)
    loaded = SimpleNamespace(engine="torch") if spec.is_model else None
    return ProfiledModel(spec, loaded, row_id=row_id, host=host)  # type: ignore[arg-type]


def test_the_profiler_batches_and_verifies_the_kinds_the_table_says():
    candidates = [
        _candidate("ngram", 1),
        _candidate("bpd:heads", 2, host="t"),
        _candidate("d", 3),
        _candidate("d:steer=dir", 4, host="t"),
        _candidate("d:pmin=0.5", 5),
        _candidate("e:pmin=0.5", 6),
        _candidate("t", 7),
    ]
    config = ProfileConfig(models=["t"], batch_sizes=[1, 2])
    timed = {str(c.spec) for c, _, _, b in latency_points(config, candidates, [8]) if b > 1}
    assert timed == {"ngram", "d", "e:pmin=0.5", "t"}  # d:pmin=0.5 runs d's passes, timed once
    verifications = _verifications(candidates, config)
    assert [(str(v.verifier.spec), [str(d.spec) for d in v.drafters]) for v in verifications] == [
        ("d", ["ngram"]),  # heads and steering draft under their own level only; pmin= drafts only
        ("t", ["ngram", "bpd:heads", "d", "d:steer=dir", "d:pmin=0.5", "e:pmin=0.5"]),
    ]


@pytest.fixture
def kinds_dirs(tiny_dirs, tmp_path):
    """A heads directory for the tiny target and a steering of the tiny draft by it."""
    heads = tmp_path / "heads"
    save_heads(heads, random_heads(hidden=32), heads_card(host=str(tiny_dirs["target"])))
    c = steering_card(drafter=str(tiny_dirs["draft"]), verifier=str(tiny_dirs["target"]), layers=2, v_layers=4)
    steer = tmp_path / "steer"
    save_steering(steer, projection(c, 0.5), c)
    return heads, steer


def test_the_build_makes_each_kinds_member(tiny_dirs, kinds_dirs, monkeypatch):
    heads, steer = kinds_dirs
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    made = {}
    for kind, maker in list(MEMBERS.items()):

        def recording(site, kind=kind, maker=maker):
            made[str(site.spec)] = (kind, member := maker(site))
            return member

        monkeypatch.setitem(MEMBERS, kind, recording)
    loader = ModelLoader(device="cpu", dtype="fp32")
    build_hierarchy(["ngram", f"{draft}:steer={steer}", target], [2, 2], loader)
    build_hierarchy([f"bpd:{heads}", target], [2], loader)
    build_hierarchy([f"{draft}:pmin=0.5", target], [2], loader)
    assert {str(parse_spec(spec)): kind for spec, (kind, _) in made.items()} == {
        "ngram": NGRAM_LOOKUP,
        f"{draft}:steer={steer}": STEERED,
        target: MODEL,
        f"bpd:{heads}": BLOCK_HEADS,
        f"{draft}:pmin=0.5": CONFIDENT,
    }
    confident = made[f"{draft}:pmin=0.5"][1]
    assert isinstance(confident, Confident) and confident.p_min == 0.5 and isinstance(confident.model, nn.Module)
    assert isinstance(made["ngram"][1], NgramDrafter) and isinstance(made[f"bpd:{heads}"][1], BpdDrafter)
    assert isinstance(made[target][1], nn.Module)
    steered = made[f"{draft}:steer={steer}"][1]
    assert isinstance(steered, nn.Module) and steered.steerer is not None


def test_a_profile_times_and_measures_each_kind_as_the_table_says(tiny_dirs, kinds_dirs, tmp_path, isolated_db):
    heads, steer = kinds_dirs
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    models = ["ngram", f"bpd:{heads}", draft, f"{draft}:steer={steer}", f"{draft}:pmin=0.5", target]
    config = ProfileConfig(models=models, latency_grid=[1, 4], context_lens=[8], repeats=1, max_new_tokens=6, batch_sizes=[1, 2])
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3 w1 w2\n")
    db = open_db(str(isolated_db))
    out = run_profile(db, config, load_prompts(prompts), ModelLoader(device="cpu", dtype="fp32"))
    kinds = {row_id: kind_of(parse_spec(spec)) for spec, row_id in out.model_ids.items()}
    with Session(db) as s:
        latency = s.scalars(select(Latency)).all()
        pairs = s.scalars(select(AcceptancePrompt)).all()
    assert {kinds[r.model_id] for r in latency if r.n_tokens == 0} == {k for k in KINDS if k.projection}
    # a pmin= drafter runs its model's passes, timed once as that model (listed here too)
    assert {kinds[r.model_id] for r in latency if r.batch_size > 1} == {k for k in KINDS if k.batched and not k.stops}
    assert CONFIDENT not in {kinds[r.model_id] for r in latency}
    profile, _ = load_profile(db)
    assert profile.model(f"{draft}:pmin=0.5").latency == profile.model(draft).latency
    assert profile.model(f"{draft}:pmin=0.5").stops and not profile.model(draft).stops
    assert {kinds[r.verifier_id] for r in pairs} == {k for k in KINDS if k.verifies}
    assert {kinds[r.drafter_id] for r in pairs} == set(KINDS)
    for r in pairs:  # greedy, exact: a drafter that drafts trees has its sibling sums
        assert (r.siblings_sum is not None) == kinds[r.drafter_id].drafts_trees


def test_the_executor_decodes_rows_for_the_kinds_the_table_batches(tiny_dirs, kinds_dirs):
    """The table's ``batched`` and the executor agree: a chain whose level 0 is each kind decodes two
    prompts in lockstep where the table batches the kind, and refuses them in one line where not."""
    heads, steer = kinds_dirs
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    loader = ModelLoader(device="cpu", dtype="fp32")
    chains = {
        MODEL: [draft, target],
        NGRAM_LOOKUP: ["ngram", target],
        BLOCK_HEADS: [f"bpd:{heads}", target],
        STEERED: [f"{draft}:steer={steer}", target],
        CONFIDENT: [f"{draft}:pmin=0.5", target],
    }
    assert set(chains) == set(KINDS)
    for kind, chain in chains.items():
        hierarchy, _ = build_hierarchy(chain, [2], loader)
        if kind.batched:
            assert len(hierarchy.generate_batch([[1, 2, 3], [4, 5]], 3).sequences) == 2
        else:
            with pytest.raises(ChainError, match="one prompt") as refused:
                hierarchy.generate_batch([[1, 2, 3], [4, 5]], 3)
            assert "\n" not in str(refused.value)


def test_a_llamacpp_model_is_timed_either_side_of_each_multiple_of_16():
    """llama.cpp runs a pass of 16k tokens faster than one of 16k - 1: its curve is timed on both
    sides of each dip, a torch model's on the grid as asked."""
    on_llamacpp = ProfiledModel(parse_spec("t:engine=llamacpp"), SimpleNamespace(engine="llamacpp"), row_id=1)  # type: ignore[arg-type]
    on_torch = _candidate("d", 2)
    points = latency_points(ProfileConfig(models=["t"]), [on_llamacpp, on_torch], [64])
    assert sorted(n for c, _, n, _ in points if c is on_llamacpp) == [1, 2, 4, 8, 15, 16, 17, 31, 32, 33, 63, 64]
    assert sorted(n for c, _, n, _ in points if c is on_torch) == [1, 2, 4, 8, 16, 32, 64]
