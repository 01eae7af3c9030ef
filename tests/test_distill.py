"""``hsd-plan distill`` on tiny in-process targets: divergences, training, checkpoints, errors."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

from hsd_planner.profiling.acceptance import teacher_forced_logits
from hsd_planner.prompts import TRAINED_PROMPTS, load_prompts, prompt_digest, split
from hsd_planner.training import DistillConfig, Distiller, build_student
from hsd_planner.training import distiller as distiller_module
from hsd_planner.training.divergences import DIVERGENCES, divergence
from hsd_planner.training.student import HeldOut
from hsd_planner.training.teacher import TeacherRows
from hsd_runtime import Hierarchy, ModelLoader, SamplingConfig
from tests.helpers import QUICK_PROFILE, fp32_check, one_line_error, run
from tests.tiny import WORDS, tiny_llama, word_tokenizer

FAST = ["--max-new-tokens", "6", "--train-batch", "2", "--device", "cpu"]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "p.txt"
    path.write_text("\n".join(f"w{i % 60} w{i * 7 % 60} w{i * 13 % 60} w{(i + 1) % 60}" for i in range(120)))
    return path


def distill(target, out, prompts, *extra):
    return run("distill", "--target", target, "--init", "layers=1", "--out", out, "--prompts", prompts, *FAST, *extra)


def weights(out):
    return load_file(out / "model.safetensors")


# --- divergences -------------------------------------------------------------------------------


def test_divergences_match_hand_computed_values():
    p, q = [0.5, 0.5], [0.25, 0.75]
    p_logits, q_logits = torch.tensor([p]).log(), torch.tensor([q]).log()
    m = [(a + b) / 2 for a, b in zip(p, q)]
    kl = lambda a, b: sum(x * math.log(x / y) for x, y in zip(a, b))  # noqa: E731
    expected = {
        "fkl": kl(p, q),
        "rkl": kl(q, p),
        "jsd": 0.5 * kl(p, m) + 0.5 * kl(q, m),
        "tvd": 0.25,
    }
    for name, value in expected.items():
        assert float(divergence(name, p_logits, q_logits)) == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize("name", sorted(DIVERGENCES))
def test_divergences_are_nonnegative_zero_on_equal_logits_and_follow_the_temperature(name):
    gen = torch.Generator().manual_seed(0)
    p, q = 3 * torch.randn(5, 11, generator=gen), 3 * torch.randn(5, 11, generator=gen)
    assert float(divergence(name, p, q)) > 0
    assert float(divergence(name, p, p.clone())) == pytest.approx(0.0, abs=1e-6)
    assert float(divergence(name, p, p + 4.0)) == pytest.approx(0.0, abs=1e-6)  # a shift leaves softmax unchanged
    assert float(divergence(name, 2 * p, 2 * q, temperature=2.0)) == pytest.approx(float(divergence(name, p, q)), rel=1e-5)
    rows = [float(divergence(name, p[i : i + 1], q[i : i + 1])) for i in range(5)]
    assert float(divergence(name, p, q)) == pytest.approx(sum(rows) / 5, rel=1e-5)  # the mean over positions


# --- the student -------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_student_copies_the_first_k_layers_and_freezes_embeddings_and_head(tied):
    target = tiny_llama(0, layers=3)
    if tied:
        target.config.tie_word_embeddings = True
        target.lm_head.weight = target.model.embed_tokens.weight
    student = build_student(target, 2)
    assert student.config.num_hidden_layers == 2 and len(student.model.layers) == 2 and target.config.num_hidden_layers == 3
    target_ptrs = {p.data_ptr() for p in target.parameters()}
    assert not any(p.data_ptr() in target_ptrs for p in student.parameters())  # a copy, not a view
    frozen = {n for n, p in student.named_parameters() if not p.requires_grad}
    assert frozen == {"model.embed_tokens.weight"} | (set() if tied else {"lm_head.weight"})
    assert (student.lm_head.weight is student.model.embed_tokens.weight) == tied
    ids = torch.tensor([[0, 5, 6, 7]])
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states[2]  # after 2 layers
        assert torch.allclose(student(ids).logits, target.lm_head(target.model.norm(hidden)), atol=1e-6)


# --- training, saving, resuming ----------------------------------------------------------------


@pytest.fixture(scope="module")
def learnable(tmp_path_factory):
    """A 4-layer target with sharpened distributions and 24 prompts (18 to train on)."""
    root = tmp_path_factory.mktemp("learnable")
    tokenizer = word_tokenizer(WORDS)
    tiny_llama(1, layers=4, vocab=len(tokenizer), head_scale=10.0).save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    (root / "p.txt").write_text("\n".join(f"w{i} w{i * 7 % 60} w{i * 13 % 60} w{i + 1}" for i in range(24)))
    return root


@pytest.mark.parametrize("name, data", [("fkl", "on-policy"), ("rkl", "on-policy"), ("jsd", "mixed"), ("tvd", "target")])
def test_distillation_lowers_the_divergence_and_raises_acceptance(learnable, tmp_path, name, data):
    config = DistillConfig(
        target=str(learnable / "target"),
        layers=1,
        prompts=str(learnable / "p.txt"),
        divergence=name,
        data=data,
        steps=60,
        lr=3e-3,
        max_new_tokens=12,
    )
    distiller = Distiller(config, tmp_path / "out", ModelLoader(device="cpu"))
    # a random target has nothing to generalize from: measure on training prompts, over the target's own samples
    prompts = distiller.train_ids[:16]
    target = Hierarchy([distiller.target.model], [])
    samples = [target.generate(ids, 12, SamplingConfig(mode="sample", seed=100 + i)).tokens for i, ids in enumerate(prompts)]

    def measured():
        total = 0.0
        for ids, continuation in zip(prompts, samples):
            p = teacher_forced_logits(distiller.target.model, ids, continuation, 64)
            q = teacher_forced_logits(distiller.student, ids, continuation, 64)
            total += float(divergence(name, p, q))
        return total / len(prompts), *HeldOut.make(distiller.target, prompts, 12, 1.0).acceptance(distiller.student)

    before = measured()
    distiller.train()
    after = measured()
    assert after[0] < 0.7 * before[0]
    assert after[1] > before[1] + 0.1 and after[2] > before[2] + 0.05
    first, last = distiller.log[:10], distiller.log[-10:]
    assert sum(e.loss for e in last) < 0.5 * sum(e.loss for e in first)
    assert sum(e.sampled for e in last) > sum(e.sampled for e in first)


def test_grouped_student_passes_give_the_one_pass_gradient(tiny_dirs, prompts, tmp_path, monkeypatch):
    """A step's student passes run in groups of similar length; their gradients add up to the one
    padded pass's, and the student reads only the last max_context tokens of each prompt."""
    config = DistillConfig(target=str(tiny_dirs["target"]), layers=2, prompts=str(prompts), max_new_tokens=4, max_context=3)
    distiller = Distiller(config, tmp_path / "out", ModelLoader(device="cpu"))
    distiller.prepare()
    corpus = distiller.corpus
    seqs = [i for i in range(12) if corpus.continuations[i]]
    cut = [corpus.prompts[i][-(1 + i % 3) :] for i in seqs]  # prompts of 1..3 tokens: groups of several lengths
    conts = [corpus.continuations[i] for i in seqs]
    teacher = TeacherRows.cat([corpus.teacher(i) for i in seqs])

    def gradient(group):
        monkeypatch.setattr(distiller_module, "PASS_GROUP", group)
        distiller.optimizer.zero_grad(set_to_none=True)
        q, rows, loss = distiller._backward(cut, conts, teacher)
        assert q.shape[0] == len(rows.ids) == sum(map(len, conts))  # every position once, the teacher's rows beside
        return loss, {n: p.grad.clone() for n, p in distiller.trainable}

    one_loss, one_grad = gradient(100)
    grouped_loss, grouped_grad = gradient(1)
    assert grouped_loss == pytest.approx(one_loss, rel=1e-5)
    assert all(torch.allclose(grouped_grad[n], one_grad[n], rtol=1e-4, atol=1e-6) for n in one_grad)

    read = []
    logits = distiller_module.continuation_logits
    monkeypatch.setattr(
        distiller_module, "continuation_logits", lambda model, p, *a, **k: read.extend(map(len, p)) or logits(model, p, *a, **k)
    )
    distiller.train_step()
    assert read and max(read) <= 3 and max(len(p) for p in corpus.prompts) > 3


def test_a_checkpoint_from_before_max_context_resumes_as_reading_whole_prompts(tiny_dirs, prompts, tmp_path):
    assert distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 1, "--max-context", 0).exit_code == 0
    path = tmp_path / "out" / "checkpoint" / "state.pt"
    state = torch.load(path, weights_only=True)
    del state["config"]["max_context"]  # as a run made before the option wrote it
    torch.save(state, path)
    result = distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 2, "--resume")
    assert result.exit_code == 1 and "other settings (max_context 0)" in result.output
    assert distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 2, "--resume", "--max-context", 0).exit_code == 0


def test_trainers_leave_the_sampled_profiling_prompts_to_profile_which_names_an_overlap(tiny_dirs, prompts, tmp_path):
    out = tmp_path / "student"
    assert distill(tiny_dirs["target"], out, prompts, "--steps", 1, "--reserve", 5).exit_code == 0
    every = load_prompts(str(prompts))
    profiled, trained = split(every, "profile"), split(every, "train", reserve=5)
    reserved = split(every, "profile", 5).prompts  # what profile --max-prompts 5 reads
    assert trained.prompts == tuple(p for p in profiled.prompts if p not in reserved)
    assert set(split(every, "profile", 3).prompts) <= set(reserved)  # a smaller sample is inside it
    record = set(json.loads((out / TRAINED_PROMPTS).read_text())["digests"])
    assert record == {prompt_digest(p) for p in trained.prompts}
    chain = f"{out},{tiny_dirs['target']}"
    trained_in_8 = sum(p not in reserved for p in split(every, "profile", 8).prompts)  # a repeated prompt is reserved with its twin
    assert trained_in_8 > 0
    for n, warning in ((5, ""), (8, f"{out} was trained on {trained_in_8} of these 8 profiling prompts")):
        result = run("profile", "--models", chain, "--db", tmp_path / f"{n}.db", "--prompts", prompts, "--max-prompts", n, *QUICK_PROFILE)
        assert result.exit_code == 0, result.output
        assert (warning in result.stderr) if warning else "trained on" not in result.stderr, result.stderr
    few = tmp_path / "few.txt"
    few.write_text("\n".join(f"w{i} w{i + 1}" for i in range(12)))
    one_line_error(distill(tiny_dirs["target"], tmp_path / "none", few, "--steps", 1), "lower --reserve")


def test_saved_student_loads_as_a_model_spec_with_identical_logits(tiny_dirs, prompts, tmp_path):
    config = DistillConfig(target=str(tiny_dirs["target"]), layers=2, prompts=str(prompts), steps=2, max_new_tokens=4, train_batch=2)
    distiller = Distiller(config, tmp_path / "out", ModelLoader(device="cpu"))
    distiller.train()
    card = distiller.finish().to_dict()
    loader = ModelLoader(device="cpu", prepack=False)  # the student's own kernels: logits bit for bit
    loaded = loader.load(str(tmp_path / "out"))
    assert loaded.num_layers == 2 and loaded.fingerprint == loader.load(str(tiny_dirs["target"])).fingerprint
    ids = torch.tensor([[0, 5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, distiller.student(ids).logits)
    assert json.loads((tmp_path / "out" / "distill.json").read_text()) == card
    assert "divergence | fkl" in (tmp_path / "out" / "README.md").read_text()


def test_cli_reports_and_the_student_drafts_for_its_target(tiny_dirs, prompts, tmp_path):
    out = tmp_path / "student"
    result = distill(tiny_dirs["target"], out, prompts, "--steps", 3, "--divergence", "tvd", "--data", "mixed", "--json")
    assert result.exit_code == 0, result.output
    card = json.loads(result.stdout)
    assert card["steps"] == 3 and card["layers"] == 1 and card["divergence"] == "tvd" and card["data"] == "mixed"
    assert 0 <= card["acceptance_greedy"] <= 1 and 0 <= card["acceptance_sampled"] <= 1 and len(card["log"]) == 3
    assert card["train_prompts"].endswith(":train") and "validate" in card["eval_prompts"]
    assert (out / "checkpoint" / "state.pt").is_file() and (out / "tokenizer.json").is_file()
    chain = f"{out},{tiny_dirs['target']}"
    assert fp32_check(chain, 2, 10)["identical"]


def test_a_student_trained_through_a_trimmed_head_drafts_through_it(tiny_dirs, prompts, tmp_path):
    """--vocab N: the student learns (target data and its own samples) through its head's N lowest
    token ids; its frozen head is saved whole, and DIR:vocab=N drafts through the same rows."""
    out = tmp_path / "trimmed"
    result = distill(tiny_dirs["target"], out, prompts, "--steps", 3, "--vocab", 20, "--top-k", 8, "--data", "mixed", "--json")
    assert result.exit_code == 0, result.output
    card = json.loads(result.stdout)
    assert card["vocab"] == 20 and all(math.isfinite(entry["loss"]) for entry in card["log"])
    assert f"{out}:vocab=20" in (out / "README.md").read_text()
    target = ModelLoader(device="cpu", dtype="fp32").load(str(tiny_dirs["target"]))
    saved = weights(out)
    head = next(k for k in saved if k.endswith("embed_tokens.weight"))  # tied: the head's rows, frozen
    assert torch.equal(saved[head], target.model.get_input_embeddings().weight)
    drafter = ModelLoader(device="cpu", dtype="fp32").load(f"{out}:vocab=20").model
    with torch.no_grad():
        logits = drafter(torch.tensor([[3, 4, 5]])).logits[0]  # [3, V]
    assert torch.isinf(logits[:, 20:]).all() and torch.isfinite(logits[:, :20]).all()
    assert fp32_check(f"{out}:vocab=20,{tiny_dirs['target']}", 2, 10)["identical"]
    one_line_error(distill(tiny_dirs["target"], tmp_path / "few", prompts, "--vocab", 8, "--top-k", 8), "must keep more tokens than top_k")


def test_a_seed_reproduces_the_run(tiny_dirs, prompts, tmp_path):
    for name in ("a", "b"):
        assert distill(tiny_dirs["target"], tmp_path / name, prompts, "--steps", 3).exit_code == 0
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c = distill(tiny_dirs["target"], tmp_path / "c", prompts, "--steps", 3, "--seed", 1)
    assert c.exit_code == 0 and not torch.equal(weights(tmp_path / "c")["model.norm.weight"], a["model.norm.weight"])


@pytest.mark.parametrize("data", ["on-policy", "target"])
def test_resume_continues_from_the_checkpoint_step(tiny_dirs, prompts, tmp_path, data):
    args = ("--data", data, "--lr", "1e-2")
    assert distill(tiny_dirs["target"], tmp_path / "whole", prompts, "--steps", 4, *args).exit_code == 0
    assert distill(tiny_dirs["target"], tmp_path / "split", prompts, "--steps", 2, *args).exit_code == 0
    assert torch.load(tmp_path / "split" / "checkpoint" / "state.pt", weights_only=True)["step"] == 2
    result = distill(tiny_dirs["target"], tmp_path / "split", prompts, "--steps", 4, "--resume", "--json", *args)
    assert result.exit_code == 0, result.output
    assert [e["step"] for e in json.loads(result.stdout)["log"]] == [1, 2, 3, 4]
    whole, resumed = weights(tmp_path / "whole"), weights(tmp_path / "split")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_ctrl_c_saves_a_checkpoint(tiny_dirs, prompts, tmp_path, monkeypatch):
    step = Distiller.train_step

    def interrupted_at_the_third(self):
        if self.step == 2:
            raise KeyboardInterrupt
        return step(self)

    monkeypatch.setattr(Distiller, "train_step", interrupted_at_the_third)
    result = distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 5)
    assert result.exit_code == 1 and "interrupted at step 2; rerun with --resume to continue" in result.output
    assert torch.load(tmp_path / "out" / "checkpoint" / "state.pt", weights_only=True)["step"] == 2


def test_a_checkpoint_killed_mid_write_keeps_the_previous_one(tiny_dirs, prompts, tmp_path, monkeypatch):
    assert distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 1).exit_code == 0
    state = tmp_path / "out" / "checkpoint" / "state.pt"
    before = state.read_bytes()

    def killed(obj, path):
        path.write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed)
    result = distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 2, "--resume")
    assert result.exit_code != 0 and state.read_bytes() == before


# --- bad input: one line, non-zero exit, nothing written ---------------------------------------


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A causal LM whose decoder keeps its blocks in transformer.h, not model.layers."""
    path = tmp_path_factory.mktemp("gpt2") / "model"
    tokenizer = word_tokenizer(WORDS)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize(
    "init, fragment",
    [
        ("4", "is neither layers=K nor a model"),
        ("depth=2", "is neither layers=K nor a model"),
        ("layers=0", "out of range: the target has 4 decoder layers, use 1..3"),
        ("layers=4", "out of range: the target has 4 decoder layers, use 1..3"),
    ],
)
def test_bad_init(tiny_dirs, prompts, tmp_path, init, fragment):
    out = tmp_path / "out"
    result = run("distill", "--target", tiny_dirs["target"], "--init", init, "--out", out, "--prompts", prompts, *FAST)
    assert result.exit_code == 1 and fragment in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_incompatible_target(gpt2_dir, prompts, tmp_path):
    result = distill(gpt2_dir, tmp_path / "out", prompts)
    assert result.exit_code == 1 and "not a transformer decoder with model.layers" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_out_exists_without_resume_and_resume_without_checkpoint(tiny_dirs, prompts, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = distill(tiny_dirs["target"], out, prompts)
    assert result.exit_code == 1 and "exists and is not empty" in result.output and "--resume" in result.output
    result = distill(tiny_dirs["target"], out, prompts, "--resume")
    assert result.exit_code == 1 and "no checkpoint" in result.output
    assert len(result.output.strip().splitlines()) == 1 and [p.name for p in out.iterdir()] == ["notes.txt"]


def test_resume_with_other_settings(tiny_dirs, prompts, tmp_path):
    assert distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 1).exit_code == 0
    before = (tmp_path / "out" / "checkpoint" / "state.pt").read_bytes()
    result = distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 2, "--resume", "--divergence", "rkl")
    assert result.exit_code == 1 and "other settings (divergence 'fkl')" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert (tmp_path / "out" / "checkpoint" / "state.pt").read_bytes() == before


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory."), RuntimeError("DefaultCPUAllocator: not enough memory")])
def test_out_of_memory_names_the_knobs(tiny_dirs, prompts, tmp_path, monkeypatch, error):
    def oom(self):
        raise error

    monkeypatch.setattr(Distiller, "train_step", oom)
    result = distill(tiny_dirs["target"], tmp_path / "out", prompts)
    assert result.exit_code == 1
    assert "out of memory at training batch 2 and 6 new tokens; lower --train-batch or --max-new-tokens" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_student_from_another_model_of_the_tokenizer(tiny_dirs, prompts, tmp_path):
    """--init SPEC trains a copy of another model (the loader's own copy stays as it was)."""
    out = tmp_path / "other-init"
    result = run(
        "distill", "--target", tiny_dirs["target"], "--init", tiny_dirs["draft"], "--out", out, "--prompts", prompts, *FAST, "--json"
    )
    assert result.exit_code == 0, result.output
    card = (out / "README.md").read_text()
    assert f"`{tiny_dirs['draft']}`, all but its frozen embeddings and head trained" in card
    trained = ModelLoader("cpu", "fp32").load(str(out))
    draft = ModelLoader("cpu", "fp32").load(str(tiny_dirs["draft"]))
    assert trained.num_layers == draft.num_layers
    assert any(not torch.equal(a, b) for a, b in zip(trained.model.parameters(), draft.model.parameters()))
    one_line_error(
        run("distill", "--target", tiny_dirs["target"], "--init", tiny_dirs["other"], "--out", tmp_path / "x", "--prompts", prompts, *FAST),
        "different tokenizers",
    )
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_of_an_older_run_names_its_minibatch_batch_size(tiny_dirs, prompts, tmp_path):
    """A run saved before the minibatch was named train_batch resumes with its settings read."""
    assert distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 1, "--train-batch", 3).exit_code == 0
    path = tmp_path / "out" / "checkpoint" / "state.pt"
    state = torch.load(path, weights_only=True)
    state["config"]["batch_size"] = state["config"].pop("train_batch")  # as a run made before the rename wrote it
    torch.save(state, path)
    result = distill(tiny_dirs["target"], tmp_path / "out", prompts, "--steps", 2, "--resume", "--train-batch", 3)
    assert result.exit_code == 0, result.output
