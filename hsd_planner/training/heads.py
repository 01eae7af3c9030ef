"""Block-draft heads for one host model (blockwise parallel decoding; Stern et al. 2018, Kim et al. 2024).

Heads 2..H (:class:`hsd_runtime.learned.heads.BlockHeads`) are trained on the host's own continuations:
the data pipeline's corpus (:mod:`.corpus`) holds, for every continuation position, the host's
distribution there (top-k logits and the log-partition); one teacher-forced pass per batch gives
the host's final hidden state h_t at every position, once, kept in memory. Head i at h_t learns
the host's distribution i - 1 positions later, the one that predicts token t + i: forward KL to
it (``kl``, the dense signal) or cross-entropy on the sampled token (``ce``), averaged over heads
and positions. The host and its output layer stay frozen; only the blocks train, in fp32.

A head's acceptance is measured on held-out prompts (the validation split) over the host's own
greedy and sampled continuations: greedy, how often head i's argmax at h_t is the host's token
t + i; at the temperature, sum min(p, q) against the host's distribution there; and the greedy
block efficiency, 1 + the run of heads 2..H that agree in a row (tokens per host pass when the
heads draft every block under the host).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from hsd_runtime import LoadedModel, ModelLoader, SamplingConfig
from hsd_runtime.learned.heads import BlockHeads, HeadsCard, save_heads
from hsd_runtime.models.output import apply_output_layer
from hsd_runtime.models.trim import column_of
from hsd_runtime.models.views import trimmed_by_id
from hsd_runtime.terms.limits import MAX_HEADS

from ..errors import DistillError
from ..limits import MAX_HEAD_INNER
from ..profiling.acceptance import acceptance_from_logits
from ..prompts import encode_prompt
from .config import TorchSpec, TrainingConfig, TrimmedOutputConfig
from .corpus import Corpus, build_corpus, corpus_hidden
from .divergences import sparse_divergence
from .runs import TrainingRun, corpus_key
from .student import HeldOut
from .teacher import continuation_hidden

__all__ = ["HeadsConfig", "HeadsReport", "HeadsTrainer", "head_acceptance"]


class HeadsConfig(TrainingConfig, TrimmedOutputConfig):
    """Everything that determines a heads training run; every default lives here (the shared ones in :class:`TrainingConfig`)."""

    model: TorchSpec = "smollm2-135m"  # the host
    heads: int = Field(4, ge=2, le=MAX_HEADS)  # H, counting the host's own next-token head
    inner: int | None = Field(None, ge=1, le=MAX_HEAD_INNER)  # each block's hidden width (default: the host's)
    loss: Literal["kl", "ce"] = "kl"
    lr: float = Field(1e-3, gt=0, allow_inf_nan=False)


@dataclass(frozen=True)
class HeadsReport:
    """What a run produced: its cost and the heads' held-out acceptance, as its card keeps them."""

    out: str
    config: HeadsConfig
    steps: int
    train_wall_s: float
    positions: int
    final_loss: float
    acceptance: dict  # "greedy"/"sample": per head 2..H; "block_greedy": tokens per host pass
    initial: dict  # the same for the untrained heads (each repeats head 1)
    corpus_sequences: int
    corpus_s: float
    eval_prompts: str

    def to_dict(self) -> dict:
        """The report as JSON (``--json``), the settings nested."""
        return {k: v for k, v in self.__dict__.items() if k != "config"} | {"config": self.config.model_dump()}


def head_acceptance(heads: BlockHeads, host: LoadedModel, held: HeldOut, output: Any = None) -> dict:
    """Held-out acceptance of heads 2..H against the host's own continuations (module docstring),
    the heads reading ``output``'s output layer (a trimmed copy of the host's; default the host's)."""
    output = host.model if output is None else output
    out: dict = {}
    blocks: list[float] = []
    for mode in ("greedy", "sample"):
        sampling = SamplingConfig(mode=mode, temperature=held.temperature)
        totals, counts = np.zeros(heads.heads - 1), np.zeros(heads.heads - 1)
        for ids, cont, p in zip(held.prompts, held.continuations[mode], held.target_logits[mode]):
            if len(cont) < 2:
                continue
            with torch.inference_mode():
                hidden = continuation_hidden(host.model, [ids], [cont]).float()  # [m, d]; row t predicts cont[t]
                states = heads(hidden)  # [m, H - 1, d]
            agree = []
            for i in range(2, heads.heads + 1):
                n = len(cont) - (i - 1)  # rows t whose token t + i - 1 exists
                if n <= 0:
                    agree.append(torch.zeros(0))
                    continue
                with torch.inference_mode():
                    q = apply_output_layer(output, states[:n, i - 2], p.shape[-1]).float()  # [n, V]
                a = acceptance_from_logits(q, p[i - 1 : i - 1 + n], sampling)  # [n]
                totals[i - 2] += float(a.sum())
                counts[i - 2] += n
                agree.append(a)
            if mode == "greedy":  # 1 + the run of agreeing heads from each row that has all H - 1 ahead
                full = len(cont) - (heads.heads - 1)
                for t in range(max(0, full)):
                    run = 0
                    while run < heads.heads - 1 and float(agree[run][t]) == 1.0:
                        run += 1
                    blocks.append(1.0 + run)
        out[mode] = [float(x) for x in totals / np.maximum(counts, 1)]
    out["block_greedy"] = float(np.mean(blocks)) if blocks else float("nan")
    return out


class HeadsTrainer(TrainingRun[float, HeadsReport]):
    """One heads run into ``out``: build or resume, :meth:`train`, then :meth:`finish`."""

    config: HeadsConfig

    def __init__(self, config: HeadsConfig, out: Path, loader: ModelLoader, resume: bool = False) -> None:
        super().__init__(config, out, resume, teacher=config.model)
        # the frozen output layer is back-propagated through: plain kernels
        self.host = loader.with_kernels("plain").load(config.model)
        # the layer the heads read: the host's, or a copy of it trimmed to vocab tokens (q = 0 elsewhere)
        self.output: Any = self.host.model
        # trimmed: training scores the kept rows alone, [n, N] over these token ids, never the whole vocabulary
        self.columns: torch.Tensor | None = None
        self.column: torch.Tensor | None = None  # [V]: each token's column among them (-1: not kept), for --loss ce
        if config.vocab:
            self.output = trimmed_by_id(self.host.model, config.vocab)
            self.columns = self.output.get_output_embeddings().keep
            self.column = column_of(self.columns, self.host.logits_width, -1)
        tok = self.host.tokenizer
        self.train_ids = [encode_prompt(tok, p) for p in self.train_set.prompts]
        self.eval_ids = [encode_prompt(tok, p) for p in self.eval_set.prompts]
        host_model: Any = self.host.model
        hidden_size = int(host_model.config.hidden_size)
        torch.manual_seed(config.seed)
        self.heads = BlockHeads(hidden_size, config.heads, config.inner).to(loader.device).train()
        self.optimizer = torch.optim.AdamW(self.heads.parameters(), lr=config.lr, weight_decay=0.0)
        self.losses: list[float] = []
        self.corpus: Corpus | None = None
        self.corpus_s = 0.0
        self.hidden: torch.Tensor | None = None  # [R, d]: the host's h at every corpus row
        self.tokens: torch.Tensor | None = None  # [R]: the token each corpus row predicts
        self.held: HeldOut | None = None
        self.initial: dict | None = None
        self.resume()

    def prepare(self, progress: Callable[[str, int, int], None] | None = None) -> None:
        """The corpus (or its cache), the host's hidden state at every row of it, the held-out
        continuations and the untrained heads' acceptance; nothing is done twice."""
        c = self.config
        if self.held is None:
            self.held = HeldOut.make(self.host, self.eval_ids, c.max_new_tokens, c.temperature, c.seed)
        if self.initial is None:
            self.initial = head_acceptance(self.heads.eval(), self.host, self.held, self.output)
            self.heads.train()
        if self.corpus is None:
            key = corpus_key(c.model, self.host.model, self.train_set, c)
            t0 = time.perf_counter()
            self.corpus, cached = build_corpus(self.host, key, self.train_ids, c.gen_batch, Path(c.cache) if c.cache else None, progress)
            self.corpus_s = 0.0 if cached else time.perf_counter() - t0
        if self.hidden is None:
            assert self.corpus is not None
            self.hidden = self._corpus_hidden(progress)
            self.tokens = torch.tensor([t for cont in self.corpus.continuations for t in cont])

    def _corpus_hidden(self, progress: Callable[[str, int, int], None] | None) -> torch.Tensor:
        """The host's final hidden state at every corpus row ``[R, d]``."""
        assert self.corpus is not None
        step = None if progress is None else (lambda done, total: progress("host hidden states", done, total))
        return corpus_hidden(self.host.model, self.corpus, self.config.gen_batch, progress=step)

    # --- checkpoints -------------------------------------------------------------------------

    def _own_state(self) -> dict[str, Any]:
        return {"heads": {k: v.detach().cpu() for k, v in self.heads.state_dict().items()}, "losses": self.losses, "initial": self.initial}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.heads.load_state_dict(state["heads"])
        self.losses, self.initial = state["losses"], state["initial"]

    # --- training ----------------------------------------------------------------------------

    def train_step(self) -> float:
        """One step over ``train_batch`` corpus sequences: every head at every row it can see ahead from."""
        c, corpus, hidden = self.config, self.corpus, self.hidden
        assert corpus is not None and hidden is not None
        seqs = self.rng.choice(len(corpus.prompts), size=c.train_batch, replace=len(corpus.prompts) < c.train_batch).tolist()
        device = next(self.heads.parameters()).device
        width = self.host.logits_width
        losses, count = [], 0
        rows = [(corpus.offsets[s], len(corpus.continuations[s])) for s in seqs]
        base = torch.cat([torch.arange(o, o + n) for o, n in rows]) if rows else torch.zeros(0, dtype=torch.long)
        states = self.heads(hidden[base].to(device).float())  # [R, H - 1, d]
        position = torch.cat([torch.arange(n) for _, n in rows])  # t within its continuation
        length = torch.cat([torch.full((n,), n) for _, n in rows])
        for i in range(2, c.heads + 1):
            ok = position + (i - 1) < length  # the token t + i - 1 of the same continuation exists
            if not bool(ok.any()):
                continue
            with self.mixed_precision(device):
                q = self._logits(states[ok, i - 2], width)  # [n, V], or [n, N] over the kept columns
            later = base[ok] + (i - 1)  # the corpus row that predicts token t + i - 1
            if c.loss == "kl":  # against the host's law on the tokens the layer keeps (all, untrimmed)
                loss = sparse_divergence("fkl", corpus.signal.take(later), q, c.temperature, self.columns)
            else:
                assert self.tokens is not None
                token = self.tokens[later].to(q.device)  # [n]
                if self.column is not None:  # a trimmed layer cannot learn the tokens it lacks
                    column = self.column.to(q.device)[token]  # [n]
                    kept = column >= 0
                    q, token = q[kept], column[kept]
                if not q.shape[0]:
                    continue
                loss = torch.nn.functional.cross_entropy(q, token)
            losses.append(loss * q.shape[0])
            count += q.shape[0]
        if not losses:
            self.step += 1
            self.losses.append(float("nan"))
            return float("nan")
        total = torch.stack(losses).sum() / count
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        self.optimizer.step()
        if not torch.isfinite(total):
            raise DistillError(f"step {self.step + 1}: the loss is {float(total)} (--lr {c.lr:g}); lower --lr and start again")
        self.step += 1
        self.positions += count
        self.losses.append(float(total.detach()))
        return self.losses[-1]

    def _logits(self, states: torch.Tensor, width: int) -> torch.Tensor:
        """The heads' logits (fp32) for inputs ``[n, d]`` of the output layer: ``[n, width]``, or
        ``[n, N]`` over :attr:`columns` for a trimmed layer (the kept rows alone)."""
        if self.columns is None:
            return apply_output_layer(self.output, states, width).float()
        rows = self.output.get_output_embeddings().rows
        return rows(states.to(rows.weight.dtype)).float()

    def finish(self) -> HeadsReport:
        """Measure the heads on the held-out prompts, save them and their card into ``out``."""
        self.prepare()
        assert self.held is not None and self.initial is not None
        acceptance = head_acceptance(self.heads.eval(), self.host, self.held, self.output)
        finite = [x for x in self.losses[-20:] if x == x]
        report = HeadsReport(
            out=str(self.out),
            config=self.config,
            steps=self.step,
            train_wall_s=self.wall_s,
            positions=self.positions,
            final_loss=float(np.mean(finite)) if finite else float("nan"),
            acceptance=acceptance,
            initial=self.initial,
            corpus_sequences=len(self.corpus.prompts) if self.corpus is not None else 0,
            corpus_s=self.corpus_s,
            eval_prompts=f"{len(self.eval_ids)} prompts of {self.eval_set.name}",
        )
        card = HeadsCard(
            host=self.config.model,
            hidden_size=self.heads.hidden_size,
            heads=self.heads.heads,
            inner=self.heads.inner,
            logits_width=self.host.logits_width,
            vocab=self.config.vocab or 0,
            training={k: v for k, v in report.to_dict().items() if k not in ("acceptance", "initial", "out")},
            acceptance={"held_out": acceptance, "untrained": self.initial, "prompts": report.eval_prompts},
        )
        save_heads(self.out, self.heads, card)
        self.write_readme(heads_card_text(report), "the heads'")
        return report


def heads_card_text(r: HeadsReport) -> str:
    """The human-readable card of a heads directory (``README.md``)."""
    c = r.config
    rows = "\n".join(
        f"| {i} | {g0:.3f} | {g:.3f} | {s0:.3f} | {s:.3f} |"
        for i, g0, g, s0, s in zip(
            range(2, c.heads + 1), r.initial["greedy"], r.acceptance["greedy"], r.initial["sample"], r.acceptance["sample"]
        )
    )
    trimmed = f", trimmed to its {c.vocab:,} lowest token ids (the heads draft through it)" if c.vocab else ""
    return f"""# Block-draft heads for {c.model}

{c.heads - 1} heads (2..{c.heads}; head 1 is the model's own), each a residual feed-forward block
on the final hidden state into the model's frozen output layer{trimmed}. Use as `bpd:{r.out}` directly below
`{c.model}` in a chain.

Trained {r.steps} steps ({r.positions:,} head positions, {r.train_wall_s:.0f} s) with {c.loss} on
{r.corpus_sequences} continuations of the host ({c.samples_per_prompt} per prompt of the profiling
split), lr {c.lr:g}, training batch {c.train_batch}. Final loss {r.final_loss:.4f}.

Held-out acceptance ({r.eval_prompts}), against the host's own continuations:

| head | greedy, untrained | greedy | T = {c.temperature:g}, untrained | T = {c.temperature:g} |
|---|---|---|---|---|
{rows}

Greedy block efficiency (tokens per host pass when the heads draft every block):
{r.initial["block_greedy"]:.3f} untrained, **{r.acceptance["block_greedy"]:.3f}** trained.
"""
