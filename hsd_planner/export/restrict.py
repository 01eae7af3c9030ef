"""The best plan a serving stack can express: the exact solver, run on the candidates and shapes
the stack can load and chain.

A stack that cannot run the solver's pick as solved (more than one drafter level, a draft tree,
a model variant it cannot load, an n-gram drafter it lacks) does not get the pick cut down to fit
- a two-level hierarchy minus its middle level is rarely the best one-level plan - but the
optimum of the same solve over what it can express. Pure: a :class:`Profile` in, a :class:`Plan` out.
"""

from __future__ import annotations

from collections.abc import Sequence

from hsd_runtime.terms.choices import GGUF_QUANTS
from hsd_runtime.terms.shape import TreeShape
from hsd_runtime.terms.spec import parse_spec

from ..choices import AcceptanceModel
from ..plan import Plan, Profile, SolveConfig, predict, solve
from .stacks import Stack

__all__ = ["restricted_solve", "restrictions", "unloadable"]


def unloadable(name: str, lookup: bool, stack: Stack) -> str | None:
    """Why ``stack`` cannot run the drafter ``name`` (None: it can)."""
    spec = parse_spec(name)
    if spec.is_bpd:  # the stacks' own heads (Medusa, EAGLE, MTP) are trained their way, not loaded from hsd-plan's
        return f"it cannot load hsd-plan's block-draft heads {name}"
    if spec.steer is not None:  # no stack adds vectors from the verifier into a drafter's layers
        return f"it cannot steer the drafter {name}"
    if lookup:
        if not stack.ngram:
            return f"it has no n-gram drafter ({name})"
        if spec.keeps_state and not stack.lookup_rules:  # a lookup that keeps state between rounds is llama-server's alone
            return f"it has no drafter that keeps state between rounds as {name} does"
        if spec.map_rule and stack.lookup_rules:
            # measured (benchmarks/bench_server_state.py): the server begins each request on the
            # key map its slot's last request left, whose positions mostly hide the new prompt
            return (
                f"it keeps a slot's {spec.ngram_rule} key map from one request to the next and, past the first, finds little "
                f"of the prompt, so it drafts far less than {name} was profiled to"
            )
        if stack.lookup_rules and spec.ngram_rule not in stack.lookup_rules:
            rules = " or ".join(f"ngram:rule={r}" for r in stack.lookup_rules)
            return f"its n-gram drafters do not look up as {name} does; profile {rules} to plan for them"
        return None
    if spec.layers is not None and not stack.early_exit:
        return f"it cannot load the early exit {name}"
    if spec.quant is not None and not (stack.gguf_files if spec.quant in GGUF_QUANTS else stack.int8_copy):
        return f"it cannot load hsd-plan's {spec.quant} copy {name}"
    if spec.vocab is not None:  # no stack trims a drafter model's head (SGLang's token map is EAGLE's only)
        return f"it cannot trim the head of {name}"
    if spec.p_min is not None and not stack.p_min:
        return f"it cannot end a draft on the drafter's top share among its ten likeliest tokens as {name} does"
    return None


def restrictions(profile: Profile, plan: Plan, stack: Stack) -> list[str]:
    """Why ``stack`` cannot run ``plan`` as solved; empty when it can."""
    reasons = []
    if plan.depth > stack.max_depth:
        reasons.append(f"it runs {stack.max_depth} drafter level{'s' if stack.max_depth != 1 else ''}, the plan has {plan.depth}")
    trees = [w for w in plan.widths if isinstance(w, TreeShape)]
    if trees and not stack.trees:
        reasons.append(f"it drafts no tree like {trees[0]} from a drafter model")
    for name in plan.chain[:-1]:
        reason = unloadable(name, profile.model(name).lookup, stack)
        if reason is not None:
            reasons.append(reason)
    return reasons


def restricted_solve(
    profile: Profile,
    stack: Stack,
    t_max: int,
    acceptance: AcceptanceModel,
    contexts: int | Sequence[int],
    max_depth: int | None = None,
    max_new_tokens: int | None = None,
    avoid: Sequence[str] = (),
) -> Plan:
    """The latency-optimal plan for ``profile.target`` among those ``stack`` can express: at most
    its drafter levels (and ``max_depth``), chains only unless it drafts trees, drafters it can
    load and ``avoid`` does not name; autoregressive decoding when no such drafter was profiled
    against the target."""
    target = profile.target
    usable = [m.name for m in profile.models if m.name != target and m.name not in avoid and unloadable(m.name, m.lookup, stack) is None]
    exclude = [m.name for m in profile.models if m.name != target and m.name not in usable]
    depth = stack.max_depth if max_depth is None else min(stack.max_depth, max_depth)
    pairs = profile.pairs(acceptance)
    if depth == 0 or not any((name, target) in pairs for name in usable):
        return Plan((target,), (), predict(profile, [target], [], acceptance, contexts, max_new_tokens))
    config = SolveConfig(
        t_max=t_max,
        top_k=1,
        max_depth=depth,
        acceptance=acceptance,
        exclude=tuple(exclude),
        trees=stack.trees,
        max_new_tokens=max_new_tokens,
    )
    return solve(profile, config, contexts).best
