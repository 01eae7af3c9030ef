"""Block-draft heads (``bpd:DIR``): the host's hidden rows, drafting, greedy identity, training, refusals."""

import json

import pytest
import torch

from hsd_planner.training.heads import HeadsConfig, HeadsTrainer
from hsd_runtime import (
    ChainError,
    Hierarchy,
    ModelLoader,
    ModelSpecError,
    SamplingConfig,
    TokenizerMismatchError,
    build_hierarchy,
    parse_spec,
)
from hsd_runtime.decoding.cache import CachedModel
from hsd_runtime.decoding.drafters import DraftContext
from hsd_runtime.decoding.results import LevelStats
from hsd_runtime.learned.bpd import BpdDrafter
from hsd_runtime.learned.heads import HEADS_CARD, HEADS_FILE, BlockHeads, HeadsCard, save_heads
from hsd_runtime.terms.tree import DraftTree
from tests.helpers import QUICK_PROFILE, fp32_check, one_line_error, run
from tests.tiny import tiny_llama

PROMPT = [5, 9, 12, 5, 9, 33, 2, 7]
SPECS = ["bpd:x", "bpd:x:k=3:p=3", "bpd:x:rescore=ngram", "bpd:x:k=4:p=4:rescore=ngram:alpha=2", "bpd:x:vocab=20"]


def random_heads(hidden: int = 32, heads: int = 4, seed: int = 5) -> BlockHeads:
    """Heads whose blocks are not the identity, so each head drafts something of its own."""
    torch.manual_seed(seed)
    out = BlockHeads(hidden, heads)
    with torch.no_grad():
        for block in out.blocks:
            block.down.weight.normal_(0, 0.3)
    return out.eval().requires_grad_(False)


def card(host: str = "T", hidden: int = 32, heads: int = 4) -> HeadsCard:
    return HeadsCard(host=host, hidden_size=hidden, heads=heads, inner=hidden, logits_width=64)


@pytest.fixture(scope="module")
def models():
    return {"T": tiny_llama(0, layers=2, head_scale=5), "M": tiny_llama(1, layers=1, head_scale=5)}


# --- specs -------------------------------------------------------------------------------------


def test_bpd_specs_round_trip_and_bad_ones_are_one_line():
    for text in ["bpd:heads/a", "bpd:/abs/dir:k=8:p=2:rescore=ngram:alpha=0.5", "bpd:d:rescore=ngram:corpus=c.txt"]:
        spec = parse_spec(text)
        assert str(spec) == text and spec.is_bpd and not spec.is_model
    assert parse_spec("bpd:d").bpd_option("k") == "4" and parse_spec("bpd:d").heads_dir == "d"
    for text, fragment in [
        ("bpd", "bpd:DIR"),
        ("bpd:k=2", "bpd:DIR"),
        ("bpd:d:k=0", "k=0"),
        ("bpd:d:k=99", "k=99"),
        ("bpd:d:p=0", "p=0"),
        ("bpd:d:rescore=lm:p=2", "p > 1 takes rescore=ngram or none"),
        ("bpd:d:alpha=x", "alpha=x"),
        ("bpd:d:layers=2", "unknown option 'layers'"),
        ("bpd:d:k=1:p=2", "k >= 2"),
        ("bpd:d:vocab=x", "vocab=x"),
        ("bpd:d:corpus=c.txt", "takes rescore=ngram"),
    ]:
        with pytest.raises(ModelSpecError, match=fragment):
            parse_spec(text)


# --- the host's hidden rows ------------------------------------------------------------------------


def _calls(cached: CachedModel) -> list[torch.Tensor]:
    """A run of cache calls with growth, a rollback and a settled tree: every logits tensor returned."""
    tree = DraftTree()
    a = tree.add(4, -1)
    tree.add(6, -1)
    tree.add(8, a)
    seq = [3, 5, 7, 9]
    out = [cached.logits(seq, 3), cached.logits(seq + [11, 13], 3), cached.logits(seq + [12], 3)]
    out.append(cached.tree_logits(seq + [12], tree))
    out.append(cached.logits(seq + [12, 4, 8, 10], 6))
    return out


def test_a_host_that_keeps_hidden_rows_returns_the_same_logits(models):
    plain = _calls(CachedModel(models["T"], 64, LevelStats("T")))
    kept = _calls(CachedModel(models["T"], 64, LevelStats("T"), keep_hidden=True))
    assert all(torch.equal(a, b) for a, b in zip(plain, kept))


def test_hidden_rows_are_those_of_a_fresh_pass_along_the_sequence(models):
    host = models["T"]
    cached = CachedModel(host, 64, LevelStats("T"), keep_hidden=True)

    def fresh(tokens: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return host.model(input_ids=torch.tensor([tokens])).last_hidden_state[0, -1:]

    cached.prefill([3, 5, 7, 9])
    h, j = cached.hidden_at([3, 5, 7, 9])
    assert j == 3 and torch.allclose(h, fresh([3, 5, 7, 9]), atol=1e-5)
    cached.logits([3, 5, 7, 9, 11, 13, 15], 3)  # a draft of three verified
    h, j = cached.hidden_at([3, 5, 7, 9, 11, 20])  # 11 accepted, 20 replaced 13
    assert j == 4 and torch.allclose(h, fresh([3, 5, 7, 9, 11]), atol=1e-5)
    assert cached.hidden_at([4, 5]) is None  # nothing along another text
    tree = DraftTree()
    a = tree.add(17, -1)
    tree.add(19, a)
    cached.tree_logits([3, 5, 7, 9, 11, 20], tree)
    h, j = cached.hidden_at([3, 5, 7, 9, 11, 20, 17, 30])
    assert j == 6 and torch.allclose(h, fresh([3, 5, 7, 9, 11, 20, 17]), atol=1e-5)
    h, j = cached.hidden_at([3, 5, 7, 9, 11, 20, 40])  # no node along it: the row after the root
    assert j == 5 and torch.allclose(h, fresh([3, 5, 7, 9, 11, 20]), atol=1e-5)


# --- drafting ------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
def test_greedy_output_is_the_targets_with_heads_under_the_target_and_under_a_middle_level(models, spec):
    reference = Hierarchy([models["T"]], []).generate(PROMPT, 30).tokens
    for members, widths in (([models["T"]], [3]), ([models["M"], models["T"]], [3, 2])):
        drafter = BpdDrafter(random_heads(), card(), parse_spec(spec))
        hierarchy = Hierarchy([drafter, *members], widths)
        result = hierarchy.generate(PROMPT, 30)
        assert result.tokens == reference
        assert result.levels[0].proposed > 0 and result.levels[0].forward_passes > 0
        again = hierarchy.generate(PROMPT, 30, reuse_prompt=True)  # heads read the prefill's kept hidden row
        assert again.tokens == reference and again.levels[0].proposed == result.levels[0].proposed


def test_heads_draft_after_a_prefill_and_after_each_verification(models):
    drafter = BpdDrafter(random_heads(), card(), parse_spec("bpd:x"))
    Hierarchy([drafter, models["T"]], [4])  # attaches the host
    assert drafter.host is not None
    drafter.host.prefill(PROMPT)
    ctx = DraftContext.one(list(PROMPT), SamplingConfig(), torch.Generator())
    first = drafter.propose(ctx, 4)[0].tokens
    with torch.no_grad():
        own = int(models["T"](torch.tensor([PROMPT])).logits[0, -1].argmax())
    assert len(first) == 4 and first[0] == own  # head 1 is the host's own next token
    drafter.host.logits(PROMPT + first[:3], len(PROMPT) - 1)  # the host verified three
    after = drafter.propose(DraftContext.one(PROMPT + first[:2] + [0], SamplingConfig(), torch.Generator()), 4)[0].tokens
    assert len(after) == 3  # heads 2..4 from the row that predicted the added token
    assert drafter.propose(DraftContext.one([1, 2, 3], SamplingConfig(), torch.Generator()), 4)[0].tokens == []  # no row along it


def test_p_best_paths_make_one_breadth_first_tree_of_distinct_siblings(models):
    drafter = BpdDrafter(random_heads(), card(), parse_spec("bpd:x:k=3:p=5:rescore=ngram"))
    Hierarchy([drafter, models["T"]], [3])
    assert drafter.host is not None
    drafter.prefill([PROMPT])
    drafter.host.prefill(PROMPT)
    tree = drafter.propose_tree(DraftContext.one(list(PROMPT), SamplingConfig(), torch.Generator()), 3)
    leaves = [i for i in range(len(tree)) if not tree.children(i)]
    assert len(leaves) == 5 and all(tree.depths[i] == 3 for i in leaves)
    assert tree.depths == sorted(tree.depths)  # breadth-first
    for node in [-1, *range(len(tree))]:
        kids = [tree.tokens[c] for c in tree.children(node)]
        assert len(kids) == len(set(kids))


def test_trimmed_heads_propose_kept_tokens_only(models):
    drafter = BpdDrafter(random_heads(), card(), parse_spec("bpd:x:vocab=10"))
    result = Hierarchy([drafter, models["T"]], [3]).generate(PROMPT, 30, SamplingConfig(mode="sample", seed=2))
    assert len(result.tokens) == 30
    assert drafter.host is not None
    logits = drafter.head_logits(torch.randn(1, 32), 1)  # [4, 64]
    assert torch.isinf(logits[:, 10:]).all() and torch.isfinite(logits[:, :10]).all()


def test_sampling_with_heads_runs_and_reports_the_heads_q(models):
    drafter = BpdDrafter(random_heads(), card(), parse_spec("bpd:x"))
    result = Hierarchy([drafter, models["T"]], [3]).generate(PROMPT, 20, SamplingConfig(mode="sample", seed=1))
    assert len(result.tokens) == 20 and 0 < result.levels[0].accepted < result.levels[0].proposed


# --- heads directories and chains ------------------------------------------------------------------


@pytest.fixture
def heads_dir(tiny_dirs, tmp_path):
    folder = tmp_path / "heads"
    save_heads(folder, random_heads(hidden=32), card(host=str(tiny_dirs["target"])))
    return folder


def test_a_heads_directory_drafts_through_the_cli_with_check(tiny_dirs, heads_dir):
    for options in ("", ":k=3:p=3:rescore=ngram", f":k=3:rescore={tiny_dirs['draft']}:alpha=2"):
        chain = f"bpd:{heads_dir}{options},{tiny_dirs['target']}"
        assert fp32_check(chain, 3, 12)["identical"]


def test_chains_that_misplace_heads_are_refused(tiny_dirs, heads_dir):
    loader = ModelLoader(device="cpu")
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    for chain, fragment in [
        ([f"bpd:{heads_dir}", draft, target], "holds heads for"),  # another host
        ([draft, f"bpd:{heads_dir}", target], "lowest level"),
        ([target, f"bpd:{heads_dir}"], "cannot be ngram or bpd"),
    ]:
        with pytest.raises(ChainError, match=fragment):
            build_hierarchy(chain, [2] * (len(chain) - 1), loader)
    with pytest.raises(TokenizerMismatchError):
        build_hierarchy([f"bpd:{heads_dir}:rescore={tiny_dirs['other']}", target], [2], loader)
    with pytest.raises(ChainError, match="one prompt"):
        build_hierarchy([f"bpd:{heads_dir}", target], [2], loader)[0].generate_batch([[1, 2], [3, 4]], 2)


def test_an_ngram_corpus_file_counts_beside_the_context_and_is_stored_absolute(tiny_dirs, heads_dir, tmp_path, monkeypatch):
    from hsd_planner.profiling.sources import absolute_spec, source_fingerprint

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("w1 w2 w3 " * 20)
    target = str(tiny_dirs["target"])
    loader = ModelLoader(device="cpu", dtype="fp32")
    chains = {
        name: build_hierarchy([f"bpd:{heads_dir}:rescore=ngram{extra}", target], [3], loader)
        for name, extra in (("plain", ""), ("corpus", f":corpus={corpus}"))
    }
    w1, w2 = chains["corpus"][1].encode("w1 w2", add_special_tokens=False)
    bigram = {}
    for name, (chain, _) in chains.items():
        drafter = chain.levels[0]
        assert isinstance(drafter, BpdDrafter) and drafter._lm is not None
        drafter.prefill([PROMPT])  # a new sequence forgets the last one's context, never the corpus
        bigram[name] = drafter._lm.log_prob([w1], w2)
    assert bigram["corpus"] > bigram["plain"] + 1.0
    chain = f"bpd:{heads_dir}:k=3:rescore=ngram:corpus={corpus},{target}"
    assert fp32_check(chain, 3, 12)["identical"]
    monkeypatch.chdir(tmp_path)
    relative = f"bpd:{heads_dir}:rescore=ngram:corpus=corpus.txt"
    assert absolute_spec(relative).endswith(f"corpus={corpus}")
    before = source_fingerprint(absolute_spec(relative))
    corpus.write_text("w4 w5 " * 30)
    assert source_fingerprint(absolute_spec(relative)) != before  # a changed corpus is a changed candidate
    missing = run("generate", "--chain", f"bpd:{heads_dir}:rescore=ngram:corpus=nope.txt,{target}", "--widths", 2, "--prompt", "w1")
    one_line_error(missing, "nope.txt")


@pytest.mark.parametrize("damage", ["no card", "bad card", "old format", "no weights", "bad weights", "wrong shape"])
def test_a_damaged_heads_directory_is_one_line(tiny_dirs, heads_dir, damage):
    path = heads_dir / HEADS_CARD
    if damage == "no card":
        path.unlink()
    elif damage == "bad card":
        path.write_text("{not json")
    elif damage == "old format":
        path.write_text(json.dumps(json.loads(path.read_text()) | {"format": 0}))
    elif damage == "no weights":
        (heads_dir / HEADS_FILE).unlink()
    elif damage == "bad weights":
        (heads_dir / HEADS_FILE).write_bytes(b"\x00" * 64)
    else:
        path.write_text(json.dumps(json.loads(path.read_text()) | {"inner": 7}))
    result = run("generate", "--chain", f"bpd:{heads_dir},{tiny_dirs['target']}", "--widths", 2, "--prompt", "w1", "--dtype", "fp32")
    one_line_error(result, str(heads_dir))


# --- training ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "p.txt"
    path.write_text("\n".join(f"w{i % 60} w{i * 7 % 60} w{i * 13 % 60} w{(i + 1) % 60}" for i in range(60)))
    return path


def train(tiny_dirs, prompts, out, *extra):
    args = ["heads", "train", "--model", tiny_dirs["target"], "--heads", 3, "--out", out, "--prompts", prompts]
    return run(*args, "--max-new-tokens", 8, "--train-batch", 4, "--samples-per-prompt", 1, "--device", "cpu", "--dtype", "fp32", *extra)


def test_training_lowers_the_loss_and_the_heads_draft_for_their_host(tiny_dirs, prompts, tmp_path):
    config = HeadsConfig(
        model=str(tiny_dirs["target"]),
        heads=3,
        prompts=str(prompts),
        steps=40,
        train_batch=8,
        max_new_tokens=8,
        lr=3e-3,
        samples_per_prompt=1,
    )
    trainer = HeadsTrainer(config, tmp_path / "h", ModelLoader(device="cpu"))
    trainer.train()
    assert sum(trainer.losses[-5:]) < sum(trainer.losses[:5])
    report = trainer.finish()
    assert len(report.acceptance["greedy"]) == 2 and report.acceptance["block_greedy"] >= 1.0
    saved = json.loads((tmp_path / "h" / HEADS_CARD).read_text())
    assert saved["host"] == str(tiny_dirs["target"]) and saved["heads"] == 3 and saved["acceptance"]["held_out"] == report.acceptance
    chain = f"bpd:{tmp_path / 'h'}:p=2:k=2,{tiny_dirs['target']}"
    assert fp32_check(chain, 2, 10)["identical"]


def test_resume_equals_one_run_and_bad_runs_are_one_line(tiny_dirs, prompts, tmp_path):
    assert train(tiny_dirs, prompts, tmp_path / "whole", "--steps", 4).exit_code == 0
    assert train(tiny_dirs, prompts, tmp_path / "split", "--steps", 2).exit_code == 0
    result = train(tiny_dirs, prompts, tmp_path / "split", "--steps", 4, "--resume", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"] == 4
    from safetensors.torch import load_file

    whole, resumed = load_file(tmp_path / "whole" / HEADS_FILE), load_file(tmp_path / "split" / HEADS_FILE)
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)
    ce = train(tiny_dirs, prompts, tmp_path / "ce", "--steps", 2, "--loss", "ce", "--json")
    assert ce.exit_code == 0 and json.loads(ce.stdout)["config"]["loss"] == "ce", ce.output
    one_line_error(train(tiny_dirs, prompts, tmp_path / "whole", "--steps", 4), "not empty")
    one_line_error(train(tiny_dirs, prompts, tmp_path / "none", "--resume"), "no checkpoint")
    one_line_error(train(tiny_dirs, prompts, tmp_path / "split", "--steps", 6, "--resume", "--lr", "0.5"), "other settings")


def test_heads_trained_through_a_trimmed_layer_draft_through_it(tiny_dirs, prompts, tmp_path):
    for loss in ("kl", "ce"):
        out = tmp_path / loss
        result = train(tiny_dirs, prompts, out, "--steps", 3, "--vocab", 20, "--top-k", 8, "--loss", loss, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads((out / HEADS_CARD).read_text())["vocab"] == 20
        assert "trimmed to its 20 lowest token ids" in (out / "README.md").read_text()
    loader = ModelLoader(device="cpu", dtype="fp32")
    chain, _ = build_hierarchy([f"bpd:{tmp_path / 'kl'}", str(tiny_dirs["target"])], [3], loader)
    drafter = chain.levels[0]
    assert isinstance(drafter, BpdDrafter)
    logits = drafter.head_logits(torch.randn(1, 32), 1)  # [H, V]: the card's trim, no vocab= in the spec
    assert torch.isinf(logits[:, 20:]).all() and torch.isfinite(logits[:, :20]).all()
    assert fp32_check(f"bpd:{tmp_path / 'kl'},{tiny_dirs['target']}", 3, 10)["identical"]
    one_line_error(train(tiny_dirs, prompts, tmp_path / "few", "--vocab", 8, "--top-k", 8), "must keep more tokens than top_k")


# --- the planner -------------------------------------------------------------------------------


def test_heads_are_one_more_candidate_profiled_under_their_host_only(tiny_dirs, heads_dir, tmp_path):
    """Profile times the heads and measures them against their host only; solve ranks chains with
    them directly under it; validate runs the pick; export refuses them."""
    target, draft = str(tiny_dirs["target"]), str(tiny_dirs["draft"])
    db = tmp_path / "t.db"
    for mode in ("greedy", "sample"):
        for options in ("", ":rescore=ngram:k=3"):
            models = f"bpd:{heads_dir}{options},{draft},{target}"
            result = run("profile", "--models", models, "--db", db, "--mode", mode, "--max-prompts", "3", *QUICK_PROFILE, "--json")
            assert result.exit_code == 0, result.output
            report = json.loads(result.stdout)
            pairs = {(a["drafter"], a["verifier"]) for a in report["acceptance"]}
            heads = f"bpd:{heads_dir.resolve()}{options}"
            assert (heads, target) in pairs and (heads, draft) not in pairs
            solved = run("solve", "--db", db, "--mode", mode, "--top", "30", "--json")
            assert solved.exit_code == 0, solved.output
            chains = [plan["chain"] for plan in json.loads(solved.stdout)["plans"]]
            with_heads = [c for c in chains if heads in c]
            assert with_heads and all(c.index(heads) == 0 and c[1] == target for c in with_heads)
    # the last solve (sample, rescored heads): validate runs every candidate plan, the heads' too
    checked = run("validate", "--db", db, "--candidates", "all", "--max-prompts", 1, "--max-new-tokens", 4, "--device", "cpu", "--json")
    assert checked.exit_code == 0, checked.output
    assert any(heads in json.dumps(row) for row in json.loads(checked.stdout)["plans"])
    one_line_error(run("profile", "--models", f"bpd:{heads_dir}:p=2,{target}", "--db", db, *QUICK_PROFILE), "p=1")
    one_line_error(run("profile", "--models", f"bpd:{heads_dir},{draft}", "--db", db, *QUICK_PROFILE), "list that model")

    from hsd_planner.export.restrict import unloadable
    from hsd_planner.export.stacks import STACKS

    assert all(unloadable(heads, True, stack) for stacks in STACKS.values() for stack in stacks)
