"""Time the test command and measure its peak resident memory, natively or as on an AVX2-only CPU.

    python -m benchmarks.bench_tests                      # the README's test command, this CPU
    python -m benchmarks.bench_tests --cpu avx2           # the same under the AVX2 view
    python -m benchmarks.bench_tests -- -m "not slow"     # extra pytest arguments after --
    python -m benchmarks.bench_tests --cpu avx2 --command "bash .ci/run"   # all of CI, install included
    python -m benchmarks.bench_tests --empty-cache        # as on a new machine: nothing converted or extracted yet

The command runs as CI runs it (``python -m pytest -ra --durations=N``). Every ``--interval``
seconds the resident memory of its whole process tree (pytest, its xdist workers and the commands
its tests start) is summed; the peak of that sum is what the workers need side by side. What each
process held at that moment, and each one's own peak, say which worker held what. Wall time, the
peaks, pytest's closing line and the slowest tests go to ``--out`` as JSON beside the log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import machine
from hsd_runtime import cpu_capability

# The AVX2 view (tests/conftest.py): capability probes answer as an AVX2-only CPU, and the
# kernels of ATen and oneDNN dispatch as there.
AVX2_ENV = {"HSD_PLAN_TEST_CPU": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
GIB = 1024**3


def tree_rss(root: psutil.Process) -> dict[int, tuple[int, psutil.Process]]:
    """Resident bytes of ``root`` and each of its descendants, by pid."""
    per: dict[int, tuple[int, psutil.Process]] = {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return per
    for proc in procs:
        try:
            per[proc.pid] = (proc.memory_info().rss, proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return per


def role(proc: psutil.Process, root: psutil.Process, names: dict[int, str]) -> str:
    """What a process of the tree is: pytest itself, an xdist worker, or a command a test started
    (named by its worker, which it inherits in PYTEST_XDIST_WORKER, and its command line)."""
    if proc.pid in names:
        return names[proc.pid]
    try:
        if proc.pid == root.pid:
            name = "pytest"
        elif "exec(eval(sys.stdin.readline()))" in " ".join(proc.cmdline()):
            name = f"worker {proc.pid}"
        else:
            worker = proc.environ().get("PYTEST_XDIST_WORKER", "?")
            name = f"{worker} child {proc.pid}: {' '.join(proc.cmdline())[:100]}"
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        name = f"gone {proc.pid}"
    names[proc.pid] = name
    return name


def run(args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if args.cpu == "avx2":
        env.update(AVX2_ENV)
    if args.empty_cache:  # a model cache of the run's own, empty: every conversion and extraction a new machine makes
        env["HSD_PLAN_CACHE"] = tempfile.mkdtemp(prefix="hsd-plan-cache-")
    command = (
        shlex.split(args.command)
        if args.command
        else [sys.executable, "-m", "pytest", "-ra", f"--durations={args.durations}", *args.pytest_args]
    )
    log_path = args.out.with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    peak_total, peak_at = 0, 0.0
    at_peak: dict[str, int] = {}  # what each process held when the sum peaked
    own_peak: dict[str, int] = {}  # each process's own peak
    names: dict[int, str] = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            per = {role(p, root, names): rss for rss, p in tree_rss(root).values()}
            total = sum(per.values())
            if total > peak_total:
                peak_total, peak_at, at_peak = total, time.perf_counter() - start, per
            for name, rss in per.items():
                own_peak[name] = max(own_peak.get(name, 0), rss)
            time.sleep(args.interval)
    wall = time.perf_counter() - start
    if args.empty_cache:
        shutil.rmtree(env["HSD_PLAN_CACHE"], ignore_errors=True)
    text = log_path.read_text(errors="replace")
    closing = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    slowest = re.findall(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", text, flags=re.M)

    def top(values: dict[str, int]) -> dict[str, float]:
        return {k: round(v / GIB, 2) for k, v in sorted(values.items(), key=lambda kv: -kv[1])[:8]}

    return {
        "command": " ".join(command),
        "cpu_view": args.cpu,
        "env": {k: env[k] for k in AVX2_ENV if k in env},
        "empty_cache": args.empty_cache,
        "returncode": proc.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_gib": round(peak_total / GIB, 2),
        "peak_at_s": round(peak_at, 1),
        "at_peak_gib": top(at_peak),
        "own_peak_gib": top(own_peak),
        "closing_line": closing[-1] if closing else None,
        "slowest": [{"s": float(s), "when": when, "test": test} for s, when, test in slowest],
        "machine": machine(),
        "cpu_capability": cpu_capability(),
        "python": platform.python_version(),
        "log": str(log_path),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", choices=["native", "avx2"], default="native", help="the CPU the tests see (default: this one)")
    ap.add_argument("--durations", type=int, default=40, help="how many of the slowest tests pytest lists")
    ap.add_argument("--command", default=None, help="run this command line instead of the test command (e.g. 'bash .ci/run')")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between memory samples")
    ap.add_argument(
        "--empty-cache", action="store_true", help="run on an empty model cache of its own (HSD_PLAN_CACHE), as a new machine does"
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON result (default benchmarks/out/tests-CPU.json)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()
    args.out = (args.out or Path("benchmarks/out") / f"tests-{args.cpu}.json").resolve()
    result = run(args)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("slowest", "machine")}, indent=2))
    sys.exit(result["returncode"])


if __name__ == "__main__":
    main()
