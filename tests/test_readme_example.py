"""The README's Python planner example runs as written and prints the optimum.

The solver's pick must be the fastest of every hierarchy of the example's models that a brute
force over chains and widths finds with ``predict``; the best single-drafter plan the fastest of
those with one drafter; autoregressive decoding the target's own c(1). The printed lines must
be those plans.
"""

import itertools
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_planner_example_prints_the_brute_force_optimum(capsys):
    from hsd_planner.plan import predict

    block = re.search(r"### The planner, without a database.*?```python\n(.*?)```", README, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    first, second = capsys.readouterr().out.strip().splitlines()
    profile, solution = namespace["profile"], namespace["solution"]

    brute = {}
    for drafters in (["ngram"], ["small"], ["ngram", "small"]):
        for widths in itertools.product(range(1, 9), repeat=len(drafters)):
            brute[(*drafters, "big"), widths] = predict(profile, [*drafters, "big"], list(widths), context_len=64).ms_per_token
    fastest = min(brute.values())
    single = min(ms for (chain, _), ms in brute.items() if len(chain) == 2)
    best = solution.best
    assert best.prediction.ms_per_token == pytest.approx(fastest)
    assert brute[tuple(best.chain), tuple(best.widths)] == pytest.approx(fastest)
    assert solution.best_single.prediction.ms_per_token == pytest.approx(single) and len(solution.best_single.chain) == 2
    assert solution.autoregressive.prediction.ms_per_token == pytest.approx(30.0)  # the target's c(1) at context 64
    assert fastest < single < 30.0  # on these numbers a hierarchy beats every single drafter
    assert first == f"{best.chain} {best.widths} {best.prediction.ms_per_token}"
    assert second == f"{solution.best_single.chain} {solution.autoregressive.prediction.ms_per_token}"
