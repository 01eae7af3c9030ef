"""The student drafter of a distillation: built from the target's first K layers or from another
model of the target's tokenizer, and measured.

The student is a real copy (not a view) in fp32: of the target's first K decoder layers, final
norm and embeddings, or of the whole other model. Its embeddings and output head stay frozen, the
rest trains.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from hsd_runtime import Hierarchy, LoadedModel, SamplingConfig
from hsd_runtime.models.views import truncated_config

from ..errors import DistillError
from ..profiling.acceptance import acceptance_from_logits, teacher_forced_logits

__all__ = ["HeldOut", "build_student", "own_student", "parse_init", "sample"]


def parse_init(text: str) -> tuple[int | None, str | None]:
    """``"layers=K"`` -> (K, None): the target's first K decoder layers; anything else is a model
    spec -> (None, spec): another model of the target's tokenizer, trained whole."""
    key, sep, value = text.partition("=")
    if key.strip() == "layers" and sep:
        if not (value.strip().isascii() and value.strip().isdigit()):
            raise DistillError(f"--init {text!r} is not of the form layers=K (the student starts from the target's first K decoder layers)")
        return int(value), None
    if not text.strip():
        raise DistillError("--init is empty; give layers=K or a model spec of the target's tokenizer")
    return None, text.strip()


def own_student(model: nn.Module) -> nn.Module:
    """A trainable fp32 copy of a whole model (another model of the target's tokenizer).

    A deep copy: the loader shares the models it loaded, and training changes weights in place.
    Input embeddings and output head frozen, as for a student built from the target's layers.
    """
    student = copy.deepcopy(model).to(dtype=torch.float32)
    for param in student.parameters():
        param.requires_grad_(True)
    for frozen in (student.get_input_embeddings(), student.get_output_embeddings()):
        frozen.weight.requires_grad_(False)
    return student.eval()


def build_student(target: nn.Module, k: int) -> nn.Module:
    """A new fp32 model of the target's class with its first ``k`` decoder layers, copied.

    Embeddings, final norm and head are copied too; the input embeddings and the output head are
    frozen (``requires_grad=False``), everything else (decoder layers, final norm) is trainable.
    """
    decoder = getattr(target, target.base_model_prefix, None)
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise DistillError(
            f"cannot distill {type(target).__name__}: it is not a transformer decoder with model.layers (Llama, Gemma, Qwen, ... are)"
        )
    if not 1 <= k < len(layers):
        raise DistillError(f"--init layers={k} is out of range: the target has {len(layers)} decoder layers, use 1..{len(layers) - 1}")
    cfg = truncated_config(target.config, k)
    prefix = f"{target.base_model_prefix}.layers."
    kept = {
        name: tensor
        for name, tensor in target.state_dict().items()
        if not name.startswith(prefix) or int(name[len(prefix) :].split(".")[0]) < k
    }
    student = type(target)(cfg)
    student.load_state_dict(kept)  # strict: every student tensor comes from the target
    student.generation_config = copy.deepcopy(target.generation_config)
    student.to(device=next(target.parameters()).device, dtype=torch.float32)
    for frozen in (student.get_input_embeddings(), student.get_output_embeddings()):
        frozen.weight.requires_grad_(False)
    # eval mode throughout: no dropout, so a seed reproduces the run and the student trains as it will draft
    return student.eval()


def sample(model: nn.Module, loaded: LoadedModel, ids: list[int], n: int, sampling: SamplingConfig) -> list[int]:
    """Up to ``n`` new tokens of ``model`` after ``ids`` (fewer when it emits an end-of-sequence token)."""
    alone = Hierarchy([model], [], logits_width=loaded.logits_width, eos_token_ids=loaded.eos_token_ids)
    return alone.generate(ids, n, sampling).tokens


@dataclass(frozen=True)
class HeldOut:
    """The target's own continuations of held-out prompts, greedy and sampled, with its logits
    over them: what a student's acceptance is measured against, computed once per run."""

    temperature: float
    prompts: list[list[int]]
    continuations: dict[str, list[list[int]]]  # mode -> one continuation per prompt
    target_logits: dict[str, list[torch.Tensor]]  # mode -> [m, V] per prompt

    @staticmethod
    def make(target: LoadedModel, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int = 0) -> HeldOut:
        """The target's greedy and sampled continuations of ``prompts`` (prompt i sampled with seed
        ``seed + i``) and its logits over them."""
        conts: dict[str, list[list[int]]] = {}
        logits: dict[str, list[torch.Tensor]] = {}
        for mode in ("greedy", "sample"):
            conts[mode], logits[mode] = [], []
            for i, ids in enumerate(prompts):
                sampling = SamplingConfig(mode=mode, temperature=temperature, seed=seed + i)
                continuation = sample(target.model, target, ids, max_new_tokens, sampling)
                conts[mode].append(continuation)
                logits[mode].append(teacher_forced_logits(target.model, ids, continuation, target.logits_width))
        return HeldOut(temperature, prompts, conts, logits)

    def acceptance(self, student: nn.Module) -> tuple[float, float]:
        """(greedy, sampled at the temperature) acceptance of ``student``, pooled over all positions."""
        out = []
        for mode in ("greedy", "sample"):
            sampling = SamplingConfig(mode=mode, temperature=self.temperature)
            total, count = 0.0, 0
            for ids, continuation, p in zip(self.prompts, self.continuations[mode], self.target_logits[mode]):
                if not continuation:
                    continue
                q = teacher_forced_logits(student, ids, continuation, p.shape[-1])
                a = acceptance_from_logits(q, p, sampling)
                total, count = total + float(a.sum()), count + len(a)
            out.append(total / max(count, 1))
        return out[0], out[1]
