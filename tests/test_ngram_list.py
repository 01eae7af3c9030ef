"""``ngram:rule=llama-server+ngram-mod``: llama-server's ``--spec-type ngram-simple,ngram-mod``, the
first of the two lookups that drafts anything drafting the round. Its spec, the order of the two,
whom a round's acceptance is told, the executor's rounds against a replay, and its export. (That it
is the server's list token for token is checked against llama-server itself in
``tests/test_llama_server.py``; the profiler's rounds of it against the executor's in
``tests/test_stateful_profile.py``.)"""

import pytest

from hsd_planner.export.stacks import Served, stack_for
from hsd_runtime import Hierarchy, ModelSpecError, NgramDrafter, parse_spec, server_lookup
from hsd_runtime.decoding.ngram_list import SimpleThenMod
from hsd_runtime.decoding.ngram_mod import ModTable
from tests.helpers import replay_table
from tests.tiny import tiny_llama


def test_the_spec_takes_ngram_simples_n_and_ngram_mods_n_match_and_n_min():
    spec = parse_spec("ngram:rule=llama-server+ngram-mod")
    assert (spec.keeps_state, spec.walks_mod, spec.server_rule) == (True, True, False)
    assert (spec.ngram_order, spec.n_match, spec.n_min) == (12, 24, 0)  # the server's defaults
    spec = parse_spec("ngram:rule=llama-server+ngram-mod:n=8:nmatch=12:nmin=4")
    drafter = NgramDrafter.of(spec)
    assert (drafter.stateful, drafter.n, drafter.n_match, drafter.n_min) == ("llama-server+ngram-mod", 8, 12, 4)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("ngram:nmatch=12", "add it or drop nmatch="),
        ("ngram:rule=ngram-mod:nmatch=12", "add it or drop nmatch="),
        ("ngram:rule=llama-server+ngram-mod:nmatch=0", "integer from 1"),
        ("ngram:rule=llama-server+ngram-mod:min=2", "drop min="),
        ("ngram:rule=ngram-simple,ngram-mod", r"or rule=llama-server\+ngram-mod"),
        ("qwen2.5-coder-0.5b:nmatch=4", "nmatch="),
    ],
)
def test_a_bad_spec_is_refused_in_one_line(text, fragment):
    with pytest.raises(ModelSpecError, match=fragment) as refused:
        parse_spec(text)
    assert "\n" not in str(refused.value)


def test_ngram_mod_walks_only_the_rounds_ngram_simple_left_empty_and_its_table_lags_by_them():
    """A round ngram-simple drafts never reaches ngram-mod: its table adds the text's n-grams only
    when it is asked, so a list's ngram-mod is a ModTable asked in those rounds alone."""
    prompt = [50, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    text = [*prompt, *range(20, 60)]  # 40 new tokens: past the 32 that wait before an add
    listed, alone = SimpleThenMod(n=3, n_match=2, width=4), ModTable(2)
    listed.begin(prompt)
    alone.begin(prompt)
    for cut in range(len(prompt) + 1, len(text) + 1):
        history, sampled = text[: cut - 1], text[cut - 1]
        simple = server_lookup([*history, sampled], 3, 4)
        drafted = listed.draft(history, sampled, 4)
        assert listed.by_mod == (not simple)
        assert drafted == (simple or alone.draft(history, sampled, 4))
    # a text that repeats "1 2 3 4": ngram-simple drafts, and ngram-mod's table is not asked
    history = [*text, 1, 2]
    assert listed.draft(history, 3, 4) == server_lookup([*history, 3], 3, 4) == [4, 5, 6, 7]
    assert not listed.by_mod and listed.mod.added == alone.added


def test_a_rounds_acceptance_is_told_to_ngram_mod_only_when_it_drafted():
    """Five low rounds drafted by ngram-simple leave ngram-mod's table alone (the server tells the
    others a round's acceptance as another's, which ngram-mod ignores); five of its own empty it."""
    listed = SimpleThenMod(n=3, n_match=2, width=3)
    prompt = [8, 9, 1, 2, 3, 4, 0, 5, 6, 7]
    listed.begin(prompt)
    for _ in range(5):
        assert listed.draft([*prompt, 9, 1], 2, 3) == [3, 4, 0] and not listed.by_mod  # "9 1 2" recurs
        listed.accept(0)
    assert listed.mod.slots and listed.mod.low == 0
    for round_ in range(5):
        assert listed.draft([*prompt, 8, 5], 6, 3) == [7] and listed.by_mod  # "8 5 6" never occurred; ngram-mod's "5 6" did
        assert listed.mod.low == round_
        listed.accept(0)
    assert not listed.mod.slots


@pytest.mark.parametrize("n, n_match, width, n_min", [(3, 2, 4, 0), (4, 2, 6, 2), (2, 3, 3, 0)])
def test_the_executor_drafts_what_the_server_would_and_keeps_the_targets_text(n, n_match, width, n_min):
    """The executor's rounds, drafted and accepted tokens are a replay of the server's rounds over
    its own text, and its greedy text is the target's own."""
    model = tiny_llama(0, layers=2)
    prompt, new = [3, 7, 11, 7, 3], 96
    spec = parse_spec(f"ngram:rule=llama-server+ngram-mod:n={n}:nmatch={n_match}" + (f":nmin={n_min}" if n_min else ""))
    out = Hierarchy([NgramDrafter.of(spec), model], [width]).generate(prompt, new)
    assert out.tokens == Hierarchy([model], []).generate(prompt, new).tokens
    level = out.levels[0]
    assert level.proposed > 0 and level.accepted > 0
    replayed = replay_table(SimpleThenMod(n, n_match, width), prompt, out.tokens, width, n_min)
    assert (out.target_rounds, level.proposed, level.accepted) == replayed


def test_the_export_names_both_types_with_the_plans_width_for_each():
    served = Served("t.gguf", "ngram", True, 15, 8, "greedy", None, n_min=2, ngram_rule="llama-server+ngram-mod", n_match=12)
    args = stack_for("llamacpp").render(served).payload["server_args"]
    assert args == [
        "--spec-type", "ngram-simple,ngram-mod",
        "--spec-ngram-simple-size-n", "8", "--spec-ngram-simple-size-m", "15",
        "--spec-ngram-mod-n-match", "12", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "15",
    ]  # fmt: skip
