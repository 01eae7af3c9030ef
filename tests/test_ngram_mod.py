"""``ngram:rule=ngram-mod``: llama-server's ngram-mod lookup (a hashed n-gram table walked token by
token), its spec, its table's rules, and the executor's drafts against a replay of the server's
rounds. (That it is the server's lookup token for token is checked against llama-server itself in
``tests/test_llama_server.py``; the profiler's rounds of it against the executor's in
``tests/test_stateful_profile.py``.)"""

import pytest

from hsd_runtime import Hierarchy, ModelSpecError, NgramDrafter, parse_spec
from hsd_runtime.decoding.ngram_mod import ModTable
from tests.helpers import replay_ngram_mod
from tests.tiny import tiny_llama


def test_the_spec_takes_the_servers_n_and_an_n_min():
    spec = parse_spec("ngram:rule=ngram-mod")
    assert (spec.mod_rule, spec.ngram_order, spec.ngram_min, spec.n_min) == (True, 24, 24, 0)
    spec = parse_spec("ngram:rule=ngram-mod:n=8:nmin=4")
    assert (spec.ngram_order, spec.n_min, str(spec)) == (8, 4, "ngram:rule=ngram-mod:n=8:nmin=4")
    drafter = NgramDrafter.of(spec)
    assert (drafter.stateful, drafter.n, drafter.n_min) == ("ngram-mod", 8, 4)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("ngram:rule=ngram-simple", "use rule=llama-server"),
        ("ngram:rule=ngram-mod:min=2", "drop min="),
        ("ngram:rule=llama-server:nmin=2", "drop nmin="),
        ("ngram:rule=ngram-mod:nmin=0", "integer from 1"),
        ("ngram:rule=ngram-mod:pmin=0.5", "ngram takes only"),
    ],
)
def test_a_bad_spec_is_refused_in_one_line(text, fragment):
    with pytest.raises(ModelSpecError, match=fragment) as refused:
        parse_spec(text)
    assert "\n" not in str(refused.value)


def test_the_newest_ngrams_join_the_table_once_more_than_32_wait():
    """begin adds the prompt's n-grams; the text's later ones wait until more than 32 have come."""
    for filler, found in ((26, []), (27, [9, 10, 11])):
        table = ModTable(2)
        table.begin([1, 2, 3])  # "1 2" -> 3; the n-grams from position 1 on wait
        history = [1, 2, 3, 7, 8, 9, *range(10, 10 + filler), 7]  # "7 8" -> 9 at position 3
        assert table.draft(history, 8, n_max=3) == found, filler


def test_the_latest_occurrence_wins_and_n_min_drops_a_short_walk():
    table = ModTable(2)
    table.begin([5, 6, 1, 5, 6, 2, 4])  # "5 6" -> 1, then -> 2; "6 2" -> 4; "2 4" waits (nothing after it)
    assert table.draft([9, 9, 5], 6, n_max=5) == [2, 4]  # "2 4": an empty slot ends the walk
    assert table.draft([9, 9, 5], 6, n_max=5, n_min=3) == []  # ended before 3 tokens: dropped
    assert table.draft([9, 9, 5], 6, n_max=2, n_min=3) == [2, 4]  # reached n_max: kept


def test_five_low_rounds_in_a_row_empty_the_table_and_the_next_draft_adds_the_text_again():
    table = ModTable(2)
    prompt = [1, 2, 3, *range(100, 140)]
    table.begin(prompt)  # added up to position 41
    history = [*prompt, 7, 8, 9, *range(10, 30), 1]  # 67 tokens: "7 8" (at 43) waits until 74
    assert table.draft(history, 8, n_max=2) == []
    for round_ in range(5):
        assert table.draft(history, 2, n_max=1) == [3]  # the prompt's "1 2" -> 3
        assert table.low == round_
        table.accept(0)  # none of it accepted: a low round
    assert table.low == 0 and not table.slots and table.added == 0
    assert table.draft(history[:-1] + [7], 8, n_max=3) == [9, 10, 11]  # the whole text added again


@pytest.mark.parametrize("n, width, n_min", [(2, 4, 0), (2, 6, 3), (3, 3, 5)])
def test_the_executor_drafts_what_the_server_would_and_keeps_the_targets_text(n, width, n_min):
    """The executor's rounds, drafted and accepted tokens are a replay of the server's rounds over
    its own text (the table, its chunked adds and its resets carried round to round), and its
    greedy text is the target's own."""
    model = tiny_llama(0, layers=2)  # its greedy text falls into a loop after a dozen tokens
    prompt, new = [3, 7, 11, 7, 3], 96
    out = Hierarchy([NgramDrafter(n=n, stateful="ngram-mod", n_min=n_min), model], [width]).generate(prompt, new)
    assert out.tokens == Hierarchy([model], []).generate(prompt, new).tokens
    level = out.levels[0]
    assert level.proposed > 0 and level.accepted > 0
    assert (out.target_rounds, level.proposed, level.accepted) == replay_ngram_mod(prompt, out.tokens, n, width, n_min)
