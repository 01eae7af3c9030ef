"""Trimmed drafter heads (``vocab=N`` / ``vocab=FILE``): what they score, what they leave alone, what they refuse."""

from __future__ import annotations

import json

import pytest
import torch

from hsd_runtime import ModelLoader, ModelSpecError, TokenizerMismatchError, TrimmedHead, parse_spec
from hsd_runtime.models.trim import kept_tokens
from tests.helpers import QUICK_PROFILE, one_line_error, run

IDS = torch.tensor([[0, 5, 9, 17, 33, 12]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits[0]  # [6, V]


@pytest.mark.parametrize("prepack", [True, False], ids=["prepacked", "plain"])
def test_trimmed_head_scores_kept_tokens_only_and_leaves_the_parent_alone(tiny_dirs, prepack):
    loader = ModelLoader("cpu", "fp32", prepack=prepack)
    full = loader.load(str(tiny_dirs["target"]))
    before = logits(full.model)
    trimmed = loader.load(f"{tiny_dirs['target']}:vocab=20")
    head = trimmed.model.get_output_embeddings()
    assert isinstance(head, TrimmedHead) and trimmed.logits_width == full.logits_width
    keep = head.keep
    # the end-of-sequence token first, then ids 0, 2, 3, ... in order: 20 tokens
    assert keep.tolist() == [1, 0, *range(2, 20)]
    out = logits(trimmed.model)
    torch.testing.assert_close(out[:, keep], before[:, keep], rtol=0, atol=1e-5)
    dropped = torch.ones(full.logits_width, dtype=torch.bool)
    dropped[keep] = False
    assert torch.isneginf(out[:, dropped]).all()
    assert trimmed.model.model is full.model.model  # the decoder is shared, not copied
    assert torch.equal(logits(full.model), before)  # the parent keeps its full head
    assert trimmed.num_parameters < full.num_parameters


def test_trimmed_view_and_int8_copy(tiny_dirs):
    loader = ModelLoader("cpu", "fp32")
    view = loader.load(f"{tiny_dirs['target']}:layers=2")
    both = loader.load(f"{tiny_dirs['target']}:layers=2:vocab=30")
    assert both.num_layers == 2
    keep = both.model.get_output_embeddings().keep
    torch.testing.assert_close(logits(both.model)[:, keep], logits(view.model)[:, keep], rtol=0, atol=1e-5)
    q = loader.load(f"{tiny_dirs['target']}:quant=int8:vocab=30")
    assert type(q.model.get_output_embeddings().rows).__name__ == "Int8Linear"
    assert torch.isneginf(logits(q.model)).sum() == 6 * (q.logits_width - 30)


def test_ranking_file_keeps_its_tokens(tiny_dirs, tmp_path):
    ranking = tmp_path / "rank.json"
    ranking.write_text(json.dumps([40, 41, 7, 1, 3]))
    model = ModelLoader("cpu", "fp32").load(f"{tiny_dirs['target']}:vocab={ranking}")
    assert model.model.get_output_embeddings().keep.tolist() == [1, 40, 41, 7, 3]  # end of sequence first


def test_greedy_identity_with_a_trimmed_drafter(tiny_dirs):
    result = run(
        "generate", "--chain", f"{tiny_dirs['target']}:vocab=24,{tiny_dirs['target']}", "--widths", "3",
        "--prompt", "w1 w2 w3", "--max-new-tokens", "24", "--raw", "--check", "--device", "cpu", "--dtype", "fp32", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["check"]["identical"] is True
    assert report["levels"][0]["proposed"] > 0


def test_vocab_command_writes_a_ranking_the_loader_reads(tiny_dirs, tmp_path):
    prompts = tmp_path / "p.txt"
    # every prompt: w5 more often than w9, w9 more often than w1 (ids 9, 13, 5)
    prompts.write_text("".join(" ".join(["w5"] * (3 + i) + ["w9", "w9", "w1"]) + "\n" for i in range(12)))
    out = tmp_path / "r.json"
    args = ["vocab", "--model", tiny_dirs["target"], "--prompts", prompts, "--size", "8", "--out", out]
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    ranking = json.loads(out.read_text())
    assert summary["size"] == 8 and len(ranking["tokens"]) == 8
    assert ranking["tokens"] == [9, 13, 5, 0, 1, 2, 3, 4]  # by count, then unseen tokens in id order
    assert summary["distinct_tokens"] == 3 and summary["coverage"] == 1.0
    one_line_error(run(*args), "exists")  # never overwritten without --force
    assert run(*args, "--force").exit_code == 0
    model = ModelLoader("cpu", "fp32").load(f"{tiny_dirs['target']}:vocab={out}")
    assert len(model.model.get_output_embeddings().keep) == 8


def test_bad_trims_are_refused(tiny_dirs, tmp_path):
    loader = ModelLoader("cpu", "fp32")
    target = tiny_dirs["target"]
    with pytest.raises(ModelSpecError, match="keeps every token"):
        loader.load(f"{target}:vocab=64")
    bad = tmp_path / "bad.json"
    for text, fragment in [
        ("not json", "is not JSON"),
        ("[" + "9" * 5000 + "]", "holds a number written with 5,000 characters"),
        ("[]", "non-empty list"),
        ("[1, 1]", "names a token twice"),
        ("[1, 2.5]", "non-empty list"),
        ("[1, 99]", "has 64 rows"),
    ]:
        bad.write_text(text)
        with pytest.raises(ModelSpecError, match=fragment):
            loader.load(f"{target}:vocab={bad}")
    other = tmp_path / "other.json"
    assert run("vocab", "--model", tiny_dirs["other"], "--size", "4", "--out", other).exit_code == 0
    with pytest.raises(TokenizerMismatchError, match="another tokenizer"):
        loader.load(f"{target}:vocab={other}")
    one_line_error(run("generate", "--chain", f"ngram:vocab=8,{target}", "--prompt", "w1", "--device", "cpu"), "ngram takes only")
    with pytest.raises(ModelSpecError, match="integer from 1"):
        parse_spec("m:vocab=0")
    assert str(parse_spec("m:layers=2:vocab=8192")) == "m:layers=2:vocab=8192"
    assert parse_spec("m:vocab=8192").vocab == 8192 and parse_spec("m:vocab=r.json").vocab == "r.json"
    assert kept_tokens([5, 6, 7], 2, (6,), 10).tolist() == [6, 5]


def test_a_trimmed_drafter_is_one_more_candidate(tiny_dirs, tmp_path):
    """Profile measures it (its own cost and acceptance), solve ranks it, validate runs it."""
    target = tiny_dirs["target"]
    trimmed = f"{target}:layers=1:vocab=20"
    db = tmp_path / "t.db"
    result = run("profile", "--models", f"{trimmed},{target}:layers=1,{target}", "--db", db, "--max-prompts", "3", *QUICK_PROFILE, "--json")
    assert result.exit_code == 0, result.output
    pairs = {(a["drafter"], a["verifier"]) for a in json.loads(result.stdout)["acceptance"]}
    assert (trimmed, str(target)) in pairs
    solved = json.loads(run("solve", "--db", db, "--top", "30", "--json").stdout)
    assert any(trimmed in plan["chain"] for plan in solved["plans"])


def test_no_serving_stack_is_asked_to_run_a_trimmed_drafter():
    from hsd_planner.export.restrict import unloadable
    from hsd_planner.export.stacks import STACKS

    for stacks in STACKS.values():
        for stack in stacks:
            assert unloadable("qwen2.5-coder-0.5b:vocab=16384", False, stack) == "it cannot trim the head of qwen2.5-coder-0.5b:vocab=16384"


def test_a_model_that_soft_caps_its_logits_is_not_trimmed():
    from hsd_runtime import trimmed_model
    from tests.tiny import tiny_llama

    model = tiny_llama(0)
    model.config.final_logit_softcapping = 30.0  # tanh(-inf / 30) * 30 = -30: a left-out token would keep mass
    with pytest.raises(ModelSpecError, match="soft-caps its logits"):
        trimmed_model(model, torch.tensor([0, 1, 2]))
