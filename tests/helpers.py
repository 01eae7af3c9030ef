"""Helpers shared by the test modules: the CLI run in-process, its one-line refusals, a greedy
``generate --check``, and the options that make a profile of the tiny models quick. Tiny models themselves are built by
:mod:`tests.tiny`; shared fixtures (the tiny model directories, a database per test) are in
``conftest.py``."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from typing import Any

from click.testing import CliRunner, Result

from hsd_planner.cli import cli

# a profile of the tiny models in seconds: two pass sizes, one short context, one round
QUICK_PROFILE = ["--latency-grid", "1,4", "--context-lens", "8", "--repeats", "1", "--max-new-tokens", "6", "--device", "cpu"]
# the same with the pass sizes and contexts a solve and a validation of widths up to 8 read
SOLVABLE_PROFILE = ["--latency-grid", "1,2,4,8", "--context-lens", "8,32", "--repeats", "1", "--max-new-tokens", "6", "--device", "cpu"]


def run(*args: object, env: dict[str, str] | None = None) -> Result:
    """``hsd-plan ARGS`` in-process (every argument as a string), as a user would type it."""
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def one_line_error(result: Result, fragment: str, exit_code: int | None = None) -> None:
    """The command was refused with one line ``Error: ...`` naming ``fragment``, never a traceback."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert fragment in lines[0], lines[0]
    if exit_code is not None:
        assert result.exit_code == exit_code, (result.exit_code, lines[0])


def fp32_check(chain: str, widths: object, max_new_tokens: int, prompt: str = "w1 w2 w3") -> dict:
    """``hsd-plan generate --check`` of ``chain`` in fp32 on a tiny-model prompt: the check's report
    (``identical``: the chain's greedy tokens are the target's own); the run must succeed."""
    result = run(
        "generate",
        "--chain",
        chain,
        "--widths",
        widths,
        "--prompt",
        prompt,
        "--max-new-tokens",
        max_new_tokens,
        "--check",
        "--json",
        "--dtype",
        "fp32",
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["check"]


@contextlib.contextmanager
def deadline(seconds: int = 60) -> Iterator[None]:
    """Fail instead of hanging: a FIFO opened for reading (or writing) blocks until its other end comes."""

    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"the command ran longer than {seconds} s (blocked?)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def replay_ngram_mod(prompt: list[int], out: list[int], n: int, width: int, n_min: int, made: int = 0) -> tuple[int, int, int]:
    """(rounds, tokens drafted, tokens accepted) of a greedy generation ``out`` after ``prompt``,
    replayed round by round as llama-server runs ngram-mod (:func:`replay_table`)."""
    from hsd_runtime.decoding.ngram_mod import ModTable

    return replay_table(ModTable(n), prompt, out, width, n_min, made)


def map_server_flags(rule: str, n: int, k: int, hits: int = 1) -> list[str]:
    """llama-server's flags of ``ngram-map-k`` or ``ngram-map-k4v`` with key size ``n``, m-gram
    size ``k`` and min hits ``hits`` (no export writes them: the server carries a slot's key map
    between requests).

    >>> map_server_flags("ngram-map-k", 4, 16)
    ['--spec-type', 'ngram-map-k', '--spec-ngram-map-k-size-n', '4', '--spec-ngram-map-k-size-m', '16', '--spec-ngram-map-k-min-hits', '1']
    """
    flag = f"--spec-{rule}"
    return ["--spec-type", rule, f"{flag}-size-n", str(n), f"{flag}-size-m", str(k), f"{flag}-min-hits", str(hits)]


def replay_table(table: Any, prompt: list[int], out: list[int], width: int, n_min: int = 0, made: int = 0) -> tuple[int, int, int]:
    """(rounds, tokens drafted, tokens accepted) of a greedy generation ``out`` after ``prompt``,
    replayed round by round as llama-server runs a lookup that keeps state (``table``: a
    :class:`~hsd_runtime.decoding.ngram_mod.ModTable` or :class:`~hsd_runtime.decoding.ngram_map.KeyMap`):
    begun on the prompt, a draft of up to ``width`` tokens per round from the text so far, cut at
    the tokens still to make less one, accepted while it agrees with ``out``, its acceptance told back after a round
    that drafted. ``made``: the tokens of ``out`` made before the first round (llama-server
    samples the first from its prefill: 1)."""
    from hsd_runtime.decoding.cache import common_prefix

    table.begin(prompt)
    rounds, drafted, accepted = 0, 0, 0
    while made < len(out):
        text = prompt + out[:made]
        draft = table.draft(text[:-1], text[-1], width, n_min)[: len(out) - made - 1]
        a = common_prefix(draft, out[made:])
        if draft:
            table.accept(a)
        rounds, drafted, accepted, made = rounds + 1, drafted + len(draft), accepted + a, made + a + 1
    return rounds, drafted, accepted
