"""The teacher's dense signal: its next-token distribution at every continuation position.

One teacher-forced pass over a right-padded batch of prompt + continuation gives the distribution
at every continuation position (:func:`teacher_signal`); the pipeline keeps its top-k logits and
the log-partition of the whole row (``logz``, :class:`TeacherRows`), from which the divergences
of :mod:`.divergences` are computed over the top-k tokens and one tail bucket (exact when k is
the vocabulary). The same pass gives the hidden states a trained head or projection reads
(:func:`continuation_hidden`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from hsd_runtime.learned.steering import layer_inputs
from hsd_runtime.models.output import apply_output_layer

from ..errors import DistillError
from .sampling import by_length

__all__ = ["TeacherRows", "continuation_hidden", "continuation_logits", "teacher_signal"]


@dataclass(frozen=True)
class TeacherRows:
    """The teacher's distribution at R positions, sparsely: ``ids`` ``[R, k]`` (int64) the k
    largest logits' token ids in decreasing order, ``logits`` ``[R, k]`` their raw logits (fp32),
    ``logz`` ``[R]`` the log-partition logsumexp(row / T) of the whole row at the key's
    temperature T, ``log_tail`` ``[R]`` the log of the probability outside the top k (computed
    from the whole row: 1 - sum(top k) would lose a small tail to rounding; -inf when complete),
    and ``width`` the vocabulary size V (k == V: the rows are complete)."""

    ids: torch.Tensor
    logits: torch.Tensor
    logz: torch.Tensor
    log_tail: torch.Tensor
    width: int

    @property
    def complete(self) -> bool:
        return self.ids.shape[-1] >= self.width

    def log_probs(self, temperature: float) -> torch.Tensor:
        """log p of the top-k tokens ``[R, k]`` at ``temperature`` (the temperature of ``logz``)."""
        return self.logits / temperature - self.logz[:, None]

    def rows(self, start: int, stop: int) -> TeacherRows:
        return TeacherRows(self.ids[start:stop], self.logits[start:stop], self.logz[start:stop], self.log_tail[start:stop], self.width)

    def take(self, index: torch.Tensor) -> TeacherRows:
        """The rows ``index`` ``[n]``, in that order."""
        return TeacherRows(self.ids[index], self.logits[index], self.logz[index], self.log_tail[index], self.width)

    @staticmethod
    def from_logits(logits: torch.Tensor, top_k: int, temperature: float) -> TeacherRows:
        """The sparse form of full logits ``[R, V]`` (fp32), keeping ``top_k`` (0: every) token."""
        logits = logits.float()
        width = logits.shape[-1]
        k = width if top_k <= 0 else min(top_k, width)
        values, ids = logits.topk(k, dim=-1)  # [R, k], decreasing
        scaled = logits / temperature
        logz = torch.logsumexp(scaled, dim=-1)  # [R]
        log_tail = torch.logsumexp(scaled.scatter(-1, ids, float("-inf")), dim=-1) - logz  # [R]; -inf when k == V
        return TeacherRows(ids, values, logz, log_tail, width)

    @staticmethod
    def cat(parts: Sequence[TeacherRows]) -> TeacherRows:
        fields = [torch.cat([getattr(p, name) for p in parts]) for name in ("ids", "logits", "logz", "log_tail")]
        return TeacherRows(*fields, parts[0].width)


def _padded(prompts: Sequence[list[int]], continuations: Sequence[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` ``[B, L]`` of prompt + continuation."""
    rows = [p + c for p, c in zip(prompts, continuations)]
    length = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def continuation_logits(
    model: nn.Module, prompts: Sequence[list[int]], continuations: Sequence[list[int]], width: int, grad: bool = False
) -> torch.Tensor:
    """One batched teacher-forced pass: the logits ``[R, width]`` (fp32) predicting every
    continuation token, sequence after sequence (R = the continuations' total length).

    Right padding with an attention mask: a row's positions see only its own earlier tokens, so
    its logits are those of a pass over it alone. ``grad=True`` keeps the graph (a student in
    training). The decoder runs over every position; only the R positions that predict a
    continuation token are gathered (one index, so the backward pass scatters once) and reach
    the output layer, the largest matrix of a small model.
    """
    with torch.inference_mode(not grad):
        picked = continuation_hidden(model, prompts, continuations, grad)  # [R, d]
        return apply_output_layer(model, picked, width).float()  # soft-capped as the model's own forward does


def continuation_hidden(
    model: nn.Module,
    prompts: Sequence[list[int]],
    continuations: Sequence[list[int]],
    grad: bool = False,
    layers: Sequence[int] = (),
) -> torch.Tensor:
    """The final hidden states ``[R, d]`` (the output layer's inputs) that predict every
    continuation token, sequence after sequence, from one batched teacher-forced pass (right padding,
    as :func:`continuation_logits`); with ``layers``, the inputs of those decoder layers at the
    same positions instead, side by side (``[R, len(layers) d]``: a verifier's steering taps)."""
    device = next(model.parameters()).device
    ids, mask = _padded(prompts, continuations, device)
    length = ids.shape[1]
    rows = torch.cat([i * length + torch.arange(len(p) - 1, len(p) - 1 + len(c)) for i, (p, c) in enumerate(zip(prompts, continuations))])
    with torch.inference_mode(not grad):
        if layers:
            hidden = layer_inputs(model, ids, list(layers), mask)
        else:
            hidden = getattr(model, model.base_model_prefix)(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        return hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows.to(device))  # [R, d]


def teacher_signal(
    model: nn.Module,
    prompts: Sequence[list[int]],
    continuations: Sequence[list[int]],
    width: int,
    top_k: int,
    temperature: float,
    gen_batch: int,
    progress: Callable[[int], None] | None = None,
) -> TeacherRows:
    """The teacher's sparse distribution at every continuation position, ``gen_batch``
    sequences per teacher-forced pass; ``progress`` gets the positions done after each pass."""
    keep = [i for i, c in enumerate(continuations) if c]  # a continuation can be empty (EOS at once): no rows
    if not keep:
        raise DistillError("every continuation is empty (the model ended each at once); give other prompts or more --max-new-tokens")
    pieces: dict[int, TeacherRows] = {}  # sequence -> its rows; batches run grouped by length
    for batch in by_length([len(prompts[i]) + len(continuations[i]) for i in keep], gen_batch):
        seqs = [keep[j] for j in batch]
        logits = continuation_logits(model, [prompts[i] for i in seqs], [continuations[i] for i in seqs], width)
        rows = TeacherRows.from_logits(logits, top_k, temperature)
        start = 0
        for i in seqs:
            pieces[i] = rows.rows(start, start + len(continuations[i]))
            start += len(continuations[i])
        if progress is not None:
            progress(logits.shape[0])
    return TeacherRows.cat([pieces[i] for i in keep])  # sequence after sequence, as the corpus lays them out
