"""Several held-out draws of one workload, and the coverage of the predicted intervals over them.

One validation runs its plans on one held-out set of prompts, so its plans hit or miss their
intervals together: counting coverage needs several validations, each on its own draw. This
writes the validation split of a prompt set in consecutive draws of ``--size`` prompts, one JSONL
file each (``hsd-plan validate --prompts FILE`` reads them; every prompt is in its own file's
validation split too, as the split hashes each prompt's text), and sums the ``validate --json``
reports of such runs: plans above autoregressive decoding validated, how many measured inside
their predicted 90 % interval, the intervals' median width, the median |speed-up error| and the
regret of each validation.

    python -m benchmarks.held_out_draws write --prompts humaneval --draws 3 --size 4 --out /tmp/draws
    python -m benchmarks.held_out_draws summary OUT/validate-*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hsd_planner.prompts import load_prompts, split


def write_draws(prompts: str, draws: int, size: int, out: Path) -> list[Path]:
    """``draws`` files ``draw-1.jsonl``... under ``out``, each of ``size`` consecutive prompts of
    the validation split of ``prompts`` (a file, or ``humaneval``); fewer where the split runs out."""
    held = split(load_prompts(prompts), "validate").prompts
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(draws):
        part = held[i * size : (i + 1) * size]
        if len(part) < size:
            break
        path = out / f"draw-{i + 1}.jsonl"
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in part))
        files.append(path)
    return files


def summarize(reports: list[dict]) -> dict:
    """Per validation report and over all of them: plans with an interval, inside it, median width,
    median |speed-up error| as profiled and the regret."""
    rows, plans = [], []
    for r in reports:
        mine = [p for p in r["plans"] if p["kind"] != "autoregressive" and p.get("covered") is not None]
        plans += mine
        rows.append(
            {
                "validation": r["validation_id"],
                "target": r["target"],
                "prompts": r["prompt_count"],
                "history": r.get("interval_history", 0),
                "plans": len(mine),
                "inside": sum(bool(p["covered"]) for p in mine),
                "median_width": r.get("median_interval_width"),
                "median_abs_speedup_error": r.get("median_abs_speedup_error"),
                "median_abs_error": r.get("median_abs_error"),
                "regret": r.get("regret"),
            }
        )
    widths = [p["interval_width"] for p in plans if p.get("interval_width") is not None]
    return {
        "validations": rows,
        "plans": len(plans),
        "inside": sum(bool(p["covered"]) for p in plans),
        "median_width": statistics.median(widths) if widths else None,
        "median_abs_speedup_error": statistics.median(abs(p["speedup_error"]) for p in plans) if plans else None,
        "max_regret": max((r["regret"] for r in rows if r["regret"] is not None), default=None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the held-out draws as JSONL prompt files")
    w.add_argument("--prompts", default="humaneval", help="a prompt file, or humaneval [default]")
    w.add_argument("--draws", type=int, default=3)
    w.add_argument("--size", type=int, default=4, help="prompts per draw")
    w.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("summary", help="coverage over validate --json reports")
    s.add_argument("reports", nargs="+", type=Path)
    args = ap.parse_args()
    if args.cmd == "write":
        for path in write_draws(args.prompts, args.draws, args.size, args.out):
            print(path)
        return
    print(json.dumps(summarize([json.loads(p.read_text()) for p in args.reports]), indent=1))


if __name__ == "__main__":
    main()
