"""Steered drafters (``steer=DIR``): the vectors, the verifier's taps, greedy identity, refusals,
training and the planner."""

import json

import pytest
import torch

from hsd_planner.store import open_db
from hsd_planner.store.profiles import load_profile
from hsd_runtime import ChainError, Hierarchy, ModelLoader, ModelSpecError, SamplingConfig, build_hierarchy, parse_spec
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.results import LevelStats
from hsd_runtime.learned.steering import (
    STEER_CARD,
    STEER_FILE,
    SteeredDrafter,
    Steerer,
    SteeringCard,
    SteeringProjection,
    default_taps,
    save_steering,
    steered_model,
)
from tests.helpers import QUICK_PROFILE, fp32_check, one_line_error, run
from tests.tiny import tiny_llama

PROMPT = [5, 9, 12, 5, 9, 33, 2, 7]


def card(
    drafter: str = "D", verifier: str = "T", form: str = "lowrank", hidden: int = 32, layers: int = 1, v_layers: int = 2
) -> SteeringCard:
    width = hidden if form == "simple" else 2 * hidden  # tiny_llama: d_ff = 2 d
    return SteeringCard(
        drafter=drafter,
        verifier=verifier,
        taps=default_taps(v_layers),
        verifier_hidden=hidden,
        drafter_layers=layers,
        width=width,
        form=form,
        rank=4 if form == "lowrank" else 0,
    )


def projection(c: SteeringCard, scale: float = 0.0, seed: int = 3) -> SteeringProjection:
    """The projection of ``c``; ``scale`` > 0 gives W_g random weights (steering that changes the drafter)."""
    torch.manual_seed(seed)
    out = SteeringProjection(c)
    if scale:
        with torch.no_grad():
            out.up.weight.normal_(0, scale)
    return out.eval().requires_grad_(False)


def steered(model, c: SteeringCard, scale: float = 1.0):
    return steered_model(model, Steerer(projection(c, scale), c))


@pytest.fixture(scope="module")
def models():
    return {
        "T": tiny_llama(0, layers=2, head_scale=5),
        "M": tiny_llama(1, layers=2, head_scale=5),
        "D": tiny_llama(2, layers=1, head_scale=5),
    }


def _logits(model, ids=PROMPT) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0]


# --- the vectors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["lowrank", "full", "simple"])
def test_untrained_steering_leaves_the_drafters_logits_bit_identical(models, form):
    c = card(form=form)
    model = steered(models["D"], c, scale=0.0)
    taps = torch.randn(1, len(c.taps) * 32)
    model.steerer.steer(taps)
    assert model.steerer.delta is not None and model.steerer.delta.shape == (1, c.width)
    assert torch.equal(_logits(model), _logits(models["D"]))


@pytest.mark.parametrize("form", ["lowrank", "full", "simple"])
def test_steering_changes_the_copy_and_never_the_model_it_shares_weights_with(models, form):
    c = card(form=form)
    plain = _logits(models["D"])
    model = steered(models["D"], c)
    model.steerer.steer(torch.randn(1, len(c.taps) * 32))
    assert not torch.allclose(_logits(model), plain)
    assert torch.equal(_logits(models["D"]), plain)  # the shared weights and modules are untouched
    model.steerer.clear()
    assert torch.equal(_logits(model), plain)


def test_a_verifier_keeps_the_inputs_of_its_tapped_layers_along_the_sequence(models):
    taps = tuple(default_taps(2))
    cached = CachedModel(models["T"], 64, LevelStats(model="T"), keep_hidden=True, layers=taps)
    plain = CachedModel(models["T"], 64, LevelStats(model="T"))
    cached.prefill(PROMPT)
    plain.prefill(PROMPT)
    seq = PROMPT + [3, 4, 8]
    assert torch.equal(cached.logits(seq, len(PROMPT) - 1), plain.logits(seq, len(PROMPT) - 1))
    row, j = cached.hidden_at(seq + [11])
    assert j == len(seq) - 1
    with torch.inference_mode():
        states = models["T"].model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
    expected = torch.cat([states[i][0, j] for i in taps])
    torch.testing.assert_close(row[0], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        CachedModel(models["T"], 64, LevelStats(model="T"), layers=taps)


def _chain(models, name: str, scale: float = 1.0) -> Hierarchy:
    """D steered by T (``dt``), M steered by T as a middle level under D (``mid``), or D steered by M under T (``low``)."""
    if name == "dt":
        return Hierarchy([steered(models["D"], card()), models["T"]], [3])
    if name == "mid":
        return Hierarchy([models["D"], steered(models["M"], card(layers=2)), models["T"]], [2, 2])
    return Hierarchy([steered(models["D"], card()), models["M"], models["T"]], [2, 2])


def _target_greedy(models, n: int) -> list[int]:
    return Hierarchy([models["T"]], []).generate(PROMPT, n).tokens


@pytest.mark.parametrize("name", ["dt", "mid", "low"])
def test_greedy_output_is_the_targets_with_steering_anywhere(models, name):
    hierarchy = _chain(models, name)
    out = hierarchy.generate(PROMPT, 20)
    assert out.tokens == _target_greedy(models, 20)
    again = hierarchy.generate(PROMPT, 20, reuse_prompt=True)  # steered from the prefill's kept taps
    assert again.tokens == out.tokens and again.levels[-1].prefill_tokens == 0
    assert again.levels[0].proposed == out.levels[0].proposed
    steered_level = next(level for level in hierarchy.levels if isinstance(level, SteeredDrafter))
    assert steered_level.stats.steers > 1 and steered_level.stats.steer_s > 0


def test_a_steered_drafter_drafts_trees_too(models):
    from hsd_runtime import TreeShape

    hierarchy = Hierarchy([steered(models["D"], card()), models["T"]], [TreeShape((2, 2))])
    assert hierarchy.generate(PROMPT, 16).tokens == _target_greedy(models, 16)


def test_vectors_change_only_after_a_verification(models, monkeypatch):
    """Each new vector is set right after the verifier's prefill or one of its passes, once per pass."""
    hierarchy = _chain(models, "dt")
    verifier = hierarchy.levels[1].stats
    seen: list[int] = []
    original = Steerer.steer

    def spy(self, taps):
        seen.append(verifier.forward_passes)
        original(self, taps)

    monkeypatch.setattr(Steerer, "steer", spy)
    out = hierarchy.generate(PROMPT, 20, SamplingConfig(mode="sample", seed=3))
    assert seen == list(range(len(seen))) and len(seen) == out.target_rounds


def test_sampling_with_steering_changes_the_drafts_not_the_law_shape(models):
    for scale in (0.0, 1.0):
        out = _chain(models, "dt", scale).generate(PROMPT, 16, SamplingConfig(mode="sample", seed=1))
        assert len(out.tokens) == 16


def test_steering_specs_round_trip():
    spec = parse_spec("smollm2-135m:layers=4:steer=out/s")
    assert str(spec) == "smollm2-135m:layers=4:steer=out/s" and spec.steer == "out/s" and str(spec.base) == "smollm2-135m"
    with pytest.raises(ModelSpecError, match="ngram takes only"):
        parse_spec("ngram:steer=x")


# --- directories and chains ------------------------------------------------------------------------


@pytest.fixture
def steer_dir(tiny_dirs, tmp_path):
    c = card(drafter=str(tiny_dirs["draft"]), verifier=str(tiny_dirs["target"]), layers=2, v_layers=4)
    folder = tmp_path / "steer"
    save_steering(folder, projection(c, 0.5), c)
    return folder


def test_a_steering_directory_runs_through_the_cli_with_check(tiny_dirs, steer_dir):
    draft, target = tiny_dirs["draft"], tiny_dirs["target"]
    assert fp32_check(f"{draft}:steer={steer_dir},{target}", 3, 12)["identical"]
    assert fp32_check(f"{draft}:layers=1,{draft}:steer={steer_dir},{target}", "2,2", 12)["identical"]


def test_chains_that_misplace_steering_are_refused(tiny_dirs, steer_dir):
    loader = ModelLoader(device="cpu")
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    for chain, fragment in [
        ([f"{draft}:steer={steer_dir}", draft, target], "steered by"),  # another verifier above
        ([draft, f"{target}:steer={steer_dir}"], "trained for the drafter"),
        ([f"{draft}:layers=1:steer={steer_dir}", target], "trained for the drafter"),
        ([f"{draft}:steer={steer_dir}", "ngram", target], "steered by"),
    ]:
        with pytest.raises((ChainError, ModelSpecError), match=fragment):
            build_hierarchy(chain, [2] * (len(chain) - 1), loader)
    with pytest.raises(ChainError, match="one prompt"):
        build_hierarchy([f"{draft}:steer={steer_dir}", target], [2], loader)[0].generate_batch([[1, 2], [3, 4]], 2)


@pytest.mark.parametrize("damage", ["no card", "bad card", "old format", "no weights", "bad weights", "wrong shape"])
def test_a_damaged_steering_directory_is_one_line(tiny_dirs, steer_dir, damage):
    path = steer_dir / STEER_CARD
    if damage == "no card":
        path.unlink()
    elif damage == "bad card":
        path.write_text("{not json")
    elif damage == "old format":
        path.write_text(json.dumps(json.loads(path.read_text()) | {"format": 0}))
    elif damage == "no weights":
        (steer_dir / STEER_FILE).unlink()
    elif damage == "bad weights":
        (steer_dir / STEER_FILE).write_bytes(b"\x00" * 64)
    else:
        path.write_text(json.dumps(json.loads(path.read_text()) | {"rank": 7}))
    chain = f"{tiny_dirs['draft']}:steer={steer_dir},{tiny_dirs['target']}"
    one_line_error(run("generate", "--chain", chain, "--widths", 2, "--prompt", "w1", "--dtype", "fp32"), str(steer_dir))


# --- training ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "p.txt"
    path.write_text("\n".join(f"w{i % 60} w{i * 7 % 60} w{i * 13 % 60} w{(i + 1) % 60}" for i in range(60)))
    return path


def train(tiny_dirs, prompts, out, *extra):
    args = ["steer", "train", "--drafter", tiny_dirs["draft"], "--verifier", tiny_dirs["target"], "--out", out, "--prompts", prompts]
    return run(*args, "--max-new-tokens", 8, "--train-batch", 4, "--samples-per-prompt", 1, "--device", "cpu", "--dtype", "fp32", *extra)


@pytest.mark.parametrize("form, finetune", [("lowrank", "none"), ("simple", "full")])
def test_training_lowers_the_loss_and_the_steering_runs_under_its_verifier(tiny_dirs, prompts, tmp_path, form, finetune):
    from hsd_planner.training.steer import SteerConfig, SteerTrainer

    config = SteerConfig(
        drafter=str(tiny_dirs["draft"]),
        verifier=str(tiny_dirs["target"]),
        form=form,
        rank=8,
        finetune=finetune,
        prompts=str(prompts),
        steps=40,
        train_batch=8,
        max_new_tokens=8,
        lr=3e-3,
        drafter_lr=1e-3,
        samples_per_prompt=1,
    )
    out = tmp_path / "s"
    trainer = SteerTrainer(config, out, ModelLoader(device="cpu"))
    trainer.train()
    assert sum(trainer.losses[-5:]) < sum(trainer.losses[:5])
    report = trainer.finish()
    for mode in ("greedy", "sample"):
        assert 0 <= report.acceptance[mode]["unsteered"] <= config.stale and 0 <= report.acceptance[mode]["steered"] <= config.stale
    assert report.acceptance["sample"]["steered"] > report.acceptance["sample"]["unsteered"]
    saved = json.loads((out / STEER_CARD).read_text())
    assert saved["verifier"] == str(tiny_dirs["target"]) and saved["form"] == form and saved["acceptance"]["held_out"] == report.acceptance
    drafter = str(out / "drafter") if finetune == "full" else str(tiny_dirs["draft"])
    assert saved["drafter"] == drafter
    assert fp32_check(f"{drafter}:steer={out},{tiny_dirs['target']}", 3, 12)["identical"]


def test_grouped_drafter_passes_give_the_one_pass_gradient(tiny_dirs, tmp_path, monkeypatch):
    """A step's drafter passes run in groups of similar length; their gradients add up to the one
    padded pass's (prompts of 1..6 words, so the groups differ in length)."""
    from hsd_planner.training import steer as steer_module
    from hsd_planner.training.steer import SteerConfig, SteerTrainer

    path = tmp_path / "p.txt"
    path.write_text("\n".join(" ".join(f"w{(i * 7 + j) % 60}" for j in range(1 + i % 6)) for i in range(40)))
    config = SteerConfig(
        drafter=str(tiny_dirs["draft"]), verifier=str(tiny_dirs["target"]), rank=8, prompts=str(path), train_batch=12, max_new_tokens=6
    )
    trainer = SteerTrainer(config, tmp_path / "s", ModelLoader(device="cpu"))
    trainer.prepare()
    with torch.no_grad():  # a projection that steers, so every part of the gradient is nonzero
        for weight in trainer.projection.parameters():
            weight.normal_(0, 0.05)
    monkeypatch.setattr(trainer.optimizer, "step", lambda: None)
    state = trainer.rng.bit_generator.state

    def gradient(group):
        monkeypatch.setattr(steer_module, "PASS_GROUP", group)
        trainer.rng.bit_generator.state = state
        loss = trainer.train_step()
        return loss, {n: w.grad.clone() for n, w in trainer.projection.named_parameters()}

    one_loss, one_grad = gradient(100)
    grouped_loss, grouped_grad = gradient(1)
    assert grouped_loss == pytest.approx(one_loss, rel=1e-5)
    assert all(torch.allclose(grouped_grad[n], one_grad[n], rtol=1e-4, atol=1e-7) for n in one_grad)
    assert any(g.abs().sum() > 0 for g in one_grad.values())


def test_resume_equals_one_run_and_bad_runs_are_one_line(tiny_dirs, prompts, tmp_path):
    assert train(tiny_dirs, prompts, tmp_path / "whole", "--steps", 4).exit_code == 0
    assert train(tiny_dirs, prompts, tmp_path / "split", "--steps", 2).exit_code == 0
    result = train(tiny_dirs, prompts, tmp_path / "split", "--steps", 4, "--resume", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"] == 4
    from safetensors.torch import load_file

    whole, resumed = load_file(tmp_path / "whole" / STEER_FILE), load_file(tmp_path / "split" / STEER_FILE)
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)
    one_line_error(train(tiny_dirs, prompts, tmp_path / "whole", "--steps", 4), "not empty")
    one_line_error(train(tiny_dirs, prompts, tmp_path / "none", "--resume"), "no checkpoint")
    one_line_error(train(tiny_dirs, prompts, tmp_path / "split", "--steps", 6, "--resume", "--lr", "0.5"), "other settings")
    other = ["steer", "train", "--drafter", tiny_dirs["other"], "--verifier", tiny_dirs["target"], "--out", tmp_path / "o"]
    one_line_error(run(*other, "--prompts", prompts, "--dtype", "fp32"), "tokenizer")


# --- the planner -------------------------------------------------------------------------------


def test_a_steered_drafter_is_one_more_candidate_profiled_under_its_verifier_only(tiny_dirs, steer_dir, tmp_path):
    """Profile times the steered drafter and measures it against its verifier only; solve puts it
    directly under that verifier; validate runs the pick; export refuses it."""
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    db = tmp_path / "t.db"
    steered_spec = f"{draft}:steer={steer_dir}"
    for mode in ("greedy", "sample"):
        models = f"{draft}:layers=1,{steered_spec},{draft},{target}"
        result = run("profile", "--models", models, "--db", db, "--mode", mode, "--max-prompts", "3", *QUICK_PROFILE, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        pairs = {(a["drafter"], a["verifier"]) for a in report["acceptance"]}
        name = f"{draft}:steer={steer_dir.resolve()}"
        assert (name, target) in pairs and not any(name in (d, v) for d, v in pairs - {(name, target)})
        # its projection is timed apart (n = 0), to be charged once per proposal; no other model has one
        proposals = {row["model"]: (row["proposal_ms"], row["context_len"]) for row in report["latency"]}
        assert proposals[name][0] > 0 and all(ms is None for m, (ms, _) in proposals.items() if m != name)
        profile, _ = load_profile(open_db(str(db)), mode=mode)
        assert profile.proposal(name, proposals[name][1]) == pytest.approx(proposals[name][0]) and profile.proposal(draft, 64) == 0.0
        solved = run("solve", "--db", db, "--mode", mode, "--top", "30", "--json")
        assert solved.exit_code == 0, solved.output
        chains = [plan["chain"] for plan in json.loads(solved.stdout)["plans"]]
        with_steering = [c for c in chains if name in c]
        assert with_steering and all(c.index(name) == 0 and c[1] == target for c in with_steering)
    checked = run("validate", "--db", db, "--candidates", "all", "--max-prompts", 1, "--max-new-tokens", 4, "--device", "cpu", "--json")
    assert checked.exit_code == 0, checked.output
    assert any(name in json.dumps(row) for row in json.loads(checked.stdout)["plans"])
    one_line_error(run("profile", "--models", f"{steered_spec},{draft}", "--db", db, *QUICK_PROFILE), "list that model")

    from hsd_planner.export.restrict import unloadable
    from hsd_planner.export.stacks import STACKS

    assert all(unloadable(name, False, stack) for stacks in STACKS.values() for stack in stacks)


def test_profiled_acceptance_of_untrained_steering_is_the_plain_drafters(models):
    """Zero-initialised steering measures exactly what the drafter alone does; real steering moves it."""
    from hsd_planner.profiling.acceptance import (
        acceptance_from_logits,
        model_conditionals,
        steered_acceptance,
        teacher_forced_logits,
    )

    continuation = [3, 4, 8, 11, 2, 9, 9, 14, 5, 1]
    p = teacher_forced_logits(models["T"], PROMPT, continuation, 64)
    for mode in ("greedy", "sample"):
        sampling = SamplingConfig(mode=mode)
        plain = model_conditionals(acceptance_from_logits(teacher_forced_logits(models["D"], PROMPT, continuation, 64), p, sampling), 6)
        zero = steered_acceptance(steered(models["D"], card(), 0.0), models["T"], PROMPT, continuation, p, sampling, 6)[0]
        assert torch.equal(zero, plain)
        moved = steered_acceptance(steered(models["D"], card(), 1.0), models["T"], PROMPT, continuation, p, sampling, 6)[0]
        assert torch.equal(moved[:1, 0], plain[:1, 0])  # the first row is read with the prompt, unsteered
        assert mode == "greedy" or not torch.equal(moved, plain)


def test_a_steered_spec_is_stored_absolute_and_its_steering_fingerprinted(steer_dir, monkeypatch):
    import os

    from hsd_planner.errors import StoreError
    from hsd_planner.profiling.sources import absolute_spec, check_source, source_fingerprint

    monkeypatch.chdir(steer_dir.parent)
    text = f"smollm2-135m:layers=4:steer={steer_dir.name}"
    assert absolute_spec(text) == f"smollm2-135m:layers=4:steer={steer_dir.resolve()}"
    before = source_fingerprint(text)
    assert before is not None and source_fingerprint("smollm2-135m:layers=4") is None
    check_source(text, before)
    weights = steer_dir / STEER_FILE
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    with pytest.raises(StoreError, match="changed on disk"):
        check_source(text, before)
    with pytest.raises(StoreError, match="no longer exists"):
        check_source("smollm2-135m:steer=gone", before)
