"""The demo workflow as a library function: profile, solve and validate on the built-in default."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from hsd_runtime import ModelLoader, parse_spec
from hsd_runtime.models.packaged import PACKAGED, is_converted
from hsd_runtime.terms.choices import Dtype

from .errors import ChainError
from .plan import SolveConfig
from .profiling import ProfileConfig, ProfileSummary, prepare_profile, profile_summary, run_profile
from .prompts import load_prompts, split
from .solving import SolveReport, solve_and_store
from .store import Engine
from .validation import ValidationReport, run_validation, select_plans
from .validation.plot import plot_validation

__all__ = ["FAMILIES", "DemoFamily", "DemoReport", "Stages", "run_demo"]


@dataclass(frozen=True)
class DemoFamily:
    """One demo: the candidates (target last), the workload and a profiling budget that fits it."""

    models: str
    prompts: str | None  # a prompt file or built-in set; None: the built-in prompts
    max_prompts: int
    validate_prompts: int
    max_new_tokens: int
    latency_grid: tuple[int, ...]
    context_lens: tuple[int, ...]
    # interleaved latency rounds: the sweep is seconds against minutes of acceptance profiling, and
    # fewer than 5 let a slow spell of the machine set a point (see docs/benchmarks/profiling.md)
    rounds: int = 5
    repeats: int = 2  # validation: runs of every plan on every held-out prompt
    # measured runs with the models already converted, per dtype the models ran in: (minutes, where)
    measured: tuple[tuple[Dtype, float, str], ...] = ()
    convert_minutes: float = 0.0  # the packaged models' one-time assembly and conversion, measured
    # the candidates on the llama.cpp engine (--engine llamacpp): its own quantized copies in place
    # of int8 copies and early exits, which only the torch engine runs
    llamacpp_models: str = ""

    def on_engine(self, engine: str, device: str = "cpu") -> DemoFamily:
        """This demo on ``engine`` and a ``device`` of that type (``cpu`` or ``cuda``): on llama.cpp
        its llama.cpp candidates; on the torch and static engines its candidates, where on a GPU
        an ``int8`` copy (a CPU kernel) gives way to the model it copies; each spec naming a
        non-torch engine. The measured run times are the CPU's and go with any change.

        >>> FAMILIES["qwen"].on_engine("static", "cuda").models
        'ngram,qwen2.5-coder-0.5b:engine=static,qwen2.5-coder-1.5b:engine=static'
        """
        from .profiling.sources import with_engine

        if engine == "torch" and device == "cpu":
            return self
        if engine == "llamacpp":
            return replace(self, models=",".join(with_engine(self.llamacpp_models.split(","), engine)), measured=())
        models = self.models.split(",")
        if device != "cpu":
            models = list(dict.fromkeys(_off_cpu_kernels(m) for m in models))
        return replace(self, models=",".join(with_engine(models, engine)), measured=())

    def expected(self, dtype: Dtype, converted: bool) -> str | None:
        """One line saying how long this demo took where it was measured in ``dtype``, or None."""
        for measured_dtype, minutes, where in self.measured:
            if measured_dtype == dtype:
                first = "" if converted else f", plus about {self.convert_minutes:.0f} min to convert the packaged models once"
                return f"expected: about {minutes:.0f} min in {dtype} (measured on {where}){first}"
        return None

    def profile_config(self, dtype: Dtype, rounds: int | None = None) -> ProfileConfig:
        """What the demo profiles: the family's candidates, budget and grid, ``rounds`` interleaved rounds (default: the family's)."""
        return ProfileConfig(
            models=self.models.split(","),
            dtype=dtype,
            max_new_tokens=self.max_new_tokens,
            latency_grid=list(self.latency_grid),
            context_lens=list(self.context_lens),
            repeats=rounds or self.rounds,
        )


def _off_cpu_kernels(text: str) -> str:
    """``text`` as a GPU runs it: an ``int8`` copy (fbgemm/oneDNN kernels, the CPU's) becomes the
    model it copies, with its other options."""
    spec = parse_spec(text)
    if spec.quant != "int8":
        return text
    return str(spec.model_copy(update={"options": tuple(o for o in spec.options if o[0] != "quant")}))


FAMILIES: dict[str, DemoFamily] = {
    # where hierarchies can pay: replies long enough to write a function's body, where the lookup
    # runs dry and the 0.5B's int8 copy fills in (on the first 48 tokens, which restate the stub,
    # the lookup alone wins)
    "qwen": DemoFamily(
        models="ngram,qwen2.5-coder-0.5b:quant=int8,qwen2.5-coder-1.5b",
        prompts="humaneval",
        max_prompts=6,
        validate_prompts=3,
        max_new_tokens=128,
        latency_grid=(1, 2, 4, 8),
        context_lens=(64, 256),
        repeats=1,
        measured=(("bf16", 3.1, "a 2-core AMD EPYC with AVX512-BF16"),),
        convert_minutes=4.0,
        # on llama.cpp a pass over a few tokens costs nearly as many one-token passes: a lookup that
        # drafts only on a 3-token match is the candidate that pays there. The 0.5B as packaged
        # (Q4_K_M) is left out: its Q4_0 copy passes in 0.65 of its time with the same acceptance
        llamacpp_models="ngram,ngram:min=3,qwen2.5-coder-0.5b:quant=q4_0,qwen2.5-coder-1.5b",
    ),
    # the quick one: untrained early exits of a 135M model, where mostly the n-gram lookup pays
    "smollm2": DemoFamily(
        models="ngram,smollm2-135m:layers=2,smollm2-135m:layers=4,smollm2-135m:layers=8,smollm2-135m",
        prompts=None,
        max_prompts=12,
        validate_prompts=6,
        max_new_tokens=64,
        latency_grid=(1, 2, 4, 8, 16),
        context_lens=(64, 256),
        llamacpp_models="ngram,smollm2-135m:quant=q4_0,smollm2-135m",
    ),
}


class Stages(Protocol):
    """Progress of a long workflow: one bar per stage (the CLI draws them with tqdm)."""

    def start(self, desc: str, total: int | None = None) -> None: ...
    def total(self, n: int) -> None: ...
    def step(self, n: int = 1) -> None: ...
    def close(self) -> None: ...


class _Quiet:
    def start(self, desc: str, total: int | None = None) -> None: ...
    def total(self, n: int) -> None: ...
    def step(self, n: int = 1) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class DemoReport:
    """The three stages' reports and the figure's path."""

    profile: ProfileSummary
    solve: SolveReport
    validation: ValidationReport
    plot: str

    def to_dict(self) -> dict:
        return {
            "profile": self.profile.to_dict(),
            "solve": self.solve.to_dict(),
            "validation": self.validation.to_dict(),
            "plot": self.plot,
        }

    @property
    def conclusion(self) -> str:
        """One line: the pick's measured speed-up, and over the best single drafter when it ran."""
        plans = self.validation.plans
        best = next((p for p in plans if p.kind == "best"), plans[0])
        singles = [p for p in plans if p.kind == "single"]
        tail = f"; over the best single drafter {singles[0].measured_ms_per_token / best.measured_ms_per_token:.2f}x" if singles else ""
        return f"the solver's pick: {best.measured_speedup:.2f}x the speed of autoregressive decoding{tail}. Figure: {self.plot}"


def run_demo(
    db: Engine | Callable[[], Engine],
    loader: ModelLoader,
    family: DemoFamily = FAMILIES["qwen"],
    dtype: Dtype = "fp32",
    plot_file: Path = Path("hsd-plan-demo.png"),
    say: Callable[[str], None] = lambda _text: None,
    show: Callable[[ProfileSummary], None] = lambda _summary: None,
    stages: Stages | None = None,
    allow_busy: bool = False,
) -> DemoReport:
    """Profile the ``family``'s candidates on its prompts, solve, validate the pick and the best
    single drafter against autoregressive decoding on held-out prompts, write the figure.

    What the database already holds is reused, so a second run only validates again. ``say``
    gets a line at each stage, ``show`` the profile summary when profiling ends. ``db`` may
    be a function that opens the database: it is called once the candidates are loaded and
    checked, so that a refusal leaves no database behind. ``allow_busy``: keep latency samples
    timed while other work held the cores instead of timing them again (see :mod:`.profiling.guard`).
    """
    bars = stages or _Quiet()
    f = family
    prompts = split(load_prompts(f.prompts), "profile", f.max_prompts)
    held_out = split(load_prompts(f.prompts), "validate", f.validate_prompts)
    config = f.profile_config(dtype).model_copy(update={"allow_busy": allow_busy})
    names = {parse_spec(spec).name for spec in config.models}
    converted = all(is_converted(name) for name in names & PACKAGED.keys())
    expected = f.expected(dtype, converted)
    if expected:
        say(expected)
    prepared = prepare_profile(config, prompts, loader)
    if prepared.target != parse_spec(config.models[-1]):  # the solve below asks for the last one as target
        raise ChainError(
            f"the target {config.models[-1]} (the last of --models) is not the dearest candidate: {prepared.target} costs more; "
            "list the target last"
        )
    db = db() if callable(db) else db
    runs = "llama.cpp, the GGUF files as packaged" if loader.engine == "llamacpp" else dtype
    say(f"1/3 profiling {len(config.models)} models on {len(prompts.prompts)} prompts of {prompts.name} ({runs})")
    bars.start("profiling")
    outcome = run_profile(db, config, prompts, loader, progress=bars.step, total=bars.total, prepared=prepared, note=say)
    bars.close()
    summary = profile_summary(db, outcome)
    show(summary)
    say("\n2/3 solving")
    solved = solve_and_store(db, target=config.models[-1], workload=prompts.name, config=SolveConfig(max_new_tokens=f.max_new_tokens))
    best = solved.best.plan
    say(f"best: {best.label}, predicted {best.prediction.ms_per_token:.1f} ms/token ({best.prediction.speedup:.2f}x)")
    say("\n3/3 validating on held-out prompts")
    solve, plans = select_plans(db, (), "best")
    bars.start("validating")
    report = run_validation(db, loader, solve, plans, held_out, f.max_new_tokens, f.repeats, progress=bars.step, total=bars.total)
    bars.close()
    plot_validation(report, plot_file)
    return DemoReport(summary, solved, report, str(plot_file))
