"""``ngram:rule=ngram-map-k`` and ``ngram:rule=ngram-map-k4v``: llama-server's lookups whose keys
remember their last acceptance, their specs, their rules, and the executor's drafts against a
replay of the server's rounds. (That they are the server's lookups token for token is checked
against llama-server itself in ``tests/test_llama_server.py``; the profiler's rounds of them
against the executor's in ``tests/test_stateful_profile.py``.)"""

import pytest

from hsd_runtime import Hierarchy, ModelSpecError, NgramDrafter, parse_spec
from hsd_runtime.decoding.ngram_map import KeyMap
from tests.helpers import replay_table
from tests.tiny import tiny_llama


def test_the_specs_take_the_servers_n_and_a_min_hits():
    spec = parse_spec("ngram:rule=ngram-map-k")
    assert (spec.map_rule, spec.keeps_state, spec.ngram_order, spec.ngram_min, spec.min_hits) == (True, True, 12, 12, 1)
    spec = parse_spec("ngram:rule=ngram-map-k4v:n=4:hits=3")
    assert (spec.ngram_order, spec.min_hits, str(spec)) == (4, 3, "ngram:rule=ngram-map-k4v:n=4:hits=3")
    drafter = NgramDrafter.of(spec)
    assert (drafter.stateful, drafter.n, drafter.min_hits) == ("ngram-map-k4v", 4, 3)
    assert not parse_spec("ngram:rule=llama-server").keeps_state and parse_spec("ngram:rule=ngram-mod").keeps_state


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("ngram:rule=ngram-map", "rule=ngram-map-k, rule=ngram-map-k4v"),
        ("ngram:rule=ngram-map-k:hits=2", "drop hits="),
        ("ngram:rule=ngram-map-k4v:hits=0", "integer from 1"),
        ("ngram:rule=ngram-map-k:min=2", "drop min="),
        ("ngram:rule=ngram-map-k:nmin=2", "drop nmin="),
        ("qwen2.5-coder-0.5b:hits=2", "drop hits="),
    ],
)
def test_a_bad_spec_is_refused_in_one_line(text, fragment):
    with pytest.raises(ModelSpecError, match=fragment) as refused:
        parse_spec(text)
    assert "\n" not in str(refused.value)


PROMPT = [5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # "1 2" at 1, followed by 3 4 5


def test_a_keys_draft_shrinks_to_what_its_last_draft_accepted_and_never_grows():
    km = KeyMap(n=2, m=3)
    km.begin(PROMPT)
    assert km.draft([*PROMPT, 1], 2, n_max=8) == [3, 4, 5]  # a new key drafts m
    km.accept(1)
    text = [*PROMPT, 1, 2, 3, 7, 1]
    assert km.draft(text, 2, n_max=8) == [3]  # its limit is now 1
    km.accept(1)  # all of it accepted: still 1
    assert km.draft([*text, 2, 3, 9, 1], 2, n_max=8) == [3]
    km.accept(0)
    assert km.draft([*text, 2, 3, 9, 1, 2, 13, 1], 2, n_max=8) == []  # rejected at its first token: never again
    assert km.last is None  # a round that drafts nothing is not told its acceptance


def test_the_map_keeps_the_first_position_written_not_the_latest():
    """The prompt's positions are written latest first, the generated text's after: a key found
    in the map drafts what followed its latest occurrence in the prompt, not its newest one."""
    prompt = [0, 1, 2, 3, 0, 1, 2, 4, 0, 20, 21, 22, 23, 24]  # "1 2" -> 3 at 1, -> 4 at 5
    km = KeyMap(n=2, m=2)
    km.begin(prompt)
    assert km.draft([*prompt, 1], 2, n_max=8) == [4, 0]  # the latest in the prompt, at 5
    km.accept(2)
    text = [*prompt, 1, 2, 4, 0, 1, 2, 9, 9, 30, 31, 32, 33, 1]  # "1 2" -> 9 9 in the generated text
    assert km.draft(text, 2, n_max=8) == [4, 0]  # the map's position, 5, not the newest


def test_the_last_n_plus_m_positions_of_the_prompt_are_never_found_and_a_short_text_drafts_nothing():
    prompt = [30, 31, 32, 33, 34, 35, 36, 37, 7, 8, 40, 41]  # "7 8" at 8: past 12 - n - m - 1 = 7
    km = KeyMap(n=2, m=2)
    km.begin(prompt)
    text = [*prompt, 50, 51, 52, 53, 54, 7]
    assert km.draft(text, 8, n_max=8) == []  # neither the map, the prompt's search nor the text's reaches 8
    assert KeyMap(n=2, m=2).draft([1, 2, 1, 2, 1], 2, n_max=8) == []  # 5 tokens, fewer than 2n + m
    short = KeyMap(n=2, m=2)
    short.begin([9, 1, 2, 3, 4, 9])
    assert short.draft([9, 1, 2, 3, 4, 9, 1], 2, n_max=8) == [3, 4]  # 7 tokens: enough


def test_k4v_drafts_once_a_key_has_its_hits_and_one_m_gram_dominates():
    """The m-grams after the key's occurrences are counted; the most frequent must occur at least
    twice as often as the others together."""
    tail = [0, 20, 21, 22, 23, 24, 25]
    for after, drafts in (([3, 4, 3, 4], False), ([3, 4, 3], True), ([3, 3, 4, 3], True)):
        prompt = [x for a in after for x in (0, 1, 2, a, a)] + tail  # "1 2" followed by "a a" for each a
        km = KeyMap(n=2, m=2, values=True)
        km.begin(prompt)
        assert km.draft([*prompt, 1], 2, n_max=8) == ([after[-1]] * 2 if drafts else []), after
    km = KeyMap(n=2, m=2, values=True, min_hits=2)
    km.begin(prompt)
    assert km.draft([*prompt, 1], 2, n_max=8) == []  # the key's first lookup
    assert km.draft([*prompt, 1, 2, 9, 1], 2, n_max=8) == [3, 3]  # its second


@pytest.mark.parametrize("rule, n, width", [("ngram-map-k", 2, 4), ("ngram-map-k", 3, 6), ("ngram-map-k4v", 2, 3)])
def test_the_executor_drafts_what_the_server_would_and_keeps_the_targets_text(rule, n, width):
    """The executor's rounds, drafted and accepted tokens are a replay of the server's rounds over
    its own text (each key's remembered acceptance carried round to round), and its greedy text
    is the target's own."""
    model = tiny_llama(1, layers=2)  # the lookups draft about half wrong: what a round tells back matters
    prompt, new = [3, 7, 11, 7, 3], 96
    out = Hierarchy([NgramDrafter(n=n, stateful=rule), model], [width]).generate(prompt, new)
    assert out.tokens == Hierarchy([model], []).generate(prompt, new).tokens
    level = out.levels[0]
    assert level.proposed > 0 and level.accepted > 0
    replayed = replay_table(KeyMap(n, width, values=rule.endswith("k4v")), prompt, out.tokens, width)
    assert (out.target_rounds, level.proposed, level.accepted) == replayed
