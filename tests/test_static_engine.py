"""The static engine on the CPU: its own forward over preallocated caches, eagerly (no graphs).

Against the torch engine's transformers forward over a ``DynamicCache``, on the same weights:
logits of every pass through rollbacks, chunked prefills, trees grown and settled, a reused
prompt; greedy hierarchies decode the target's own greedy tokens (chains, trees, three levels,
an int8 copy); the forward traces whole (no graph break: nothing in a pass reads a value back to
the host, which a CUDA graph could not replay). The CUDA graphs themselves are in test_cuda.py.
"""

from __future__ import annotations

import random

import pytest
import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from hsd_runtime import Hierarchy, NgramDrafter, TreeShape
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.results import LevelStats
from hsd_runtime.models.quantize import quantized_copy
from hsd_runtime.models.static_engine import StaticModel
from hsd_runtime.terms.errors import ModelSpecError, PromptError
from hsd_runtime.terms.tree import DraftTree
from tests.tiny import tiny_llama

TARGET = tiny_llama(21, layers=2, head_scale=4.0, bias=True)
PROMPT = [5, 9, 11, 7, 30, 12, 5, 9]


def _noisy_copy(scale: float, seed: int) -> torch.nn.Module:
    copy = tiny_llama(21, layers=2, head_scale=4.0, bias=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(scale * torch.randn_like(p))
    return copy


DRAFTER = _noisy_copy(0.03, 1)
MIDDLE = _noisy_copy(0.01, 2)


def _tiny_qwen(seed: int) -> Qwen2ForCausalLM:
    """A random Qwen2 (biased q/k/v, 4 query heads over 2 key/value heads, tied embeddings)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, tie_word_embeddings=True, use_sliding_window=False,
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg).eval()


def _pair(model: torch.nn.Module, chunk: int | None = None) -> tuple[CachedModel, CachedModel]:
    return (
        CachedModel(model, 64, LevelStats(model="dynamic")),
        CachedModel(StaticModel(model, "static", n_ctx=256, chunk=chunk), 64, LevelStats(model="static")),
    )


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("chunk", [None, 3])
def test_passes_match_the_dynamic_cache_through_rollbacks(arch, chunk):
    model = TARGET if arch == "llama" else _tiny_qwen(3)
    dynamic, static = _pair(model, chunk)
    rng = random.Random(7)
    dynamic.prefill(PROMPT)
    static.prefill(PROMPT)
    torch.testing.assert_close(static._last, dynamic._last, atol=1e-5, rtol=1e-5)
    seq = list(PROMPT)
    for _ in range(30):
        if rng.random() < 0.4 and len(seq) > len(PROMPT) + 2:  # a rejection: roll back, then a new token
            seq = seq[: rng.randint(len(PROMPT), len(seq) - 1)]
        seq += [rng.randrange(3, 64) for _ in range(rng.randint(1, 7))]
        first = rng.randint(max(0, len(seq) - 8), len(seq) - 1)
        torch.testing.assert_close(static.logits(seq, first), dynamic.logits(seq, first), atol=1e-5, rtol=1e-5)
    assert static.stats.tokens_fed == dynamic.stats.tokens_fed


def _random_tree(rng: random.Random, shape: tuple[int, ...]) -> DraftTree:
    tree = DraftTree()
    parents = [-1]
    for b in shape:
        nxt = []
        for parent in parents:
            nxt += [tree.add(x, parent) for x in rng.sample(range(3, 64), b)]
        parents = nxt
    return tree


@pytest.mark.parametrize("shape", [(3,), (2, 2), (3, 2, 1), (2, 1, 2)])
def test_trees_grown_and_settled_match_the_dynamic_cache(shape):
    rng = random.Random(len(shape))
    tree = _random_tree(rng, shape)
    dynamic, static = _pair(TARGET)
    for cached in (dynamic, static):
        cached.prefill(PROMPT[:5])
    grown = DraftTree()
    for depth in range(1, len(shape) + 1):  # one depth a pass, as a drafter grows it
        for i in tree.at_depth(depth):
            grown.add(tree.tokens[i], tree.parents[i])
        torch.testing.assert_close(static.tree_logits(PROMPT, grown), dynamic.tree_logits(PROMPT, grown), atol=1e-5, rtol=1e-5)
    leaf = tree.at_depth(len(shape))[-1]
    seq = PROMPT + [tree.tokens[j] for j in tree.path(leaf)][:2] + [40, 41]  # down a path, then off the tree
    torch.testing.assert_close(static.logits(seq, len(seq) - 3), dynamic.logits(seq, len(seq) - 3), atol=1e-5, rtol=1e-5)
    assert static.stats.tokens_fed == dynamic.stats.tokens_fed  # the path's keys were kept, not fed again


@torch.inference_mode()
def _transformers_greedy(model: torch.nn.Module, new: int) -> list[int]:
    """transformers' own greedy decoding (it stops at the model's end token, 1)."""
    config = GenerationConfig(max_new_tokens=new, do_sample=False, num_beams=1, eos_token_id=1, pad_token_id=2)
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long), generation_config=config)
    return out[0, len(PROMPT) :].tolist()


REFERENCE = Hierarchy([TARGET], []).generate(PROMPT, 40).tokens  # the torch engine's target alone, past its end token


def test_the_reference_is_transformers_greedy_decoding():
    theirs = _transformers_greedy(TARGET, 40)
    assert len(theirs) >= 8 and REFERENCE[: len(theirs)] == theirs


def _static(model: torch.nn.Module, name: str) -> StaticModel:
    return StaticModel(model, name, n_ctx=256)


@pytest.mark.parametrize(
    "chain",
    [
        ("target",),
        ("drafter", 4),
        ("ngram", 3),
        ("drafter", 2, "middle", 5),
        ("ngram", 4, "drafter", 3),
        ("drafter", "2x2x1"),
        ("drafter", "3x1", "middle", 4),
        ("int8", 3),
    ],
)
def test_greedy_hierarchies_decode_the_targets_own_greedy_tokens(chain):
    models = {"drafter": DRAFTER, "middle": MIDDLE, "int8": quantized_copy(DRAFTER, "int8")}
    names, widths = list(chain[::2]), [TreeShape(tuple(map(int, w.split("x")))) if isinstance(w, str) else w for w in chain[1::2]]
    members = [NgramDrafter() if n == "ngram" else _static(models[n], n) for n in names if n != "target"]
    members.append(_static(TARGET, "target"))
    result = Hierarchy(members, widths).generate(PROMPT, 40)
    assert result.tokens == REFERENCE


def test_a_reused_prompt_decodes_the_same_tokens():
    target = _static(TARGET, "target")
    first = Hierarchy([_static(DRAFTER, "drafter"), target], [3]).generate(PROMPT, 24)
    again = Hierarchy([_static(DRAFTER, "drafter"), target], [3]).generate(PROMPT, 24)  # buffers of the dead caches reused
    assert first.tokens == again.tokens == REFERENCE[:24]


def test_preparing_a_hierarchy_on_the_cpu_captures_nothing_and_changes_no_token():
    """Off CUDA no pass needs setup: ``prepare`` on the static, torch and lookup levels of one chain
    leaves no graph and the same greedy tokens (the captures themselves are in test_cuda.py)."""
    target = _static(TARGET, "target")
    h = Hierarchy([NgramDrafter(), DRAFTER, target], [2, 3])
    h.prepare()
    assert not h._caches[1].kv.buffers.graphs
    assert h.generate(PROMPT, 24).tokens == REFERENCE[:24]


def test_a_pass_traces_whole_without_reading_values_back():
    """What a CUDA graph replays must not hand a value to the host mid-pass (``.item()``, a shape
    from data): torch.compile with ``fullgraph`` fails on the first such break."""
    model = _static(TARGET, "target")
    cache = model.open_cache(64, 64)
    x = model._inputs_for(4, True, cache.buffers.slots)
    x.ids.copy_(torch.tensor([5, 9, 11, 7]))
    x.positions.copy_(torch.arange(4))
    x.slots.copy_(torch.arange(4))
    traced = torch.compile(model.step, fullgraph=True, backend="eager")
    with torch.inference_mode():
        torch.testing.assert_close(traced(cache.buffers, x, 64), model.step(cache.buffers, x, 64))


def test_refusals_are_one_line():
    gemma_like = tiny_llama(1)
    gemma_like.config.model_type = "gemma3_text"
    with pytest.raises(ModelSpecError, match="static engine runs llama, qwen2"):
        StaticModel(gemma_like, "g")
    with pytest.raises(ModelSpecError, match="CUDA graphs need a CUDA device"):
        StaticModel(TARGET, "t", graphs=True)
    cache = _static(TARGET, "t").open_cache(64, 16)
    with pytest.raises(PromptError, match="reaches position 20 of a cache of 16"):
        cache.feed(list(range(3, 23)), 0, 1)


def test_the_attention_backend_and_its_kernels_name_follow_device_and_dtype():
    """cuDNN's attention for bf16 and fp16 on CUDA, the memory-efficient kernel for fp32 (which
    cuDNN's does not take); the hardware key names the backend a profile's passes ran on, and an
    unknown backend is a one-line refusal."""
    from hsd_runtime.models.static_engine import default_attention, static_kernels

    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert [default_attention(gpu, d) for d in (torch.bfloat16, torch.float16, torch.float32)] == ["cudnn", "cudnn", "efficient"]
    assert static_kernels(gpu, dtype=torch.bfloat16) == "static-graphs-cudnn"
    assert static_kernels(gpu) == "static-graphs-efficient"
    assert static_kernels(cpu, True, torch.bfloat16) == "static-eager-prepacked"
    assert StaticModel(TARGET, "t").backend == "efficient"  # the CPU: no backend choice applies
    with pytest.raises(ModelSpecError, match="no attention backend 'flash'"):
        StaticModel(TARGET, "t", attention="flash")


def test_random_weights_are_timed_and_never_compared(tmp_path):
    """``weights=random``: the config's shape with random weights (no checkpoint read), timed by
    ``profile`` on any engine and left out of every acceptance pair."""
    import sqlite3

    from tests.helpers import QUICK_PROFILE, one_line_error, run
    from tests.tiny import save_tiny_model

    target = save_tiny_model(tmp_path / "target", seed=0, layers=2)
    for weights in target.glob("*.safetensors"):
        weights.unlink()  # a folder with the config and tokenizer only: what a machine without the weights has
    prompts = tmp_path / "p.txt"
    prompts.write_text("w1 w2 w3\nw4 w5 w6\n")
    db = tmp_path / "p.db"
    result = run(
        "profile", "--models", f"ngram,{target}:weights=random", "--engine", "static", "--prompts", prompts, "--db", db, *QUICK_PROFILE
    )
    assert result.exit_code == 0, result.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM latency").fetchone()[0] > 0
        assert conn.execute("SELECT COUNT(*) FROM acceptance").fetchone()[0] == 0
        assert conn.execute("SELECT kernels FROM hardware").fetchone()[0] == "static-eager-prepacked"
    # engine=static on every spec, the command's --engine left alone: stored under the static engine's kernels too
    other = tmp_path / "q.db"
    result = run("profile", "--models", f"ngram,{target}:weights=random:engine=static", "--prompts", prompts, "--db", other, *QUICK_PROFILE)
    assert result.exit_code == 0, result.output
    with sqlite3.connect(other) as conn:
        assert conn.execute("SELECT kernels FROM hardware").fetchone()[0] == "static-eager-prepacked"
    one_line_error(run("generate", "--chain", f"{target}:weights=real", "--prompt", "w1"), "the one choice is weights=random")
    one_line_error(run("generate", "--chain", f"{target}:weights=random:engine=llamacpp", "--prompt", "w1"), "weights=")


def test_profile_solve_validate_on_the_static_engine(tiny_dirs, tmp_path):
    """A profile taken with ``--engine static`` is this machine's: ``solve`` finds its latency
    without ``--hardware`` (the static engine's kernels are among this machine's keys), and
    ``validate`` runs the pick on the static engine and stores the validation."""
    import sqlite3

    from tests.helpers import SOLVABLE_PROFILE, run

    prompts = tmp_path / "p.txt"
    prompts.write_text("w1 w2 w3 w1 w2\nw4 w5 w6 w4 w5\nw7 w8 w9 w7 w8\n")
    db = tmp_path / "s.db"
    models = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    result = run(
        "profile", "--engine", "static", "--models", models, "--prompts", prompts, "--max-prompts", "2", "--db", db, *SOLVABLE_PROFILE
    )
    assert result.exit_code == 0, result.output
    result = run("solve", "--db", db, "--t-max", "4", "--max-new-tokens", "6")
    assert result.exit_code == 0, result.output
    assert "engine=static" in result.output
    result = run("validate", "--db", db, "--prompts", prompts, "--max-prompts", "1", "--max-new-tokens", "6", "--device", "cpu")
    assert result.exit_code == 0, result.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT kernels FROM hardware").fetchone()[0] == "static-eager-prepacked"
        assert conn.execute("SELECT COUNT(*) FROM validations").fetchone()[0] >= 1
