"""How a solve is asked for: one typed place for every option and its default."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hsd_runtime.terms.limits import MAX_BATCH, MAX_TREE_NODES, MAX_WIDTH

from ..choices import AcceptanceModel
from ..limits import MAX_LENGTH

__all__ = ["DEFAULT_CONTEXT", "SOLVE_DEFAULTS", "TREE_BUDGET_LIMIT", "T_MAX_LIMIT", "SolveConfig"]

# the context a solve reads cost curves at when neither the caller nor the workload gives one
DEFAULT_CONTEXT = 256

# the largest --t-max: the runtime's own bound on widths (the solver's DAG grows as t_max^2)
T_MAX_LIMIT = MAX_WIDTH

# the largest --tree-budget: the runtime's own bound on the nodes of one tree (its attention mask)
TREE_BUDGET_LIMIT = MAX_TREE_NODES


class SolveConfig(BaseModel):
    """The options of :func:`hsd_planner.plan.solve` and ``hsd-plan solve``, with their defaults.

    >>> SolveConfig(t_max=4).model_copy(update={"top_k": 1}).top_k
    1
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    t_max: int = Field(8, ge=1, le=T_MAX_LIMIT, description="the largest width tried at any level")
    top_k: int = Field(5, ge=1, description="how many hierarchies to return, best first")
    max_depth: int | None = Field(None, ge=0, description="the most drafter levels (None: no limit)")
    acceptance: AcceptanceModel = Field("empirical", description="run-length model: measured P(G >= g), or alpha^g")
    context_len: int | None = Field(
        None,
        ge=1,
        description="context length the cost curves are read at; None: each of the workload's prompts plus half its continuation",
    )
    trees: bool = Field(
        True, description="let the first drafter draft a tree (RSD) for a verifier with a measured sibling-acceptance curve"
    )
    tree_budget: int = Field(
        16, ge=2, le=TREE_BUDGET_LIMIT, description="the most nodes of a draft tree (what one verification pass checks besides the root)"
    )
    exclude: tuple[str, ...] = Field((), description="candidates not to use")
    require: tuple[str, ...] = Field((), description="models every returned hierarchy must contain")
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_LENGTH,
        description="rank plans by the time of a generation of this many new tokens (the last round cut short); None: the steady state",
    )
    batch_size: int = Field(1, ge=1, le=MAX_BATCH, description="sequences decoded in lockstep: costs read at c(n, b), chains only above 1")


SOLVE_DEFAULTS = SolveConfig()
