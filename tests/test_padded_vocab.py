"""Models of one tokenizer whose output layers are padded to different sizes (as Qwen2.5's 7B,
152,064 rows, beside its 0.5B and 1.5B, 151,936): every level compares and samples over the
tokenizer's columns, so a padded row never wins, no drafter is fed an id it cannot embed, and the
target decoding alone (the reference of ``--check``) decodes over the same columns.

The target here is built so that its padded rows win every argmax and hold most of the sampled
mass: without the cut to the tokenizer's columns, ``--check`` diverges at the first token and
profiling feeds a padded id to the drafter, whose embedding has no such row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hsd_runtime import ModelLoader
from tests.helpers import SOLVABLE_PROFILE, fp32_check, run
from tests.tiny import WORDS, tiny_llama, word_tokenizer

PADDED = 80  # the target's output rows; the tokenizer has 64 tokens


def _padded_target(path: Path) -> Path:
    """A tiny Llama with 80 embedding and output rows over a 64-token tokenizer whose rows 64..79
    win: the residual stream's first coordinate is held at 10 (every embedding, no layer writes
    it), so after the final norm it is positive, and the padded rows read it with weight 1000."""
    tokenizer = word_tokenizer(WORDS)
    model = tiny_llama(5, layers=2, vocab=PADDED)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 10.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[len(tokenizer) :] = 0.0
        model.lm_head.weight[len(tokenizer) :, 0] = 1000.0
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    from tests.tiny import save_tiny_model

    root = tmp_path_factory.mktemp("padded")
    return {"target": _padded_target(root / "target"), "draft": save_tiny_model(root / "draft", seed=1, layers=2)}


def test_the_target_is_padded_and_its_padding_would_win(dirs):
    loaded = ModelLoader(device="cpu").load(str(dirs["target"]))
    ids = torch.tensor([[4, 5, 6]])
    with torch.inference_mode():
        logits = loaded.model(input_ids=ids).logits[0, -1]
    assert logits.shape[0] == PADDED and int(logits.argmax()) >= 64  # the uncut argmax is a padded row
    assert loaded.logits_width == 64  # the tokenizer's columns


@pytest.mark.parametrize("engine", ["torch", "static"])
def test_generate_check_agrees_over_the_tokenizers_columns(dirs, engine):
    chain = f"{dirs['draft']}:engine={engine},{dirs['target']}:engine={engine}"
    check = fp32_check(chain, 3, 12, prompt="w1 w2 w3 w1 w2")
    assert check["identical"], check


def test_the_target_alone_never_emits_a_padded_id(dirs):
    result = run("generate", "--chain", str(dirs["target"]), "--prompt", "w1 w2", "--max-new-tokens", "8", "--raw", "--json")
    assert result.exit_code == 0, result.output
    assert all(t < 64 for t in json.loads(result.stdout)["tokens"])


@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_profile_feeds_the_drafter_only_ids_it_embeds(dirs, tmp_path, mode):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i + 2}" for i in range(4)))
    db = tmp_path / "p.db"
    result = run(
        "profile", "--models", f"ngram,{dirs['draft']},{dirs['target']}", "--prompts", prompts, "--mode", mode,
        "--db", db, *SOLVABLE_PROFILE, "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    solved = run("solve", "--db", db, "--mode", mode, "--json")
    assert solved.exit_code == 0, solved.output
    validated = run("validate", "--db", db, "--prompts", prompts, "--max-prompts", 2, "--max-new-tokens", 6, "--device", "cpu", "--json")
    assert validated.exit_code == 0, validated.output
