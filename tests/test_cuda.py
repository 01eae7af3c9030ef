"""The runtime and the CLI on a CUDA device (skipped where there is none).

The same rules as on the CPU: greedy hierarchies (chains, trees, the n-gram drafter) give the
target's own greedy tokens, sampled ones follow the target's distribution exactly, and
``profile``/``solve``/``validate`` run end to end with ``--device cuda``, storing curves timed with
the device synchronized; ragged prompts decoded in lockstep, each as if alone,
and the batch sizes go through profile, solve and validate there too.
"""

import json

import pytest
import torch
from click.testing import CliRunner

from hsd_runtime import CachePool, Hierarchy, NgramDrafter, TreeShape
from tests.tiny import tiny_llama

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _on_cuda(seed: int, **kwargs) -> torch.nn.Module:
    return tiny_llama(seed, **kwargs).to("cuda")


@pytest.mark.parametrize(
    "ngram, widths",
    [(False, [4]), (False, [TreeShape((3, 2))]), (True, [3, 4])],
    ids=["chain", "tree", "ngram-chain"],
)
def test_greedy_on_cuda_is_the_targets_greedy(ngram, widths):
    target, draft = _on_cuda(0, layers=3), _on_cuda(1, layers=1)
    members: list = [NgramDrafter(), draft, target] if ngram else [draft, target]
    prompt = [1, 5, 9, 1, 5, 9, 1, 5]
    auto = Hierarchy([target], []).generate(prompt, 24)
    got = Hierarchy(members, widths).generate(prompt, 24)
    assert got.tokens == auto.tokens and len(got.tokens) == 24


def test_kept_target_rows_and_a_reused_prompt_on_cuda():
    """keep_logits on the GPU gives the rows of one pass over prompt + output; reuse_prompt
    decodes a repeat of the prompt as its first run did, feeding nothing for the prompt."""
    target, draft = _on_cuda(0, layers=3), _on_cuda(1, layers=1)
    prompt = [1, 5, 9, 1, 5, 9, 1, 5]
    h = Hierarchy([NgramDrafter(), draft, target], [3, 4])
    first = h.generate(prompt, 24, keep_logits=True)
    with torch.inference_mode():
        whole = target(input_ids=torch.tensor([prompt + first.tokens], device="cuda")).logits[0, len(prompt) - 1 : -1]
    torch.testing.assert_close(first.target_logits, whole, rtol=1e-4, atol=1e-4)
    again = h.generate(prompt, 24, reuse_prompt=True)
    assert again.tokens == first.tokens and again.levels[-1].prefill_tokens == 0


def test_plans_on_one_pool_share_the_targets_prefill_on_cuda():
    """Two hierarchies on one CachePool on the GPU: the second keeps the target's prefill of the
    first and decodes the target's own greedy tokens."""
    target, draft = _on_cuda(0, layers=3), _on_cuda(1, layers=1)
    prompt, pool = [1, 5, 9, 1, 5, 9, 1, 5], CachePool()
    auto = Hierarchy([target], [], caches=pool).generate(prompt, 24)
    got = Hierarchy([NgramDrafter(), draft, target], [3, 4], caches=pool).generate(prompt, 24, reuse_prompt=True)
    assert got.tokens == auto.tokens and got.levels[-1].prefill_tokens == 0 and got.levels[1].prefill_tokens == len(prompt)


@pytest.mark.parametrize("ngram", [False, True], ids=["chain", "ngram-chain"])
def test_batched_greedy_on_cuda_is_each_prompts_own_greedy(ngram):
    """Ragged prompts in lockstep on the GPU: every sequence gets the target's greedy tokens of
    its prompt decoded alone (the ragged cache's left padding and per-row rollback on CUDA)."""
    target, draft = _on_cuda(0, layers=3), _on_cuda(1, layers=1)
    members: list = [NgramDrafter(), draft, target] if ngram else [draft, target]
    prompts = [[1, 5, 9, 1, 5, 9, 1, 5], [7, 3], [2, 4, 6, 8, 10, 12, 2, 4, 6, 8, 10]]
    alone = Hierarchy([target], [])
    result = Hierarchy(members, [3, 4] if ngram else [4]).generate_batch(prompts, 20)
    assert result.sequences == [alone.generate(p, 20).tokens for p in prompts]


@pytest.mark.parametrize("widths", [[1], [TreeShape((3, 2))], [2, 2]], ids=["chain", "tree", "depth2"])
def test_sampling_on_cuda_follows_the_target(widths):
    from hsd_runtime import SamplingConfig
    from tests.law import ALPHA, law_check, law_model

    target = law_model(10, layers=2).to("cuda")
    members = [law_model(12, sharpness=3.0 if isinstance(widths[0], TreeShape) else 1.0).to("cuda"), target]
    if len(widths) == 2:
        members.insert(1, law_model(11).to("cuda"))
    check = law_check(Hierarchy(members, widths), target, SamplingConfig(mode="sample"))
    assert check.pvalue > ALPHA


def test_profile_solve_validate_on_cuda(tiny_dirs, tmp_path):
    from hsd_planner.cli import cli

    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i} w{i + 1} w{i + 2}" for i in range(40)))

    def run(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result.output

    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    fast = ["--latency-grid", "1,2,4,8", "--context-lens", "8,32", "--repeats", "1", "--max-new-tokens", "6"]
    run("profile", "--models", chain, "--prompts", prompts, "--max-prompts", 6, "--device", "cuda", "--batch-sizes", "1,4", *fast)
    solved = json.loads(run("solve", "--t-max", "4", "--batch-sizes", "1,4", "--json"))
    assert solved["plans"] and [e["batch_size"] for e in solved["batch"]["batch_sizes"]] == [1, 4]
    batched = json.loads(
        run(
            "validate",
            "--batch-sizes",
            "1,4",
            "--prompts",
            prompts,
            "--max-prompts",
            3,
            "--max-new-tokens",
            6,
            "--device",
            "cuda",
            "--json",
        )
    )
    assert {r["batch_size"] for r in batched["plans"]} == {1, 4}
    assert all(r["measured_ms_per_token"] > 0 for r in batched["plans"])
    assert all(r["tokens"] % 6 == 0 for r in batched["plans"] if r["batch_size"] > 1)  # at b = 1 a sequence may stop at EOS
    report = json.loads(
        run(
            "validate", "--candidates", "all", "--prompts", prompts, "--max-prompts", 3, "--max-new-tokens", 8, "--device", "cuda", "--json"
        )
    )
    assert all(p["measured_ms_per_token"] > 0 for p in report["plans"])
    assert all(len(s) >= 4 for m in report["calibration"]["models"].values() for s in m["samples_ms"].values())


@pytest.mark.parametrize("method", ["distill", "heads", "steer"])
def test_training_on_cuda_gives_a_drafter_that_decodes_exactly(method, tiny_dirs, tmp_path):
    """Each trainer runs its steps on the GPU, and its drafter then decodes greedily on the GPU
    token for token as the fp32 target does alone."""
    from tests.helpers import run

    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(f"w{i % 60} w{i * 7 % 60} w{i * 13 % 60} w{(i + 1) % 60}" for i in range(60)))
    out, target = tmp_path / method, tiny_dirs["target"]
    common = ["--out", out, "--prompts", prompts, "--steps", 6, "--train-batch", 4, "--max-new-tokens", 8]
    common += ["--device", "cuda", "--dtype", "fp32", "--json"]
    if method == "distill":
        args, drafter = ["distill", "--target", target, "--init", "layers=1", *common], str(out)
    elif method == "heads":
        args, drafter = ["heads", "train", "--model", target, "--heads", 3, *common], f"bpd:{out}:p=2:k=2"
    else:
        args = ["steer", "train", "--drafter", tiny_dirs["draft"], "--verifier", target, *common]
        drafter = f"{tiny_dirs['draft']}:steer={out}"
    trained = run(*args)
    assert trained.exit_code == 0, trained.output
    checked = run(
        "generate",
        "--chain",
        f"{drafter},{target}",
        "--prompt",
        "w1 w7 w13",
        "--max-new-tokens",
        12,
        "--widths",
        "2",
        "--device",
        "cuda",
        "--dtype",
        "fp32",
        "--check",
        "--json",
    )
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["check"]["identical"]


# --- the static engine: CUDA graphs --------------------------------------------------------------


def _static(model: torch.nn.Module, name: str, **kwargs):
    from hsd_runtime.models.static_engine import StaticModel

    return StaticModel(model, name, n_ctx=256, **kwargs)


@pytest.mark.parametrize(
    "ngram, widths",
    [(False, [4]), (False, [TreeShape((3, 2))]), (True, [3, 4])],
    ids=["chain", "tree", "ngram-chain"],
)
def test_static_engine_graphs_decode_the_targets_greedy(ngram, widths):
    """Captured graphs replayed over static caches give the dynamic-cache target's greedy tokens,
    prefills longer than one captured pass (chunks of 5 here) included."""
    target, draft = _on_cuda(0, layers=3), _on_cuda(1, layers=1)
    prompt = [1, 5, 9, 1, 5, 9, 1, 5, 7, 3, 11, 5]
    auto = Hierarchy([target], []).generate(prompt, 24)
    members: list = [_static(draft, "draft", chunk=5), _static(target, "target", chunk=5)]
    got = Hierarchy([NgramDrafter(), *members] if ngram else members, widths).generate(prompt, 24)
    assert got.tokens == auto.tokens and len(got.tokens) == 24


def test_a_prepared_hierarchy_captures_no_graph_while_it_decodes():
    """``prepare`` captures every verification's pass up front (widths 4: passes of 1 to 5 tokens),
    so a timed decode replays graphs only, and still gives the target's greedy tokens."""
    target = _on_cuda(0, layers=3)
    prompt = [1, 5, 9, 1, 5, 9, 1, 5, 7, 3, 11, 5] * 2
    auto = Hierarchy([target], []).generate(prompt, 32)
    static = _static(target, "target")
    h = Hierarchy([NgramDrafter(), static], [4])
    h.prepare()
    graphs = h._caches[0].kv.buffers.graphs
    shapes = {(n, every_row) for n, every_row, _ in graphs}
    assert shapes == {(1, False)} | {(n, e) for n in range(2, 6) for e in (False, True)}
    before = set(graphs)
    got = h.generate(prompt, 32)
    assert got.levels[0].proposed > 0  # the lookup drafted: verification passes ran
    assert set(graphs) - before <= {k for k in graphs if k[0] > 5}  # a prefill's chunk may be new, no verification is
    assert got.tokens == auto.tokens


def test_static_engine_graph_passes_equal_its_eager_passes():
    """Every pass shape replayed from its graph gives the eager forward's logits, through a rollback."""
    from hsd_runtime.decoding.cache import CachedModel
    from hsd_runtime.decoding.results import LevelStats

    target = _on_cuda(0, layers=3)
    graphs = CachedModel(_static(target, "g"), 64, LevelStats(model="g"))
    eager = CachedModel(_static(target, "e", graphs=False), 64, LevelStats(model="e"))
    seq = [1, 5, 9, 1, 5, 9, 1, 5]
    for cached in (graphs, eager):
        cached.prefill(seq)
    for extra, first in (([7, 3, 11], 8), ([12], 11), ([4, 4], 10)):
        seq = seq[:first] + extra if first < len(seq) else seq + extra
        torch.testing.assert_close(graphs.logits(seq, first), eager.logits(seq, first), rtol=1e-4, atol=1e-4)
    assert graphs.kv.buffers.graphs  # the passes were replayed from captured graphs


def test_profile_solve_validate_on_the_static_engine_on_cuda(tiny_dirs, tmp_path):
    """``--engine static`` on CUDA in bf16 stores the graphs' kernels with cuDNN's attention,
    ``solve`` finds that latency as this machine's, and ``validate`` runs the pick there."""
    import sqlite3

    from hsd_planner.cli import cli

    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(f"w{i} w{i + 1} w{i} w{i + 1} w{i + 2}" for i in range(12)))
    db = tmp_path / "s.db"

    def run(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result.output

    chain = f"ngram,{tiny_dirs['draft']},{tiny_dirs['target']}"
    here = ["--device", "cuda", "--dtype", "bf16", "--db", db]
    fast = ["--latency-grid", "1,2,4,8", "--context-lens", "8,32", "--repeats", "1", "--max-new-tokens", "6"]
    run("profile", "--engine", "static", "--models", chain, "--prompts", prompts, "--max-prompts", 4, *fast, *here)
    solved = json.loads(run("solve", "--t-max", "4", "--db", db, "--json"))
    assert solved["plans"]
    report = json.loads(run("validate", "--prompts", prompts, "--max-prompts", 2, "--max-new-tokens", 8, *here, "--json"))
    assert all(p["measured_ms_per_token"] > 0 for p in report["plans"])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT kernels FROM hardware").fetchone()[0] == "static-graphs-cudnn"


@pytest.mark.parametrize("attention", ["efficient", "math", "cudnn", None])
def test_static_engine_attention_backends_in_bf16(attention):
    """Each SDPA backend the static engine can run on CUDA, in bf16 (cuDNN's kernel takes no fp32),
    head dim 64, and the default (None: cuDNN's in bf16): its graph passes give the
    memory-efficient kernel's logits to bf16 rounding, and a hierarchy on it decodes the target's
    own greedy tokens on it (distributions sharpened, so no near-tie decides a token)."""
    from hsd_runtime.decoding.cache import CachedModel
    from hsd_runtime.decoding.results import LevelStats

    def model(seed: int, layers: int) -> torch.nn.Module:
        return tiny_llama(seed, layers=layers, hidden=256, head_scale=8.0).to("cuda", torch.bfloat16)

    target, draft = model(0, 3), model(1, 1)
    here = CachedModel(_static(target, "b", attention=attention), 64, LevelStats(model="b"))
    reference = CachedModel(_static(target, "r", attention="efficient", graphs=False), 64, LevelStats(model="r"))
    seq = [1, 5, 9, 1, 5, 9, 1, 5, 7, 3]
    for cached in (here, reference):
        cached.prefill(seq)
    seq = seq + [11, 4, 4]
    torch.testing.assert_close(here.logits(seq, 10).float(), reference.logits(seq, 10).float(), rtol=0.05, atol=0.05)
    prompt = [1, 5, 9, 1, 5, 9, 1, 5, 7, 3, 11, 5]
    auto = Hierarchy([_static(target, "t", attention=attention)], []).generate(prompt, 24)
    members = [NgramDrafter(), _static(draft, "d", attention=attention), _static(target, "t2", attention=attention)]
    got = Hierarchy(members, [3, 4]).generate(prompt, 24)
    assert got.tokens == auto.tokens and len(got.tokens) == 24


def test_the_torch_engine_on_a_gpu_points_to_the_static_engine(tiny_dirs):
    """A command whose --engine is torch on CUDA says once that the static engine is the GPU's path;
    on the static engine it says nothing of it."""
    from hsd_planner.cli.loader import LAUNCH_BOUND
    from tests.helpers import run

    args = ["generate", "--chain", str(tiny_dirs["target"]), "--prompt", "w1 w2", "--max-new-tokens", "4", "--device", "cuda"]
    torch_run = run(*args)
    assert torch_run.exit_code == 0, torch_run.output
    assert torch_run.stderr.count(LAUNCH_BOUND) == 1
    static_run = run(*args, "--engine", "static")
    assert static_run.exit_code == 0, static_run.output
    assert LAUNCH_BOUND not in static_run.stderr
