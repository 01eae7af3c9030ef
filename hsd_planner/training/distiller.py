"""DistillSpec: train a student drafter toward its target (Zhou et al. 2023, "DistillSpec").

The student is a real copy of the target's first K decoder layers, final norm and embeddings
(``num_hidden_layers = K``); the embeddings and the output head stay frozen, the decoder layers
and the final norm are trained in fp32. Each step takes ``train_batch`` sequences and minimises
the divergence between the target's and the student's next-token distributions at every
continuation position of them:

- target data: sequences of the corpus of the data pipeline (:mod:`.corpus`) - ``samples_per_prompt``
  continuations of every prompt of the profiling split (the validation split is never trained
  on), sampled from the target once, with the target's top-k signal at every position, cached on
  disk and shared by every run with the same target, prompts and settings;
- on-policy: continuations sampled from the student in one batched decoding, and the target's
  signal over them from one batched teacher-forced pass;
- mixed: each sequence of a step from either, with probability 1/2.

The step's loss is the mean over all its continuation positions. The student reads the last
``max_context`` tokens of each prompt (the target's signal was computed over all of it), and its
step runs in groups of ``PASS_GROUP`` sequences of similar length whose gradients add up to
the step's: a padded pass pays for its longest row.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hsd_runtime import ModelLoader, ModelNotFoundError, ModelSpecError, SamplingConfig, check_same_tokenizer, parse_spec
from hsd_runtime.learned.trained import write_files
from hsd_runtime.models.trim import kept_tokens
from hsd_runtime.models.views import shallow_module, trimmed_model

from ..errors import DistillError, ModelOutputError
from ..prompts import encode_prompt
from .card import DistillReport, StepLog, model_card
from .config import DistillConfig
from .corpus import Corpus, build_corpus
from .divergences import bucket_log_probs, sparse_divergence
from .runs import PASS_GROUP, TrainingRun, corpus_key, renamed
from .sampling import by_length, last_tokens, sample_batched
from .student import HeldOut, build_student, own_student
from .teacher import TeacherRows, continuation_logits, teacher_signal

__all__ = ["Distiller", "running_average"]

EMA_DECAY = 0.9  # of the running loss and acceptance shown while training


def running_average(log: list[StepLog], decay: float = EMA_DECAY) -> StepLog:
    """The exponential moving average of ``log`` (its first entry starts the average)."""
    avg = copy.copy(log[0])
    for entry in log[1:]:
        avg = StepLog(
            step=entry.step,
            loss=decay * avg.loss + (1 - decay) * entry.loss,
            greedy=decay * avg.greedy + (1 - decay) * entry.greedy,
            sampled=decay * avg.sampled + (1 - decay) * entry.sampled,
        )
    return avg


@contextmanager
def _out_of_memory_as_error(config: DistillConfig) -> Iterator[None]:
    try:
        yield
    except RuntimeError as exc:  # torch.OutOfMemoryError is one; the CPU allocator raises a plain one
        text = str(exc)
        if not (isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "not enough memory" in text):
            raise
        raise DistillError(
            f"out of memory at training batch {config.train_batch} and {config.max_new_tokens} new tokens; lower --train-batch or --max-new-tokens"
        ) from None


def _without_dtype(spec: str) -> str:
    parsed = parse_spec(spec)
    return str(parsed.model_copy(update={"options": tuple(kv for kv in parsed.options if kv[0] != "dtype")}))


class Distiller(TrainingRun[StepLog, DistillReport]):
    """One distillation run into ``out``: build or resume, :meth:`train`, then :meth:`finish`.

    Raises :class:`DistillError` before writing anything when the input is bad: ``out`` exists and
    is not empty without ``resume``, ``resume`` without a checkpoint or with other settings, an
    incompatible target or K out of range.
    """

    config: DistillConfig

    def __init__(self, config: DistillConfig, out: Path, loader: ModelLoader, resume: bool = False) -> None:
        super().__init__(config, out, resume, teacher=None if config.data == "on-policy" else config.target)
        # the student is copied from the target's state dict, which packed layers do not keep
        loader = loader.with_kernels("plain")
        with _out_of_memory_as_error(config):
            self.target = loader.load(config.target)
            target_dtype = parse_spec(config.target).dtype or loader.default_dtype
            # the student starts from fp32 weights even when the target runs in bf16 or fp16
            source = (
                self.target
                if target_dtype == "fp32"
                else ModelLoader(str(loader.device), "fp32", prepack=False).load(_without_dtype(config.target))
            )
            if config.init_model is not None:  # another model of the target's tokenizer, trained whole
                try:
                    init = ModelLoader(str(loader.device), "fp32", prepack=False).load(config.init_model)
                except (ModelNotFoundError, ModelSpecError) as exc:
                    raise DistillError(f"--init {config.init_model!r} is neither layers=K nor a model to start from: {exc}") from None
                check_same_tokenizer([self.target, init])
                self.student = own_student(init.model)
            else:
                assert config.layers is not None  # one of the two (DistillConfig checks)
                self.student = build_student(source.model, config.layers)
        # what drafts: the student, or a view of it whose output layer scores the vocab lowest
        # token ids (the frozen head's rows; the decoder is shared, so training it trains the student)
        self.drafting: Any = self.student
        # what training passes run: the same, but a trimmed head scores its kept rows alone, [R, N]
        # over the token ids ``columns`` (never spread over the whole vocabulary)
        self.narrow: Any = self.student
        self.columns: torch.Tensor | None = None
        if config.vocab:
            width = self.target.logits_width
            self.drafting = trimmed_model(self.student, kept_tokens(range(width), config.vocab, self.target.eos_token_ids, width))
            head: Any = self.drafting.get_output_embeddings()
            self.columns = head.keep
            self.narrow = shallow_module(self.student)
            self.narrow.set_output_embeddings(head.rows)
        tokenizer = self.target.tokenizer
        self.train_ids = [encode_prompt(tokenizer, p) for p in self.train_set.prompts]
        self.eval_ids = [encode_prompt(tokenizer, p) for p in self.eval_set.prompts]
        self.trainable = [(n, p) for n, p in self.student.named_parameters() if p.requires_grad]
        # no weight decay: the student starts from pretrained weights, and decay would pull the norms' gains to 0
        self.optimizer = torch.optim.AdamW([p for _, p in self.trainable], lr=config.lr, weight_decay=0.0)
        self.log: list[StepLog] = []
        self.corpus: Corpus | None = None
        self.corpus_s = 0.0  # time the data pipeline took to make the corpus (0 when it was cached)
        self.held_out: HeldOut | None = None
        self.initial: tuple[float, float] | None = None  # held-out acceptance of the student as built
        self.resume()

    def prepare(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        """Make (or read from the cache) the corpus of target data, and measure the student as
        built on the held-out prompts; what is done already is not done again (:meth:`train` and
        :meth:`finish` call it)."""
        c = self.config
        with _out_of_memory_as_error(c):
            if self.held_out is None:
                self.held_out = HeldOut.make(self.target, self.eval_ids, c.max_new_tokens, c.temperature, c.seed)
            if self.initial is None:
                self.initial = self.held_out.acceptance(self.drafting)
            if self.corpus is None and c.data != "on-policy":
                key = corpus_key(c.target, self.target.model, self.train_set, c)
                t0 = time.perf_counter()
                root = Path(c.cache) if c.cache else None
                self.corpus, cached = build_corpus(self.target, key, self.train_ids, c.gen_batch, root, progress)
                self.corpus_s = 0.0 if cached else time.perf_counter() - t0

    # --- checkpoints -------------------------------------------------------------------------

    def _own_state(self) -> dict[str, Any]:
        return {
            "student": {n: p.detach().cpu() for n, p in self.trainable},
            "log": [asdict(e) for e in self.log],
            "initial": list(self.initial) if self.initial is not None else None,
        }

    def _read_config(self, saved: dict[str, Any]) -> DistillConfig:
        # runs from before max_context read whole prompts; from before the reserve, all profiling prompts
        return DistillConfig(**{"max_context": 0, "reserve": 0, **renamed(saved)})

    def _load_own_state(self, state: dict[str, Any]) -> None:
        params = dict(self.trainable)
        with torch.no_grad():
            for name, value in state["student"].items():
                params[name].copy_(value)
        self.log = [StepLog(**e) for e in state["log"]]
        self.initial = tuple(state["initial"]) if state.get("initial") else None

    def _guard(self) -> AbstractContextManager[None]:
        return _out_of_memory_as_error(self.config)

    # --- training ----------------------------------------------------------------------------

    def _on_policy(self, picks: list[int], seeds: list[int]) -> tuple[list[list[int]], list[list[int]], list[TeacherRows]]:
        """Continuations of the picked prompts sampled from the student (empty ones left out), and
        the target's signal over them (none when every continuation is empty)."""
        c = self.config
        prompts = [self.train_ids[i] for i in picks]
        sampling = SamplingConfig(mode="sample", temperature=c.temperature)
        read = [last_tokens(p, c.max_context) for p in prompts]  # what the student reads
        try:
            continuations = sample_batched(self.drafting, self.target, read, c.max_new_tokens, sampling, seeds, c.gen_batch)
        except ModelOutputError:  # the last update overflowed the student's activations
            raise self._diverged("the student's probabilities are no longer finite") from None
        kept = [(p, x) for p, x in zip(prompts, continuations) if x]
        if not kept:
            return [], [], []
        prompts, continuations = [p for p, _ in kept], [x for _, x in kept]
        signal = teacher_signal(self.target.model, prompts, continuations, self.target.logits_width, c.top_k, c.temperature, c.gen_batch)
        return prompts, continuations, [signal]

    def _batch(self) -> tuple[list[list[int]], list[list[int]], TeacherRows | None]:
        """The step's sequences (prompts, continuations) and the target's signal over them, per
        ``config.data``; no signal when every continuation of the step is empty."""
        c = self.config
        n = len(self.train_ids)
        # every draw is made whatever the data mode, so the RNG stream depends only on the seed
        picks = self.rng.choice(n, size=c.train_batch, replace=n < c.train_batch).tolist()
        coins = self.rng.random(c.train_batch).tolist()
        seeds = self.rng.integers(2**31, size=c.train_batch).tolist()
        rows = self.rng.integers(c.samples_per_prompt, size=c.train_batch).tolist()
        own = [i for i, coin in enumerate(coins) if c.data == "on-policy" or (c.data == "mixed" and coin < 0.5)]
        prompts, continuations, parts = self._on_policy([picks[i] for i in own], [seeds[i] for i in own]) if own else ([], [], [])
        for i in sorted(set(range(c.train_batch)) - set(own)):
            assert self.corpus is not None  # prepare() made it for target and mixed data
            seq = picks[i] * c.samples_per_prompt + rows[i]  # the corpus holds samples_per_prompt sequences per prompt
            if self.corpus.continuations[seq]:
                prompts.append(self.corpus.prompts[seq])
                continuations.append(self.corpus.continuations[seq])
                parts.append(self.corpus.teacher(seq))
        return prompts, continuations, TeacherRows.cat(parts) if parts else None

    def train_step(self) -> StepLog:
        """Gather the step's sequences and signal, take the divergence's gradient over them (student
        passes grouped by length), update the student."""
        c = self.config
        prompts, continuations, teacher = self._batch()
        self.optimizer.zero_grad(set_to_none=True)
        if teacher is None:  # every sequence of the step ended at once: nothing to learn from
            entry = StepLog(self.step + 1, float("nan"), float("nan"), float("nan"))
        else:
            q, teacher, loss = self._backward([last_tokens(p, c.max_context) for p in prompts], continuations, teacher)
            self.optimizer.step()
            if not all(bool(torch.isfinite(w).all()) for w in self.student.parameters() if w.requires_grad):
                raise self._diverged("the update made the student's weights non-finite")
            with torch.no_grad():
                # on the step's own positions: argmax agreement, and sum of min(p, q) over the
                # teacher's top-k tokens and the tail bucket (1 - TV of the bucketed laws, an upper
                # bound of the acceptance at the temperature; equal to it when top_k is 0 and the
                # head is whole: a trimmed head is compared with p renormalized on its tokens)
                log_p, log_q = bucket_log_probs(teacher, q, c.temperature, self.columns)
                choice = q.argmax(-1) if self.columns is None else self.columns[q.argmax(-1)]
                greedy = float((choice == teacher.ids[:, 0]).double().mean())
                sampled = float(torch.minimum(log_p.exp(), log_q.exp()).sum(-1).clamp(0, 1).mean())
            self.positions += q.shape[0]
            entry = StepLog(self.step + 1, loss, greedy, sampled)
        self.step += 1
        self.log.append(entry)
        return entry

    def _backward(
        self, prompts: list[list[int]], continuations: list[list[int]], teacher: TeacherRows
    ) -> tuple[torch.Tensor, TeacherRows, float]:
        """The divergence's gradient over the step's sequences, in groups of similar length: the
        student's logits ``[R, V]`` (``[R, N]`` over ``columns`` when trimmed; detached) and the
        teacher's rows in the groups' order, and the step's loss (the mean over all R positions:
        each group's mean weighted by its share)."""
        c = self.config
        device = next(self.student.parameters()).device
        width = self.target.logits_width if self.columns is None else len(self.columns)
        starts = np.cumsum([0] + [len(x) for x in continuations])  # the teacher's rows are sequence after sequence
        total = int(starts[-1])
        qs, parts, loss = [], [], 0.0
        for group in by_length([len(p) + len(x) for p, x in zip(prompts, continuations)], PASS_GROUP):
            rows = teacher.take(torch.cat([torch.arange(starts[i], starts[i + 1]) for i in group]))
            with self.mixed_precision(device):  # with a bf16 target
                q = continuation_logits(
                    self.narrow, [prompts[i] for i in group], [continuations[i] for i in group], width, grad=True
                )  # [r, V], or [r, N] over the kept columns
            part = sparse_divergence(c.divergence, rows, q, c.temperature, self.columns) * (q.shape[0] / total)
            if not torch.isfinite(part):
                raise self._diverged(f"the loss is {float(part.detach())}")
            part.backward()
            qs.append(q.detach())
            parts.append(rows)
            loss += float(part.detach())
        return torch.cat(qs), TeacherRows.cat(parts), loss

    def _diverged(self, what: str) -> DistillError:
        """Training stops rather than save or evaluate a student whose numbers are no longer finite."""
        return DistillError(
            f"step {self.step + 1}: {what} (--lr {self.config.lr:g}); nothing of this step was saved: "
            "lower --lr, and --resume from the last checkpoint or start again"
        )

    # --- the result --------------------------------------------------------------------------

    def finish(self) -> DistillReport:
        """After :meth:`train`: measure held-out acceptance, save the student and its card into ``out``; return the report."""
        c = self.config
        self.prepare()
        assert self.held_out is not None and self.initial is not None
        with _out_of_memory_as_error(c):
            greedy, sampled = self.held_out.acceptance(self.drafting)
        report = DistillReport(
            out=str(self.out),
            config=c,
            steps=self.step,
            train_prompts=self.train_set.name,
            train_wall_s=self.wall_s,
            final_loss=running_average(self.log).loss,
            acceptance_greedy=greedy,
            acceptance_sampled=sampled,
            initial_greedy=self.initial[0],
            initial_sampled=self.initial[1],
            positions=self.positions,
            corpus_sequences=len(self.corpus.prompts) if self.corpus is not None else 0,
            corpus_s=self.corpus_s,
            eval_prompts=f"{len(self.eval_ids)} prompts of {self.eval_set.name}",
            log=list(self.log),
        )
        write_files(self.out, "the student", lambda stage: self._write_student(stage, report), last=("distill.json", "README.md"))
        return report

    def _write_student(self, folder: Path, report: DistillReport) -> None:
        """The student (a Hugging Face model directory with the target's tokenizer) and its card, in ``folder``."""
        self.student.save_pretrained(folder)
        self.target.tokenizer.save_pretrained(folder)
        (folder / "distill.json").write_text(json.dumps(report.to_dict(), indent=1))
        (folder / "README.md").write_text(model_card(report))
