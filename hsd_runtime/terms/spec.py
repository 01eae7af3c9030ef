"""Model specs: one string names a model, ``NAME[:key=value]...``.

NAME is a packaged alias (``smollm2-135m``, ``gemma3-270m``, ``qwen2.5-coder-0.5b``,
``qwen2.5-coder-1.5b``), ``ngram``, a Hugging Face model directory or a ``.gguf`` file. Options:
``layers=K`` (the first K decoder layers, sharing the parent's weights), ``dtype=bf16|fp16|fp32``,
``quant=int8`` (a copy whose Linear layers hold int8 weights; it computes in fp32, so it takes no
``dtype`` other than fp32), ``engine=torch|llamacpp`` (the engine that runs it, else the command's;
on llama.cpp a spec names a packaged alias or a ``.gguf`` file, run as it is or re-quantized by
``quant=q8_0|q4_0|q2_k|...``, llama.cpp's file types), ``n=N`` (n-gram order, ``ngram`` only),
``min=K`` (``ngram`` only: propose nothing unless a suffix of at least K tokens matches; 1 by
default, so that any repeated token drafts), ``rule=llama-server`` (``ngram`` only: draft as
llama-server's ``ngram-simple`` does, on an exact match of n tokens, 12 unless ``n=`` says, from
its latest occurrence; ``rule=ngram-mod``: as its ``ngram-mod`` does, a hashed table of n-grams, 24
unless ``n=`` says, walked token by token; see :mod:`hsd_runtime.decoding.ngram_mod`;
``rule=ngram-map-k`` and ``rule=ngram-map-k4v``: as its ``ngram-map-k`` and ``ngram-map-k4v``
do, keys of n tokens, 12 unless ``n=`` says, each remembering how many tokens its last draft had
accepted; ``hits=H``, with ``ngram-map-k4v`` only: draft once a key was looked up H times, as
``--spec-ngram-map-k4v-min-hits H``; see :mod:`hsd_runtime.decoding.ngram_map`), ``pmin=P`` (a model at level 0 only: end
each draft at the first token whose probability among the drafter's ten likeliest is below P, as
llama-server's ``draft-simple`` does with ``--spec-draft-p-min P``; see
:mod:`hsd_runtime.decoding.confidence`), ``nmin=N`` (with ``pmin=``: a draft that ended shorter
than N tokens is dropped, the round verifying none, as ``--spec-draft-n-min N``; with
``ngram:rule=ngram-mod``, as ``--spec-ngram-mod-n-min N``), ``vocab=N`` or ``vocab=FILE``
(a drafter whose output layer scores N tokens only, the first N by token id or the tokens a
ranking file lists; see :mod:`hsd_runtime.models.trim`), ``steer=DIR`` (a drafter steered by the hidden states of
the model directly above it, with the projection trained into DIR; see :mod:`hsd_runtime.learned.steering`).

``bpd:DIR`` is a block-draft drafter: the heads trained into DIR, read off the hidden state of the
model directly above it in the chain (see :mod:`hsd_runtime.learned.bpd`), with options ``k=`` (top-k tokens per head
in the lattice), ``p=`` (paths verified together as a tree), ``rescore=none|ngram|MODEL`` (no
rescoring, a bigram model of the context, or a small language model of the same tokenizer: a
packaged alias or a directory) and ``alpha=`` (the rescoring's weight), ``vocab=N`` (the heads score the host's first N tokens only, as a
trimmed drafter head does) and ``corpus=FILE`` (a text file whose bigram counts ``rescore=ngram``
adds to the context's).

A spec keeps its options in the order they were written, so ``str(parse_spec(s)) == s`` for every
valid ``s``: the string round-trips through the profiling database unchanged.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .choices import DTYPES, ENGINES, GGUF_QUANTS, TORCH_QUANTS, Dtype
from .errors import ModelSpecError
from .limits import BPD_DEFAULTS, DEFAULT_NGRAM_ORDER, MAX_BPD_K, MAX_BPD_PATHS, MAX_SPEC_CHARS, MAX_SPEC_INT

__all__ = [
    "BPD",
    "DTYPES",
    "MAP_K4V_RULE",
    "MAP_K_RULE",
    "MAP_NGRAM_ORDER",
    "MAP_RULES",
    "MOD_NGRAM_ORDER",
    "MOD_RULE",
    "NGRAM",
    "QUANTS",
    "RESCORERS",
    "RULES",
    "SERVER_NGRAM_ORDER",
    "SERVER_RULE",
    "SIMPLE_MOD_RULE",
    "Dtype",
    "ModelSpec",
    "check_engine",
    "check_printable",
    "parse_chain",
    "parse_spec",
    "same_model",
]

NGRAM = "ngram"
BPD = "bpd"
RESCORERS = ("none", "ngram")  # how a bpd drafter rescores its lattice, besides a small language model
QUANTS = TORCH_QUANTS + GGUF_QUANTS  # weight quantizations a spec may ask for: int8 (torch), llama.cpp's file types
_INT_OPTIONS = {"layers", "n", "min", "nmin", "hits", "nmatch"}
_KNOWN = {"layers", "dtype", "n", "min", "rule", "quant", "vocab", "steer", "engine", "weights", "pmin", "nmin", "hits", "nmatch"}
_DRAFTING = ("pmin", "nmin")  # options of how a model drafts, not of the model it loads
SERVER_RULE = "llama-server"  # rule=: the lookup llama-server's ngram-simple runs
MOD_RULE = "ngram-mod"  # rule=: llama-server's ngram-mod, a hashed n-gram table walked token by token
MAP_K_RULE = "ngram-map-k"  # rule=: llama-server's ngram-map-k, keys that remember their last acceptance
MAP_K4V_RULE = "ngram-map-k4v"  # rule=: its ngram-map-k4v, which also counts the m-grams after each key
MAP_RULES = (MAP_K_RULE, MAP_K4V_RULE)
# rule=: --spec-type ngram-simple,ngram-mod, ngram-mod drafting the rounds where ngram-simple found nothing
SIMPLE_MOD_RULE = f"{SERVER_RULE}+{MOD_RULE}"
RULES = (SERVER_RULE, MOD_RULE, *MAP_RULES, SIMPLE_MOD_RULE)
SERVER_NGRAM_ORDER = 12  # llama-server's default --spec-ngram-simple-size-n
MOD_NGRAM_ORDER = 24  # llama-server's default --spec-ngram-mod-n-match
MAP_NGRAM_ORDER = 12  # llama-server's default --spec-ngram-map-k-size-n and --spec-ngram-map-k4v-size-n
_BPD_KNOWN = set(BPD_DEFAULTS)


class ModelSpec(BaseModel):
    """A parsed model spec; ``options`` keeps the order in which they were written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    options: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        """Return the value of option ``key``, or None when it is not set."""
        return dict(self.options).get(key)

    @property
    def layers(self) -> int | None:
        value = self.get("layers")
        return None if value is None else int(value)

    @property
    def dtype(self) -> str | None:
        return self.get("dtype")

    @property
    def ngram_order(self) -> int:
        """The n of an ``ngram`` spec (``n=N``), DEFAULT_NGRAM_ORDER when unset."""
        value = self.get("n")
        if value is None:
            orders = {
                SERVER_RULE: SERVER_NGRAM_ORDER,
                MOD_RULE: MOD_NGRAM_ORDER,
                MAP_K_RULE: MAP_NGRAM_ORDER,
                MAP_K4V_RULE: MAP_NGRAM_ORDER,
                SIMPLE_MOD_RULE: SERVER_NGRAM_ORDER,
            }
            return orders.get(self.ngram_rule or "", DEFAULT_NGRAM_ORDER)
        return int(value)

    @property
    def n_match(self) -> int:
        """The n-gram size of ``ngram-mod`` in ``rule=llama-server+ngram-mod`` (``nmatch=N``; ``n=``
        is ``ngram-simple``'s there), the server's default 24 when unset."""
        value = self.get("nmatch")
        return MOD_NGRAM_ORDER if value is None else int(value)

    @property
    def ngram_min(self) -> int:
        """The shortest suffix match on which an ``ngram`` spec drafts (``min=K``), 1 when unset."""
        if self.ngram_rule is not None:
            return self.ngram_order  # llama-server's rules match exactly n tokens
        value = self.get("min")
        return 1 if value is None else int(value)

    @property
    def ngram_rule(self) -> str | None:
        """How an ``ngram`` spec looks up (``rule=``: one of :data:`RULES`), None for the longest-suffix rule."""
        return self.get("rule")

    @property
    def server_rule(self) -> bool:
        """Whether an ``ngram`` spec drafts as llama-server's ``ngram-simple`` (``rule=llama-server``)."""
        return self.ngram_rule == SERVER_RULE

    @property
    def mod_rule(self) -> bool:
        """Whether an ``ngram`` spec drafts as llama-server's ``ngram-mod`` (``rule=ngram-mod``)."""
        return self.ngram_rule == MOD_RULE

    @property
    def walks_mod(self) -> bool:
        """Whether an ``ngram`` spec drafts with ``ngram-mod``'s table, alone or after ``ngram-simple``
        (what ``nmin=`` cuts)."""
        return self.ngram_rule in (MOD_RULE, SIMPLE_MOD_RULE)

    @property
    def map_rule(self) -> bool:
        """Whether an ``ngram`` spec drafts as llama-server's ``ngram-map-k`` or ``ngram-map-k4v``."""
        return self.ngram_rule in MAP_RULES

    @property
    def keeps_state(self) -> bool:
        """Whether an ``ngram`` spec's draft depends on its own past rounds, not on the text alone
        (``ngram-mod``'s table, ``ngram-map-k``'s remembered acceptance)."""
        return self.walks_mod or self.map_rule

    @property
    def min_hits(self) -> int:
        """The lookups of a key before ``ngram-map-k4v`` drafts it (``hits=H``), 1 (the server's default) when unset."""
        value = self.get("hits")
        return 1 if value is None else int(value)

    def run_dtype(self, default: str) -> str:
        """The dtype this model runs in: its own ``dtype=``, fp32 for a quantized copy (int8
        kernels take fp32 activations), else ``default``; ``-`` for ngram."""
        if self.is_ngram:
            return "-"
        if self.quant in GGUF_QUANTS or self.engine == "llamacpp":
            return self.quant or "gguf"  # llama.cpp runs the file's own types
        return "fp32" if self.quant else self.dtype or default

    @property
    def quant(self) -> str | None:
        """The weight quantization asked for (``quant=int8``), None for full precision."""
        return self.get("quant")

    @property
    def engine(self) -> str | None:
        """The engine this spec names (``engine=torch|llamacpp``), None to run on the command's."""
        return self.get("engine")

    @property
    def vocab(self) -> int | str | None:
        """The trimmed head asked for: N (``vocab=N``), a ranking file's path (``vocab=FILE``), or None."""
        value = self.get("vocab")
        if value is None:
            return None
        return int(value) if value.isascii() and value.isdigit() else value

    @property
    def steer(self) -> str | None:
        """The steering directory of ``steer=DIR``, None when the model is not steered."""
        return self.get("steer")

    @property
    def random_weights(self) -> bool:
        """``weights=random``: the model's shape from its config, its weights random and no
        checkpoint read. A pass costs what the trained model's does, so it is timed as that model
        (on a machine without its weights); what it drafts means nothing, so its acceptance is never measured."""
        return self.get("weights") == "random"

    @property
    def p_min(self) -> float | None:
        """The confidence below which a drafter ends its draft (``pmin=P``), None when it always drafts its width."""
        value = self.get("pmin")
        return None if value is None else float(value)

    @property
    def n_min(self) -> int:
        """The fewest tokens a ``pmin=`` or ``rule=ngram-mod`` draft keeps (``nmin=N``; a shorter one
        is dropped), 0 when unset."""
        value = self.get("nmin")
        return 0 if value is None else int(value)

    @property
    def loads(self) -> ModelSpec:
        """The spec of the model the loader loads: ``pmin=`` and ``nmin=`` dropped, since they change
        how the model drafts, not the model (``m`` and ``m:pmin=0.5`` share one set of weights)."""
        return ModelSpec(name=self.name, options=tuple(kv for kv in self.options if kv[0] not in _DRAFTING))

    @property
    def is_ngram(self) -> bool:
        return self.name == NGRAM

    @property
    def is_bpd(self) -> bool:
        """A block-draft drafter (``bpd:DIR``): heads on the hidden state of the level above."""
        return self.name.startswith(BPD + ":")

    @property
    def is_model(self) -> bool:
        """A spec the loader loads (neither ``ngram`` nor ``bpd:``)."""
        return not (self.is_ngram or self.is_bpd)

    @property
    def heads_dir(self) -> str:
        """The directory of a ``bpd:DIR`` spec."""
        return self.name[len(BPD) + 1 :]

    def bpd_option(self, key: str) -> str:
        """A ``bpd:`` option's value, its default when unset."""
        return self.get(key) or BPD_DEFAULTS[key]

    @property
    def base(self) -> ModelSpec:
        """The spec of the full model this one is a view of (``layers``, ``vocab``, ``steer``, ``pmin`` and ``nmin`` dropped)."""
        return ModelSpec(name=self.name, options=tuple(kv for kv in self.options if kv[0] not in ("layers", "vocab", "steer", *_DRAFTING)))

    def __str__(self) -> str:
        return ":".join([self.name, *(f"{k}={v}" for k, v in self.options)])


_LINE_BREAKING = ("Cc", "Zl", "Zp")  # C0, DEL and C1 controls; U+2028 and U+2029, the line and paragraph separators


def check_printable(text: str, what: str | None = None) -> None:
    """Refuse ``text`` (a spec, or the absolute form of one) holding a control character: a name
    goes into messages, the database and the comments and commands of every export, where a
    newline would start a line of its own (a shell command, a Python statement). ``what`` names
    ``text`` in the message (default: ``model spec 'TEXT'``).

    >>> check_printable("/models/a\\nb.gguf")
    Traceback (most recent call last):
    ...
    hsd_runtime.terms.errors.ModelSpecError: model spec '/models/a\\nb.gguf' holds the control character U+000A; rename it without control characters
    """
    bad = next((ch for ch in text if unicodedata.category(ch) in _LINE_BREAKING), None)
    if bad is not None:
        named = what or f"model spec {text[:200]!r}"
        raise ModelSpecError(f"{named} holds the control character U+{ord(bad):04X}; rename it without control characters")


def parse_spec(text: str) -> ModelSpec:
    """Parse ``NAME[:key=value]...`` into a :class:`ModelSpec`.

    >>> str(parse_spec("smollm2-135m:layers=8:dtype=bf16"))
    'smollm2-135m:layers=8:dtype=bf16'
    """
    text = text.strip()
    if not text:
        raise ModelSpecError("empty model spec; write NAME[:key=value]..., e.g. smollm2-135m:layers=8")
    check_printable(text)
    if len(text) > MAX_SPEC_CHARS:
        raise ModelSpecError(f"model spec {text[:40]!r}... has {len(text):,} characters; a spec has at most {MAX_SPEC_CHARS:,}")
    name, *parts = text.split(":")
    if not name:
        raise ModelSpecError(f"model spec {text!r} has no name before the first ':'")
    if name == BPD:
        if not parts or not parts[0] or "=" in parts[0]:
            raise ModelSpecError(
                f"model spec {text!r}: write bpd:DIR[:k=K][:p=P][:rescore=none|ngram|MODEL][:alpha=A][:vocab=N][:corpus=FILE], "
                "DIR a heads directory"
            )
        return _parse_bpd(text, f"{BPD}:{parts[0]}", parts[1:])
    options = _key_values(text, parts, _KNOWN, "model spec")
    for key, value in options:
        if key in _INT_OPTIONS and not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_SPEC_INT):
            raise ModelSpecError(f"option {key}={value[:40]} in model spec {text[:200]!r} must be an integer from 1 to {MAX_SPEC_INT:,}")
        if key == "dtype" and value not in DTYPES:
            raise ModelSpecError(f"dtype={value} in model spec {text!r}; use one of {', '.join(DTYPES)}")
        if key == "vocab" and value.isascii() and value.isdigit() and not 1 <= int(value) <= MAX_SPEC_INT:
            raise ModelSpecError(
                f"option vocab={value[:40]} in model spec {text[:200]!r} must be an integer from 1 to {MAX_SPEC_INT:,} or a ranking file"
            )
        if key == "quant" and value not in QUANTS:
            raise ModelSpecError(f"quant={value} in model spec {text!r}; use one of {', '.join(QUANTS)}")
        if key == "weights" and value != "random":
            raise ModelSpecError(
                f"weights={value[:40]} in model spec {text[:200]!r}; the one choice is weights=random (the config's shape, random weights)"
            )
        if key == "rule" and value not in RULES:
            raise ModelSpecError(
                f"rule={value[:40]} in model spec {text[:200]!r}; use rule={SERVER_RULE} (llama-server's ngram-simple), "
                f"rule={MOD_RULE}, rule={MAP_K_RULE}, rule={MAP_K4V_RULE} (its lookups of those names) or "
                f"rule={SIMPLE_MOD_RULE} (--spec-type ngram-simple,ngram-mod)"
            )
        if key == "engine" and value not in ENGINES:
            raise ModelSpecError(f"engine={value} in model spec {text!r}; use one of {', '.join(ENGINES)}")
        if key == "pmin" and not _open_unit(value):
            raise ModelSpecError(f"pmin={value[:40]} in model spec {text[:200]!r} must be a number between 0 and 1 (exclusive)")
    spec = ModelSpec(name=name, options=tuple(options))
    if spec.is_ngram and any(
        v is not None for v in (spec.layers, spec.dtype, spec.quant, spec.vocab, spec.steer, spec.engine, spec.get("weights"), spec.p_min)
    ):
        raise ModelSpecError(f"model spec {text!r}: ngram takes only the options n=N, min=K, rule=, nmin=N, hits=H and nmatch=N")
    if spec.ngram_rule is not None and spec.get("min") is not None:
        raise ModelSpecError(f"model spec {text!r}: rule={spec.ngram_rule} matches exactly n tokens; drop min=")
    if spec.is_ngram and spec.n_min and not spec.walks_mod:
        raise ModelSpecError(
            f"model spec {text!r}: nmin= drops a short draft of rule={MOD_RULE} (or rule={SIMPLE_MOD_RULE}); add it or drop nmin="
        )
    if spec.get("nmatch") is not None and spec.ngram_rule != SIMPLE_MOD_RULE:
        raise ModelSpecError(f"model spec {text!r}: nmatch= is ngram-mod's n-gram size in rule={SIMPLE_MOD_RULE}; add it or drop nmatch=")
    if spec.get("hits") is not None and spec.ngram_rule != MAP_K4V_RULE:
        raise ModelSpecError(f"model spec {text!r}: hits= counts a key's lookups in rule={MAP_K4V_RULE}; add it or drop hits=")
    for key, form in (("n", "n=N"), ("min", "min=K"), ("rule", "rule=")):
        if not spec.is_ngram and spec.get(key) is not None:
            raise ModelSpecError(f"model spec {text!r}: option {form} applies to ngram only")
    if spec.is_ngram and spec.ngram_min > spec.ngram_order:
        raise ModelSpecError(
            f"model spec {text!r}: min={spec.ngram_min} exceeds the order n={spec.ngram_order}; no suffix that long is looked up"
        )
    if spec.p_min is not None and spec.steer is not None:
        raise ModelSpecError(f"model spec {text!r}: a steered drafter drafts its width every round; drop pmin=")
    if spec.n_min and spec.p_min is None and not spec.is_ngram:
        raise ModelSpecError(f"model spec {text!r}: nmin= drops a draft that ended early; it takes pmin=, on which drafts end")
    if spec.engine is not None:
        check_engine(spec, spec.engine)
    if spec.quant in TORCH_QUANTS and spec.dtype not in (None, "fp32"):
        # the int8 kernels take fp32 activations: a bf16/fp16 quantized copy would not be what was asked
        raise ModelSpecError(f"model spec {text!r}: quant={spec.quant} computes in fp32; drop dtype={spec.dtype} or write dtype=fp32")
    return spec


def check_engine(spec: ModelSpec, engine: str) -> None:
    """Refuse, in one line, a model spec that ``engine`` cannot run: llama.cpp runs a GGUF file
    as it is, cut to its first layers or re-quantized by its own quantizer (no dtypes, trimmed
    heads, steering or int8 copies); torch makes int8 copies, not llama.cpp's file types."""
    text = str(spec)
    if engine in ("torch", "static"):  # the static engine runs the torch engine's models over its own caches
        if spec.quant in GGUF_QUANTS:
            raise ModelSpecError(
                f"model spec {text!r}: quant={spec.quant} is a llama.cpp file type; add engine=llamacpp (or --engine llamacpp), "
                "or use quant=int8 on the torch engine"
            )
        return
    torch_only = [k for k in ("dtype", "vocab", "steer", "weights") if spec.get(k) is not None]
    if torch_only:
        raise ModelSpecError(
            f"model spec {text!r}: {', '.join(k + '=' for k in torch_only)} runs on the torch engine only; "
            "a llama.cpp level runs its GGUF file as it is, its first layers (layers=) or re-quantized (quant=)"
        )
    if spec.quant in TORCH_QUANTS:
        raise ModelSpecError(f"model spec {text!r}: quant=int8 is the torch engine's; on llama.cpp use one of {', '.join(GGUF_QUANTS)}")


def _key_values(text: str, parts: list[str], known: set[str], what: str) -> list[tuple[str, str]]:
    """The ``key=value`` parts of spec ``text`` in order, each key one of ``known`` and given once."""
    options: list[tuple[str, str]] = []
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key or not value:
            raise ModelSpecError(f"option {part!r} in model spec {text!r} is not key=value")
        if key not in known:
            raise ModelSpecError(f"unknown option {key!r} in {what} {text!r}; known: {', '.join(sorted(known))}")
        if any(k == key for k, _ in options):
            raise ModelSpecError(f"option {key!r} given twice in model spec {text!r}")
        options.append((key, value))
    return options


def _parse_bpd(text: str, name: str, parts: list[str]) -> ModelSpec:
    """The options of a ``bpd:DIR`` spec, each checked."""
    options = _key_values(text, parts, _BPD_KNOWN, "bpd spec")
    for key, value in options:
        bounds = {"k": MAX_BPD_K, "p": MAX_BPD_PATHS, "vocab": MAX_SPEC_INT}
        if key in bounds and not (value.isascii() and value.isdigit() and 1 <= int(value) <= bounds[key]):
            raise ModelSpecError(f"option {key}={value[:40]} in bpd spec {text[:200]!r} must be an integer from 1 to {bounds[key]}")
        if key == "alpha":
            try:
                alpha = float(value)
            except ValueError:
                alpha = float("nan")
            if not 0 <= alpha <= 100:
                raise ModelSpecError(f"alpha={value[:40]} in bpd spec {text[:200]!r} must be a number from 0 to 100")
    spec = ModelSpec(name=name, options=tuple(options))
    if spec.bpd_option("k") == "1" and int(spec.bpd_option("p")) > 1:
        raise ModelSpecError(f"bpd spec {text[:200]!r}: p={spec.bpd_option('p')} paths need k >= 2 tokens per head")
    if spec.bpd_option("corpus") and spec.bpd_option("rescore") != "ngram":
        raise ModelSpecError(f"bpd spec {text[:200]!r}: corpus= holds n-gram counts; it takes rescore=ngram")
    if spec.bpd_option("rescore") not in RESCORERS and int(spec.bpd_option("p")) > 1:
        raise ModelSpecError(
            f"bpd spec {text[:200]!r}: a language model rescores one path left to right; p > 1 takes rescore=ngram or none"
        )
    return spec


def _open_unit(value: str) -> bool:
    """Whether ``value`` is a decimal number strictly between 0 and 1 (``0.75``, ``.5``)."""
    try:
        x = float(value)
    except ValueError:
        return False
    return len(value) <= 20 and 0.0 < x < 1.0


def _where(name: str) -> str:
    """A model name as a comparable place: a directory's resolved path, else the alias itself."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def same_model(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two specs name the same model and depth (their dtype, quantization, head or
    steering may differ): what trained heads and steering are checked against."""
    return a.is_model and b.is_model and (_where(a.name), a.layers) == (_where(b.name), b.layers)


def parse_chain(text: str) -> list[ModelSpec]:
    """Parse a comma-separated chain, smallest model first and the target last."""
    specs = [parse_spec(part) for part in text.split(",")]
    if not specs[-1].is_model:
        raise ModelSpecError(f"the last model of a chain is the target and cannot be {specs[-1].name.split(':')[0]}")
    return specs
