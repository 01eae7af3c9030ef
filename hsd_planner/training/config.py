"""How a distillation run is asked for: one typed place for every setting and its default."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from hsd_runtime.terms.choices import Dtype
from hsd_runtime.terms.limits import MAX_BATCH, MAX_SEED, MAX_TEMPERATURE, MIN_TEMPERATURE
from hsd_runtime.terms.spec import parse_spec

from ..choices import DistillData, Divergence
from ..limits import MAX_COUNT, MAX_LENGTH
from ..prompts import TRAIN_RESERVE

__all__ = ["DistillConfig", "DrafterTrainingConfig", "TorchSpec", "TrainingConfig", "TrimmedOutputConfig"]

C = TypeVar("C", bound="TrainingConfig")


def _on_torch(spec: str) -> str:
    """Refuse a model spec that names the llama.cpp engine: a trainer reads a model's hidden states
    and trains weights, which a model on llama.cpp does not expose. Decided with the options, before
    any model is loaded or anything written."""
    if parse_spec(spec).engine == "llamacpp":
        raise ValueError(f"{spec!r} runs on the llama.cpp engine; the trainers run their models on the torch engine: drop engine=llamacpp")
    return spec


TorchSpec = Annotated[str, AfterValidator(_on_torch)]  # a model spec a trainer loads


class TrainingConfig(BaseModel):
    """The settings every trainer shares: its prompts, steps, the data pipeline's corpus and the run."""

    model_config = ConfigDict(extra="forbid")

    prompts: str | None = None  # prompt file; None: the built-in set
    category: str | None = None
    max_prompts: int | None = Field(None, ge=1, le=MAX_COUNT)  # train on at most this many prompts of the training split
    # the first prompts of the profiling split, never trained on: left to `profile --max-prompts`
    reserve: int = Field(TRAIN_RESERVE, ge=0, le=MAX_COUNT)
    steps: int = Field(300, ge=1, le=MAX_COUNT)
    train_batch: int = Field(16, ge=1, le=MAX_COUNT)  # sequences per optimizer step
    samples_per_prompt: int = Field(4, ge=1, le=MAX_COUNT)  # the teacher's continuations of each prompt (its corpus)
    top_k: int = Field(64, ge=0, le=MAX_COUNT)  # teacher logits kept per position; 0: all
    gen_batch: int = Field(16, ge=1, le=MAX_BATCH)  # sequences per batched sampling or teacher pass
    cache: str | None = None  # where corpora are cached; None: the model cache's corpora/
    max_new_tokens: int = Field(64, ge=1, le=MAX_LENGTH)
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE, allow_inf_nan=False)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    checkpoint_every: int = Field(50, ge=1, le=MAX_COUNT)
    dtype: Dtype = "fp32"  # the frozen teacher's; what trains, trains in fp32

    @classmethod
    def field_default(cls, name: str) -> Any:
        """The default of field ``name``: what a trainer command's option shows and falls back to."""
        return cls.model_fields[name].default

    @classmethod
    def from_options(cls: type[C], prompts_file: str | None = None, **options: Any) -> C:
        """The config a trainer command's options ask for, each under its field's name but ``--prompts``
        (``prompts_file``, as every command that reads prompts calls it); validated, an unknown name refused."""
        return cls(prompts=prompts_file, **options)


class DrafterTrainingConfig(TrainingConfig):
    """The settings of a trainer whose drafter reads the corpus's prompts itself (``distill``, ``steer train``)."""

    # prompt tokens the drafter reads in training, the last ones (0: all); the teacher's signal was
    # computed over the whole prompt. A 1,500-token prompt costs a 4-layer student's step 6x the
    # time of its last 256 tokens, and a drafter's next-token law depends mostly on the nearest text
    max_context: int = Field(256, ge=0, le=MAX_LENGTH)


class TrimmedOutputConfig(BaseModel):
    """The setting of a trainer whose drafter can score N tokens only (a trimmed output layer)."""

    # train through the output layer trimmed to its N lowest token ids, end-of-sequence kept
    # (``vocab=N``); the drafter is compared with the teacher's law on those N (divergences)
    vocab: int | None = Field(None, ge=1, le=MAX_COUNT)

    @model_validator(mode="after")
    def _vocab_past_top_k(self) -> TrimmedOutputConfig:
        top_k = int(getattr(self, "top_k", 0))
        if self.vocab is not None and top_k > 0 and self.vocab <= top_k:
            # the teacher's tail bucket must hold a kept token, or the drafter's share of it is log 0
            raise ValueError(f"vocab ({self.vocab}) must keep more tokens than top_k ({top_k})")
        return self


class DistillConfig(DrafterTrainingConfig, TrimmedOutputConfig):
    """Everything that determines a distillation run; every default lives here."""

    target: TorchSpec = "smollm2-135m"
    # where the student starts: the target's first K decoder layers, or another model of its tokenizer (a spec)
    layers: int | None = None
    init_model: TorchSpec | None = None
    divergence: Divergence = "fkl"
    data: DistillData = "target"
    lr: float = Field(1e-4, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_init(self) -> DistillConfig:
        if (self.layers is None) == (self.init_model is None):
            raise ValueError("a student starts from the target's first K layers (layers) or from another model (init_model): give one")
        return self
