"""``layers=K`` on the llama.cpp engine: a GGUF of a model's first K layers, made once into the cache.

The pruned file must compute what the torch engine's ``layers=K`` view of the same model computes
(its first K decoder layers under its own final norm and head), and be refused in one line where
K is out of range.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from hsd_runtime import ModelLoader, ModelSpecError
from hsd_runtime.models.gguf_prune import block_count, prune_gguf
from hsd_runtime.models.llamacpp import GgufModel, pruned_gguf
from hsd_runtime.models.views import truncated_view
from tests import law
from tests.gguf_tiny import char_gguf, write_gguf
from tests.helpers import one_line_error, run
from tests.law import law_model

SKIPPED = os.environ.get("HSD_PLAN_SKIP_LLAMACPP") == "1"
pytestmark = pytest.mark.skipif(SKIPPED, reason="HSD_PLAN_SKIP_LLAMACPP=1: the llama.cpp engine was not installed")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HSD_PLAN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_pruned_file_computes_the_torch_engines_early_exit(tmp_path):
    model = law_model(10, layers=3)
    source = write_gguf(model, tmp_path / "three.gguf")
    prompt = [0, 3, 4, 5, 3, 4, 2, 1, 5]
    for k in (1, 2):
        out = tmp_path / f"first{k}.gguf"
        prune_gguf(source, out, k)
        assert block_count(out) == k
        with torch.inference_mode():
            expected = truncated_view(model, k)(torch.tensor([prompt])).logits[0]  # [9, V]
            whole = model(torch.tensor([prompt])).logits[0]
        got = GgufModel(out, f"first{k}", threads=1, n_ctx=64).open_cache(law.V).feed(prompt, 0, len(prompt))
        torch.testing.assert_close(got, expected, rtol=0, atol=2e-2)  # f16 keys and values, as the whole file
        assert (got - whole).abs().max() > 1.0  # the control: the first k layers are not the whole model


def test_the_loader_makes_the_pruned_file_once_and_shares_the_tokenizer(tmp_path, cache):
    source = char_gguf(tmp_path / "two.gguf", seed=0, layers=2)
    loader = ModelLoader("cpu", engine="llamacpp", threads=1)
    whole = loader.load(f"{source}")
    first = loader.load(f"{source}:layers=1")
    assert (whole.num_layers, first.num_layers) == (2, 1)
    assert first.tokenizer is whole.tokenizer
    made = pruned_gguf(source, 1)
    assert made.parent == cache / "gguf-layers" and made.stat().st_size < source.stat().st_size
    stamp = made.stat().st_mtime_ns
    assert ModelLoader("cpu", engine="llamacpp", threads=1).load(f"{source}:layers=1:quant=q8_0").num_layers == 1
    assert made.stat().st_mtime_ns == stamp  # found in the cache, not made again
    assert pruned_gguf(source, 2) == source  # all its layers: the file itself


def test_layers_out_of_range_are_one_line_and_cache_nothing(tmp_path, cache):
    source = char_gguf(tmp_path / "two.gguf", seed=0, layers=2)
    for k in (0, 3):
        with pytest.raises(ModelSpecError, match=r"out of range .* it has 2 decoder layers \(use 1\.\.2\)"):
            pruned_gguf(source, k)
    chain = f"{source}:layers=3,{source}"
    result = run("generate", "--engine", "llamacpp", "--chain", chain, "--widths", "2", "--prompt", "ab", "--max-new-tokens", "2")
    one_line_error(result, "it has 2 decoder layers")
    assert not list(cache.rglob("*.layers*.gguf"))
