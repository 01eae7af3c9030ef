"""--max-prompts reads a sample spread over the whole prompt file, not its first prompts: a file
sorted by topic gives every topic its share, each smaller sample lies inside a larger one, and the
trainers' reserve is exactly what profile --max-prompts reads."""

from __future__ import annotations

from hsd_planner.prompts import PromptSet, split


def _sorted_by_topic() -> PromptSet:
    # 120 prompts of one topic, then 120 of another: the file's first 24 are all of the first
    return PromptSet("topics", tuple(f"{topic} question {i}" for topic in ("geometry", "poetry") for i in range(120)))


def test_a_sample_gives_each_part_of_a_sorted_file_its_share_in_file_order():
    every = _sorted_by_topic()
    profiled = split(every, "profile").prompts
    sampled = split(every, "profile", 24).prompts
    assert len(sampled) == 24 and set(sampled) <= set(profiled)
    assert list(sampled) == [p for p in profiled if p in set(sampled)]  # the file's order kept
    poetry = sum(p.startswith("poetry") for p in sampled)
    assert 6 <= poetry <= 18, poetry  # about half; the file's first 24 hold none
    assert sum(p.startswith("poetry") for p in profiled[:24]) == 0


def test_each_sample_holds_the_smaller_ones_and_the_trainers_leave_it_to_profile():
    every = _sorted_by_topic()
    small, large = set(split(every, "profile", 8).prompts), set(split(every, "profile", 16).prompts)
    assert small < large
    trained = set(split(every, "train", reserve=16).prompts)
    assert not trained & large and trained | large == set(split(every, "profile").prompts)
    assert split(every, "validate", 10_000).prompts == split(every, "validate").prompts  # a limit past the part: all of it
