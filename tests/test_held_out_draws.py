"""The held-out draws benchmark's files and sums: each draw is held out again by validate, and the
coverage is counted over plans with an interval only."""

from __future__ import annotations

import json

from benchmarks.held_out_draws import summarize, write_draws
from hsd_planner.prompts import load_prompts, split


def test_each_draw_is_a_run_of_the_validation_split_and_stays_held_out(tmp_path):
    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"def f{i}(x):\n    return x + {i}"}) + "\n" for i in range(80)))
    held = split(load_prompts(source), "validate").prompts
    files = write_draws(str(source), draws=100, size=3, out=tmp_path / "draws")
    assert len(files) == len(held) // 3  # a last, shorter draw is left out
    drawn = [load_prompts(f).prompts for f in files]
    assert [p for d in drawn for p in d] == list(held[: 3 * len(files)])
    # validate reads each file's own validation split: every prompt of a draw is in it
    assert all(split(load_prompts(f), "validate").prompts == d for f, d in zip(files, drawn))


def test_draws_of_a_category_hold_only_its_rows(tmp_path):
    source = tmp_path / "bench.jsonl"
    rows = [{"category": "qa" if i % 2 else "math", "prompt": f"question {i}: what is {i} + {i}?"} for i in range(120)]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = write_draws(str(source), draws=100, size=2, out=tmp_path / "draws", category="qa")
    qa = {r["prompt"] for r in rows if r["category"] == "qa"}
    drawn = [p for f in files for p in load_prompts(f).prompts]
    assert files and set(drawn) <= qa
    assert drawn == list(split(load_prompts(source, "qa"), "validate").prompts[: 2 * len(files)])


def _report(vid: int, covered: list[bool | None], regret: float) -> dict:
    plans = [{"kind": "autoregressive", "covered": None, "interval_width": None, "speedup_error": 0.0}]
    plans += [
        {"kind": "top", "covered": c, "interval_width": 0.2 + 0.1 * i, "speedup_error": -0.01 * (i + 1)} for i, c in enumerate(covered)
    ]
    return {"validation_id": vid, "target": "t", "prompt_count": 4, "interval_history": 0, "median_interval_width": 0.3,
            "median_abs_speedup_error": 0.02, "median_abs_error": 0.03, "regret": regret, "regret_untied": 0.0, "plans": plans}  # fmt: skip


def test_the_summary_counts_plans_with_an_interval_and_keeps_the_worst_regret():
    got = summarize([_report(1, [True, False, None], 0.0), _report(2, [True, True], 0.015)])
    assert (got["plans"], got["inside"]) == (4, 3)  # the plan without an interval and autoregressive decoding left out
    assert [v["inside"] for v in got["validations"]] == [1, 2]
    assert (got["max_regret"], got["max_regret_untied"]) == (0.015, 0.0)
    assert abs(got["median_width"] - 0.25) < 1e-9  # widths 0.2, 0.3, 0.2, 0.3
    assert abs(got["median_abs_speedup_error"] - 0.015) < 1e-9
