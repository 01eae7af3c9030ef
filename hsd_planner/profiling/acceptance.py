"""Acceptance measurements without storage.

Acceptance of drafter i by verifier j is measured on the verifier's own continuation of a
prompt: the drafter is teacher-forced over prompt + continuation in one pass, the verifier's rows
are those of the passes that generated the continuation (one teacher-forced pass too, where the
continuation was stored by an earlier run), and at every continuation position t

- greedy: a_t = 1 when the drafter's argmax equals the verifier's argmax, else 0;
- sampling: a_t = sum_x min(p_j(x), q_i(x)) = 1 - TV(p_j, q_i), the probability that the
  verification rule accepts the drafted token.

A model drafter re-predicts every position, so the i-th token it drafts from t is accepted with
c_t[i] = a_{t+i}. The n-gram drafter proposes a block at once (what followed the earliest match
of the suffix at t; one-hot q): c_t[i] is 1 when the block's i-th token equals the verifier's
argmax at t + i (greedy) or p_j of that token there (sampling), and 0 where the block is shorter.
Block-draft heads (``bpd:``) draft from t with the host's hidden state that predicted token t - 1
(the row a verification leaves for the round that starts at t): head i + 2 proposes token t + i,
sampled from its own q (c_t[i] = sum_x min(p, q) at t + i) or, rescored, one deterministic path
(like the n-gram block); past the last head, c_t[i] = 0.
A drafter that stops on its confidence (``pmin=P``) drafts from t while its top share (its
likeliest token's probability among its ten likeliest) stays at least P: L_t such positions in a
row (:func:`confident_lengths`), so c_t[i] = a_{t+i} for i < L_t and 0 beyond. Its teacher-forced
rows are its own drafting rows while its draft is accepted; past a rejection its own text would
differ, which moves how many tokens it drafts there, not how many are accepted.
A steered drafter (``steer=DIR``) drafts token t + i with the vectors its verifier's taps gave at
the position before t, i + 1 positions back: c_t[i] = a^{(i+1)}_{t+i}, a^{(o)} its acceptance
from one teacher-forced pass in which every position is steered from o positions back (offsets
past ``STALE_MAX`` read ``STALE_MAX``'s pass). Its sibling acceptance (what a draft tree is worth)
is measured from the pass of offset 1, every depth alike.
S_t(g) = prod_{i<g} c_t[i] is the chance that the first g tokens drafted from t are accepted.

Acceptance is bursty, so two run-length distributions are kept, as sums that combine exactly
across prompts:

- per start position, P(G >= g) averaged over every t (its g = 1 value is the mean ``alpha``);
- as a decoder visits starts, for each width b: a round drafting b tokens at t accepts
  min(G_t, b) and starts the next round at t + min(G_t, b) + 1, skipping the starts inside long
  runs. Weighting S_t by the chance v_b(t) that a round starts at t is what a decoder sees; the
  plain average over-weights long runs (Spec-Bench translation, n-gram drafter, b = 8: 3.9
  tokens per round predicted, 1.9 made by the decoder, which the visited average matches).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from hsd_runtime import SamplingConfig, engine_model, ngram_lookup, server_lookup, warp
from hsd_runtime.decoding.confidence import top_share
from hsd_runtime.learned.bpd import BpdDrafter
from hsd_runtime.learned.steering import layer_inputs, stale_sources, steering_delta
from hsd_runtime.models.output import apply_output_layer

__all__ = [
    "G_MAX",
    "TokenAcceptance",
    "VisitedSums",
    "WidthSums",
    "acceptance_from_logits",
    "block_acceptance",
    "bpd_acceptance",
    "confident_conditionals",
    "confident_lengths",
    "model_conditionals",
    "ngram_acceptance",
    "ngram_blocks",
    "run_length_sums",
    "start_survival",
    "steered_acceptance",
    "steered_logits",
    "teacher_forced_logits",
    "visited_run_sums",
]

G_MAX = 64
STALE_MAX = 8  # steering offsets measured one pass each; a draft further from its verification reads offset 8's
VISIT_MAX = 64  # widths b for which the visited distribution is kept: every width a plan may have


def teacher_forced_logits(model: Any, prompt: list[int], continuation: list[int], width: int) -> torch.Tensor:
    """Logits ``[len(continuation), width]`` in fp32; row t is the prediction for ``continuation[t]``.

    One pass over prompt + continuation in a fresh cache of ``model``'s engine (a torch causal LM,
    or a model of another engine such as a llama.cpp GGUF), every row kept, in inference mode.
    """
    m = len(continuation)
    text = prompt + continuation
    return engine_model(model).open_cache(width, len(text)).feed(text, 0, m + 1)[:m].float()


def acceptance_from_logits(q_logits: torch.Tensor, p_logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Per-position acceptance ``[m]`` of a drafter (q) by a verifier (p), both ``[m, V]``, under
    the sampling config's lenience (1: the exact rule)."""
    if sampling.greedy:
        return (q_logits.argmax(-1) == p_logits.argmax(-1)).double().cpu()
    p, q = warp(p_logits, sampling), warp(q_logits, sampling)
    # sum_x q(x) min(1, p(x) / (e q(x))) = sum_x min(q(x), p(x) / e): at e = 1, 1 - TV(p, q)
    p = p / sampling.lenience if sampling.lossy else p
    return torch.minimum(p, q).sum(-1).double().clamp(0.0, 1.0).cpu()


def ngram_blocks(
    order: int,
    prompt: list[int],
    continuation: list[int],
    g_max: int = G_MAX,
    min_size: int = 1,
    server: bool = False,
) -> list[list[int]]:
    """The block the n-gram lookup proposes at each start t of the continuation (asked for up to
    ``g_max`` tokens, never past the continuation's end; ``min_size`` its shortest suffix match,
    ``ngram:min=K``): ``[m]`` blocks. Their lengths are what a verification pass holds: a short or
    empty block makes a short pass, which on an engine whose pass cost grows with its tokens is
    cheaper than a full one.

    >>> ngram_blocks(2, [1, 2, 3, 1, 2], [7, 9], g_max=4)  # "1 2" recurs; "7" never did
    [[3, 1], []]
    """
    m = len(continuation)
    if server:  # llama-server's rule, as it drafts at its narrowest width (k = n; a narrower one drafts nothing)
        return [server_lookup(prompt + continuation[:t], order, g_max, gate=order)[: m - t] for t in range(m)]
    return [ngram_lookup(prompt + continuation[:t], order, min(g_max, m - t), min_size) for t in range(m)]


class TokenAcceptance:
    """The chance that a drafted token is accepted at a continuation position, from the
    verifier's logits ``p_logits`` ``[m, V]`` along the continuation: greedy, 1 where it is the
    verifier's argmax; sampling, its probability there (one-hot q), over the lenience."""

    def __init__(self, p_logits: torch.Tensor, sampling: SamplingConfig) -> None:
        self.probs = None if sampling.greedy else warp(p_logits, sampling).cpu()
        self.argmax = p_logits.argmax(-1).tolist()
        self.lenience = sampling.lenience

    def __call__(self, position: int, token: int) -> float:
        if self.probs is None:
            return float(token == self.argmax[position])
        return min(1.0, float(self.probs[position, token]) / self.lenience)


def ngram_acceptance(blocks: list[list[int]], p_logits: torch.Tensor, sampling: SamplingConfig, g_max: int = G_MAX) -> torch.Tensor:
    """c_t[i] ``[m, g_max]``: acceptance of the i-th token of the n-gram block proposed at t
    (``blocks`` from :func:`ngram_blocks`).

    ``p_logits`` ``[m, V]`` are the verifier's logits along the continuation.
    """
    return block_acceptance(blocks, TokenAcceptance(p_logits, sampling), g_max)


def block_acceptance(blocks: list[list[int]], accept: TokenAcceptance, g_max: int = G_MAX) -> torch.Tensor:
    """c_t[i] ``[m, g_max]`` of the blocks proposed at each start t, by ``accept``."""
    out = torch.zeros(len(blocks), g_max, dtype=torch.float64)
    for t, block in enumerate(blocks):
        for i, x in enumerate(block[:g_max]):
            out[t, i] = accept(t + i, x)
    return out


def bpd_acceptance(
    drafter: BpdDrafter, prompt: list[int], continuation: list[int], p_logits: torch.Tensor, sampling: SamplingConfig, g_max: int = G_MAX
) -> torch.Tensor:
    """c_t[i] ``[m, g_max]`` of block-draft heads under their host (``drafter`` bound to it).

    ``p_logits`` ``[m, V]`` are the host's logits along the continuation; one more pass of the host
    gives its hidden states there.
    """
    m, heads = len(continuation), drafter.card.heads - 1
    model = drafter.model
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + continuation], device=device)  # [1, L + m]
    with torch.inference_mode():
        decoder = getattr(model, model.base_model_prefix)
        hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state[0]  # [L + m, d]
        start = len(prompt) - 2  # row t predicted x_{t-1} (x_{-1}: the prompt's last token)
        if start < 0:  # a one-token prompt: no row predicted it, nothing is drafted at t = 0 (zeros, masked below)
            hidden = torch.cat([torch.zeros_like(hidden[:1]), hidden])
            start = 0
        hidden = hidden[start : start + m]  # [m, d]
        states = drafter.heads(hidden.float())  # [m, H - 1, d]: head i + 2 at row t proposes x_{t+i}
        logits = apply_output_layer(model, states, p_logits.shape[-1]).float()  # [m, H - 1, V]
    out = torch.zeros(m, g_max, dtype=torch.float64)
    first = 1 if len(prompt) < 2 else 0
    if drafter.rescore == "none" and drafter.paths == 1:
        for i in range(min(heads, g_max, m)):
            out[first : m - i, i] = acceptance_from_logits(logits[first : m - i, i], p_logits[first + i :], sampling)
        return out
    probs = None if sampling.greedy else warp(p_logits, sampling).cpu()
    argmax = p_logits.argmax(-1).tolist()
    drafter.prefill([prompt])
    for t in range(first, m):
        n = min(heads, g_max, m - t)
        block = drafter.drafts(logits[t, :n], prompt + continuation[:t], sampling)[0]
        for i, x in enumerate(block):
            out[t, i] = float(x == argmax[t + i]) if probs is None else min(1.0, float(probs[t + i, x]) / sampling.lenience)
    return out


def steered_logits(
    drafter: nn.Module, verifier: nn.Module, prompt: list[int], continuation: list[int], width: int
) -> Iterator[torch.Tensor]:
    """A steered ``drafter``'s logits ``[m, width]`` along the continuation (its ``steerer``, under
    its ``verifier``) for staleness offsets 1, 2, ...: each row steered from that many rows back
    (:func:`~hsd_runtime.learned.steering.stale_sources`). One verifier pass gives its taps first; each
    offset is one drafter pass, made when it is asked for."""
    steerer: Any = drafter.steerer
    m = len(continuation)
    start = len(prompt) - 1  # the position of continuation row 0
    device = next(verifier.parameters()).device
    with torch.inference_mode():
        taps = layer_inputs(verifier, torch.tensor([prompt + continuation], device=device), steerer.card.taps)[0, start : start + m]
    dtype = steerer.projection.up.weight.dtype
    offset = 0
    try:
        while True:
            offset += 1
            sources = stale_sources(m, offset)
            steered = torch.nonzero(sources >= 0)[:, 0]  # [N] the rows steered
            with torch.inference_mode():
                steerer.delta = steering_delta(
                    steerer.projection, taps[sources[steered]].to(dtype), (torch.zeros_like(steered), start + steered), (1, start + m + 1)
                )
            yield teacher_forced_logits(drafter, prompt, continuation, width)
    finally:
        steerer.clear()


def steered_acceptance(
    drafter: nn.Module,
    verifier: nn.Module,
    prompt: list[int],
    continuation: list[int],
    p_logits: torch.Tensor,
    sampling: SamplingConfig,
    g_max: int = G_MAX,
) -> tuple[torch.Tensor, torch.Tensor]:
    """c_t[i] ``[m, g_max]`` of a steered ``drafter`` (``drafter.steerer``) under its ``verifier``,
    and the drafter's logits ``[m, V]`` at offset 1 (what a draft tree's first depth reads).

    One drafter pass per staleness offset o = 1..min(g_max, STALE_MAX) (:func:`steered_logits`).
    """
    m = len(continuation)
    a, first = [], None
    passes = steered_logits(drafter, verifier, prompt, continuation, p_logits.shape[-1])
    for _, q in zip(range(min(g_max, STALE_MAX)), passes):
        first = q if first is None else first
        a.append(acceptance_from_logits(q, p_logits, sampling))
    passes.close()  # the drafter's vectors are cleared
    assert first is not None
    out = torch.zeros(m, g_max, dtype=torch.float64)
    for i in range(min(g_max, m)):
        out[: m - i, i] = a[min(i, len(a) - 1)][i:]  # drafted i + 1 positions after the verification
    return out, first


def confident_lengths(q_logits: torch.Tensor, p_min: float, g_max: int = G_MAX) -> list[int]:
    """L_t ``[m]``: the tokens a drafter that stops below ``p_min`` drafts from each start t, from
    its teacher-forced rows ``q_logits`` ``[m, V]``: the positions t, t + 1, ... whose top share is
    at least ``p_min``, in a row. A run that reaches the continuation's end is censored there and
    counts as ``g_max`` (the draft went on), as a lookup's block cut by the end counts as proposed.

    >>> sure, unsure = [9.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    >>> confident_lengths(torch.tensor([sure, sure, unsure, sure]), 0.5, g_max=8)
    [2, 1, 0, 8]
    """
    sure = (top_share(q_logits) >= p_min).tolist()
    out, run = [0] * len(sure), g_max
    for t in reversed(range(len(sure))):
        run = min(run + 1, g_max) if sure[t] else 0
        out[t] = run
    return out


def confident_conditionals(a: torch.Tensor, lengths: Sequence[int], g_max: int = G_MAX) -> torch.Tensor:
    """c_t[i] ``[m, g_max]`` of a drafter that drafts ``lengths[t]`` tokens from t: a[t + i] for
    i < L_t, 0 beyond (what it did not draft is not accepted).

    >>> confident_conditionals(torch.tensor([1.0, 1.0, 0.5]), [2, 0, 8], g_max=3).tolist()
    [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.0, 0.0]]
    """
    drafted = torch.arange(g_max)[None, :] < torch.tensor(list(lengths))[:, None]  # [m, g_max]
    return model_conditionals(a, g_max) * drafted


def model_conditionals(a: torch.Tensor, g_max: int = G_MAX) -> torch.Tensor:
    """c_t[i] = a[t + i] ``[m, g_max]`` for a drafter that re-predicts each position (0 past the end)."""
    m = len(a)
    padded = torch.cat([a.double(), torch.zeros(g_max, dtype=torch.float64)])
    return padded.unfold(0, g_max, 1)[:m].clone()


def start_survival(c: torch.Tensor) -> torch.Tensor:
    """S_t(g) = prod_{i<g} c_t[i] ``[m, g_max + 1]`` from conditionals ``c`` ``[m, g_max]``."""
    ones = torch.ones(c.shape[0], 1, dtype=torch.float64)
    return torch.cat([ones, torch.cumprod(c.double(), dim=1)], dim=1)


def run_length_sums(survival: torch.Tensor) -> tuple[list[float], list[int]]:
    """Sums behind the per-start P(G >= g) from ``survival`` S ``[m, g_max + 1]``.

    ``run_sum[g]`` = sum over starts t with t + g <= m (g drafted positions exist) of S_t(g), and
    ``run_count[g]`` the number of such t; P(G >= g) = run_sum[g] / run_count[g].

    >>> run_length_sums(start_survival(model_conditionals(torch.tensor([1.0, 1.0, 0.0, 1.0]), 3)))
    ([4.0, 3.0, 1.0, 0.0], [4, 4, 3, 2])
    """
    m, width = survival.shape
    run_sum, run_count = [], []
    for g in range(width):
        n = max(0, min(m, m - g + 1))
        run_sum.append(float(survival[:n, g].sum()))
        run_count.append(n)
    return run_sum, run_count


class VisitedSums(NamedTuple):
    """What :func:`visited_run_sums` adds up, per width b = 1..b_max (index b - 1)."""

    sums: list[list[float]]  # [b - 1][g]: sum_t v_b(t) S_t(g) over the starts that see g
    counts: list[float]  # [b - 1]: sum_t v_b(t) over every visited start
    bases: list[list[float]]  # [b - 1][g]: sum_t v_b(t) S_t(g - 1) over the starts that see g (counts at g = 0)
    drafted: list[list[float]] | None  # [b - 1][l]: sum_t v_b(t) [min(L_t, b) >= l], L_t the tokens proposed at t


def visited_run_sums(
    survival: torch.Tensor,
    b_max: int = VISIT_MAX,
    start: int = 0,
    lengths: Sequence[int] | None = None,
    min_width: int = 1,
) -> VisitedSums:
    """Sums behind P_b(G >= g) as a decoder drafting ``b`` tokens a round visits starts.

    v_b(start) = 1: the runtime's first round drafts at position 0, right after the prompt (the
    prefill produces no token of its own), and that round counts like any other: a lookup whose
    first block is always wrong there (a chat template's suffix matched earlier in the prompt) costs
    every generation a one-token round. A round at t with S_t moves to t + x with
    P(X = x) = S_t(x - 1) - S_t(x) for x <= b and S_t(b) for x = b + 1.

    Every visited start counts, up to the continuation's end. A start t sees g <= m - t of its
    positions; beyond them its run is censored (it ran off the continuation), so it counts only
    for those g, and P_b(G >= g) is a product-limit estimate:
    prod_{j=1..g} (sum_t v_b(t) S_t(j)) / (sum_t v_b(t) S_t(j - 1)), each sum over the starts that
    see j. Counting only the starts with room for all b positions, as an earlier estimate did,
    drops the last b positions' rounds: where a reply's end is less predictable than its start
    (code restating its stub, then writing the body), that over-states a wide draft's tokens per
    round (a lookup drafting 15 tokens for a 74-token reply: 7.5 where the decoder gets 3.4).

    Returns :class:`VisitedSums`; with ``lengths`` (a lookup drafter's block length L_t at each
    start, the lengths of :func:`ngram_blocks`, or a ``pmin=`` model's :func:`confident_lengths`)
    also how many tokens each visited round's proposal held, for l = 0..b: a lookup that proposes
    nothing leaves its verifier a one-token pass. A block cut by the continuation's end counts as
    proposed there. A width below ``min_width`` drafts nothing (llama-server's lookup copies at
    least its n tokens; a ``nmin=`` model drops shorter drafts): every round there commits one token.

    >>> v = visited_run_sums(start_survival(model_conditionals(torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0]), 4)), 2, 0, [3, 2, 1, 0, 1])
    >>> v.sums[1], v.counts[1], v.bases[1]  # b = 2: rounds at 0 (accepts 2), 3 (rejects) and 4 (sees 1 position)
    ([3.0, 2.0, 1.0], 3.0, [3.0, 3.0, 1.0])
    >>> v.drafted[1]  # the rounds at 0, 3 and 4 proposed 2 (of 3, at width 2), 0 and 1 tokens
    [3.0, 2.0, 1.0]
    """
    surv = survival.double().cpu().numpy()  # numpy: this loop is many tiny vector operations
    m = surv.shape[0]
    nothing = np.zeros(surv.shape[1])  # S(g) of a round that drafts nothing: 1 at g = 0 only
    nothing[0] = 1.0
    widths = []
    for b in range(1, b_max + 1):
        width = WidthSums(b)
        v = np.zeros(m + b + 2)
        v[min(start, m)] = 1.0
        silent = b < min_width
        for t in range(min(start, m), m):
            w = v[t]
            if w == 0.0:
                continue
            s = nothing[: b + 1] if silent else surv[t, : b + 1]
            width.add(w, s, min(b, m - t), None if lengths is None else 0 if silent else lengths[t])
            v[t + 1 : t + b + 1] += w * (s[:-1] - s[1:])  # P(X = x), x = 1..b
            v[t + b + 1] += w * s[-1]  # P(X = b + 1): all b accepted
        widths.append(width)
    return WidthSums.collect(widths, drafted=lengths is not None)


class WidthSums:
    """What :class:`VisitedSums` holds of one width b, added round by round."""

    def __init__(self, b: int) -> None:
        self.b = b
        self.total, self.base, self.held = np.zeros(b + 1), np.zeros(b + 1), np.zeros(b + 1)

    def add(self, w: float, s: np.ndarray, seen: int, proposed: int | None) -> None:
        """A round at a start, visited with chance ``w``: its S(g) ``s`` ``[b + 1]``, of which it
        sees the first ``seen`` positions (the continuation's end censors the rest), having
        proposed ``proposed`` tokens (None: not counted)."""
        self.total[: seen + 1] += w * s[: seen + 1]
        self.base[0] += w
        self.base[1 : seen + 1] += w * s[:seen]
        if proposed is not None:
            self.held[: min(self.b, proposed) + 1] += w  # l = 0..min(L_t, b)

    @staticmethod
    def collect(widths: Sequence[WidthSums], drafted: bool) -> VisitedSums:
        """The :class:`VisitedSums` of widths 1..b_max (``drafted``: with the proposal lengths)."""
        return VisitedSums(
            [w.total.tolist() for w in widths],
            [float(w.base[0]) for w in widths],
            [w.base.tolist() for w in widths],
            [w.held.tolist() for w in widths] if drafted else None,
        )
