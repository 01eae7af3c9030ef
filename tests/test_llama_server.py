"""The llama.cpp install step and the llama-server export, run: the server built from the pinned
binding's llama.cpp tree starts with the flags the export writes, drafts with them, and refuses the
flags the export no longer writes.

Real model: the packaged SmolLM2-135M GGUF, as target and as its own draft model (same tokenizer;
what is checked is that the server drafts and accepts, not a speed). Skipped, saying why, where the
install step was skipped (``HSD_PLAN_SKIP_LLAMACPP=1``).
"""

from __future__ import annotations

import os

import pytest

from hsd_planner.export.stacks import Served, stack_for
from hsd_planner.validation.llama_server import LLAMA_CPP_PYTHON, LlamaServer, LlamaServerError, llama_server_path
from hsd_runtime.packaged import packaged_gguf

SKIPPED = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIPPED, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")]

PROMPT = "def fibonacci(n):\n    "
NEW = 24


@pytest.fixture(scope="module")
def gguf() -> str:
    return str(packaged_gguf("smollm2-135m"))


def _served(target: str, drafter: str | None, lookup: bool, k: int) -> list[str]:
    served = Served(target=target, drafter=drafter, lookup=lookup, k=k, ngram_order=3, mode="greedy", temperature=None)
    return stack_for("llamacpp").render(served).payload["server_args"]


def test_the_binding_is_the_pinned_version_and_reads_a_packaged_gguf(gguf):
    import llama_cpp

    assert llama_cpp.__version__ == LLAMA_CPP_PYTHON
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(gguf.encode(), params)
    assert model is not None
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        assert llama_cpp.llama_vocab_n_tokens(vocab) == 49152  # SmolLM2's vocabulary
    finally:
        llama_cpp.llama_model_free(model)


def test_exported_flags_start_the_server_and_draft(gguf):
    """Each exported configuration starts the server; the draft model and the n-gram lookup draft
    (llama-server reports draft_n), and greedy text is the same with and without speculation."""
    with LlamaServer(gguf, _served(gguf, None, False, 0), threads=1) as server:
        plain = server.complete(PROMPT, NEW)
    assert plain.predicted_n == NEW and plain.draft_n == 0 and plain.predicted_ms > 0
    with LlamaServer(gguf, _served(gguf, gguf, False, 4), threads=1) as server:
        drafted = server.complete(PROMPT, NEW)
    assert drafted.draft_n > 0 and 0 < drafted.draft_n_accepted <= drafted.draft_n
    with LlamaServer(gguf, _served(gguf, "ngram", True, 4), threads=1) as server:
        looked_up = server.complete(PROMPT, NEW)
    assert looked_up.draft_n > 0  # the function name repeats: the lookup finds it
    # the same model drafting for itself and the lookup change which passes run, not what greedy
    # picks; llama.cpp's batched passes may round apart from its one-token passes (other kernels),
    # so a near-tie late in the text may flip: the first 8 tokens must agree (all 24 did here)
    for other in (drafted, looked_up):
        assert other.tokens[:8] == plain.tokens[:8], (other.tokens, plain.tokens)


def test_removed_and_incomplete_flags(gguf):
    """--draft-max, which older exports wrote, makes the current server exit; -md without
    --spec-type draft-simple loads a drafter that drafts nothing."""
    with pytest.raises(LlamaServerError, match=r"--draft-max.*removed"), LlamaServer(gguf, ["-md", gguf, "--draft-max", "4"], threads=1):
        pass
    with LlamaServer(gguf, ["-md", gguf, "--spec-draft-n-max", "4"], threads=1) as server:
        assert server.complete(PROMPT, 8).draft_n == 0


def test_a_missing_server_is_one_line_naming_the_install_step(monkeypatch, tmp_path):
    monkeypatch.setenv("HSD_PLAN_LLAMA_SERVER", str(tmp_path / "nothere"))
    with pytest.raises(LlamaServerError, match="not an executable file"):
        llama_server_path()
    monkeypatch.delenv("HSD_PLAN_LLAMA_SERVER")
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LlamaServerError, match=r"install_llamacpp\.sh"):
        llama_server_path()
