"""Other work on the machine: /proc/stat parsed, windows judged, and the sweep's samples from a busy
window timed again (or the machine refused) while profiling; validation says it ran on a busy machine."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from typing import ClassVar

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from hsd_planner.cli.render import format_validation
from hsd_planner.errors import BusyMachineError, HSDError
from hsd_planner.plan import Plan, Prediction
from hsd_planner.profiling import ProfileConfig, run_profile, runner, sweep
from hsd_planner.profiling.contention import (
    OTHER_LIMIT,
    CoreTimes,
    Load,
    Snapshot,
    combine,
    load_between,
    parse_cpu_lines,
    parse_running,
)
from hsd_planner.profiling.contention import probe as real_probe  # bound before the suite's fixture stubs it
from hsd_planner.profiling.guard import Guard
from hsd_planner.prompts import load_prompts
from hsd_planner.store import Latency, open_db
from hsd_planner.validation import LevelResult, PlanResult, ValidationReport
from hsd_runtime import ModelLoader

STAT = """cpu  4000 10 1000 20000 50 0 40 300 0 0
cpu0 2000 10 500 10000 25 0 20 100 0 0
cpu1 2000 0 500 10000 25 0 20 200 0 0
intr 12 0 0
ctxt 99
procs_running 5
procs_blocked 0
"""


def test_proc_stat_is_read_per_core_and_whole():
    assert parse_cpu_lines(STAT) == CoreTimes(busy=4000 + 10 + 1000 + 0 + 40, steal=300, total=4000 + 10 + 1000 + 20000 + 50 + 40 + 300)
    assert parse_cpu_lines(STAT, [1]) == CoreTimes(busy=2520, steal=200, total=12745)
    assert parse_cpu_lines(STAT, [0, 1]) == CoreTimes(busy=5050, steal=300, total=25400)
    assert parse_cpu_lines(STAT, [7]) is None and parse_cpu_lines("intr 1\n") is None
    assert parse_cpu_lines("cpu0 5 0 5 90\n", [0]) == CoreTimes(10, 0, 100)  # an old kernel's four fields
    assert parse_running(STAT) == 5 and parse_running("cpu 1 2 3 4\n") is None


def _snap(wall: float, own: float, busy: int, steal: int = 0, total: int | None = None, running: int | None = None) -> Snapshot:
    return Snapshot(wall, own, CoreTimes(busy, steal, busy + steal if total is None else total), running)


def test_other_work_is_the_cores_busy_time_beyond_this_process():
    start = _snap(10.0, 3.0, 1000)
    # 2 s on 2 cores at 100 ticks/s: 300 ticks busy (3 core-seconds), 2 of them this process's
    load = load_between(start, _snap(12.0, 5.0, 1300, total=1400, running=4), cores=2, threads=2, ticks_per_s=100)
    assert load.other_cores == pytest.approx(0.5) and load.contended and load.running == 4 and load.seconds == 2.0
    assert "0.5 cores of other work on 2 cores" in load.describe() and "4 threads runnable" in load.describe()
    # the same other work beside an engine that leaves a core free does not contend
    assert not load_between(start, _snap(12.0, 5.0, 1300), cores=2, threads=1, ticks_per_s=100).contended
    # this process's exact CPU time above the ticks' count is no negative load
    assert load_between(start, _snap(12.0, 6.0, 1300), cores=2, threads=2, ticks_per_s=100).other_cores == 0.0
    # just under the limit: quiet
    quiet = load_between(start, _snap(12.0, 5.0, 1200 + int(200 * OTHER_LIMIT) - 1), cores=2, threads=2, ticks_per_s=100)
    assert not quiet.contended
    # steal: 10% of the cores' time taken by the hypervisor, no other work
    stolen = load_between(start, _snap(12.0, 5.0, 1200, steal=40, total=1400), cores=2, threads=2, ticks_per_s=100)
    assert stolen.other_cores == 0.0 and stolen.steal == pytest.approx(0.1) and stolen.contended


def test_loads_combine_by_their_wall_time():
    assert combine([]) is None
    both = combine([Load(1.0, 0.0, 0.0, 2, 2, 2, False), Load(3.0, 1.0, 0.0, None, 2, 2, True)])
    assert both is not None and both.other_cores == pytest.approx(0.75) and both.contended and both.running == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_two_busy_loops_are_seen():
    """Two processes spinning beside this one, which sleeps: about two cores of other work."""
    cores = len(os.sched_getaffinity(0))
    probe = real_probe(threads=cores)  # an engine on every core: any other work contends
    assert probe is not None
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)  # the interpreters started
        start = probe.snapshot()
        time.sleep(1.0)
        load = probe.load(start)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert load.contended and load.other_cores > 1.0, load


class _Script:
    """A probe whose windows are contended as scripted: ``busy(k)`` for the k-th window judged."""

    threads = 2

    def __init__(self, busy) -> None:
        self.busy, self.judged = busy, 0

    def snapshot(self) -> Snapshot:
        return _snap(time.monotonic(), 0.0, 0)

    def load(self, start: Snapshot) -> Load:
        k, self.judged = self.judged, self.judged + 1
        contended = self.busy(k)
        return Load(1.0, 1.8 if contended else 0.0, 0.0, 4 if contended else 1, 2, 2, contended)


def test_the_guard_waits_for_a_quiet_machine_and_then_refuses_one_that_stays_busy():
    slept: list[float] = []
    notes: list[str] = []
    guard = Guard(_Script(lambda k: k in (0, 1)), waits=(1.0, 2.0), sleep=slept.append, note=notes.append)  # type: ignore[arg-type]
    guard.open()
    assert guard.keep(7) is False  # busy: taken again once a wait was quiet (the second)
    assert guard.remeasured == 7 and 0 < slept[0] <= 0.5 and slept[1:] == [1.0, 2.0]  # the short window filled up first
    assert len(notes) == 1 and "1.8 cores of other work" in notes[0]
    guard.open()
    assert guard.keep(7) is True and guard.remeasured == 7

    busy = Guard(_Script(lambda k: True), waits=(1.0, 2.0), sleep=lambda _s: None)  # type: ignore[arg-type]
    busy.open()
    with pytest.raises(BusyMachineError) as refused:
        busy.keep(3)
    message = str(refused.value)
    assert isinstance(refused.value, HSDError) and "\n" not in message
    assert "1.8 cores of other work on 2 cores" in message and "4 threads runnable" in message
    assert "--allow-busy" in message and "rerun the same command" in message

    # quiet whenever it waits, busy whenever it times: refused too, not timed again for ever
    flapping = Guard(_Script(lambda k: k % 2 == 0), waits=(1.0, 2.0), sleep=lambda _s: None)  # type: ignore[arg-type]
    with pytest.raises(BusyMachineError):
        for _ in range(10):
            flapping.open()
            flapping.keep(1)

    kept = Guard(_Script(lambda k: True), allow_busy=True, sleep=lambda _s: None)  # type: ignore[arg-type]
    kept.open()
    assert kept.keep(5) is True and kept.kept_busy == 5 and kept.remeasured == 0


class _SpellTimer:
    """10 + n ms, but 500 ms while a busy spell lasts (its first ``spell`` passes)."""

    calls: ClassVar[Counter] = Counter()
    spell: ClassVar[int] = 0
    passes: ClassVar[list[float]] = []

    def __init__(self, *_args, **_kwargs) -> None:
        pass

    def __call__(self, n: int) -> float:
        _SpellTimer.calls[n] += 1
        ms = 500.0 if len(_SpellTimer.passes) < _SpellTimer.spell else 10.0 + n
        _SpellTimer.passes.append(ms)
        return ms


class _SpellProbe(_Script):
    """Contended where the window holds a pass of the spell (as the kernel would have seen)."""

    def __init__(self) -> None:
        super().__init__(lambda _k: False)
        self.seen = 0

    def load(self, start: Snapshot) -> Load:
        busy = 500.0 in _SpellTimer.passes[self.seen :]
        self.seen = len(_SpellTimer.passes)
        return Load(1.0, 1.9 if busy else 0.0, 0.0, 3, 2, 2, busy)


def _profile(tiny_dirs, tmp_path, isolated_db, monkeypatch, spell: int, allow_busy: bool = False):
    monkeypatch.setattr(sweep, "PassTimer", _SpellTimer)
    monkeypatch.setattr(_SpellTimer, "calls", Counter())
    monkeypatch.setattr(_SpellTimer, "passes", [])
    monkeypatch.setattr(_SpellTimer, "spell", spell)
    monkeypatch.setattr(runner.contention, "probe", lambda _threads: _SpellProbe())
    monkeypatch.setattr(runner, "Guard", functools.partial(Guard, waits=(1.0, 1.0), sleep=lambda _s: None))
    config = ProfileConfig(
        models=[str(tiny_dirs["target"])], latency_grid=[1, 2, 4], context_lens=[8], repeats=3, acceptance=False, allow_busy=allow_busy
    )
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w1 w2 w3\nw4 w5 w6\n")
    db = open_db(str(isolated_db))
    return db, lambda: run_profile(db, config, load_prompts(prompts), ModelLoader(device="cpu", dtype="fp32"))


def _stored(db) -> dict[int, list[float]]:
    with Session(db) as s:
        return {r.n_tokens: list(r.samples_ms) for r in s.scalars(select(Latency))}


def test_samples_of_a_busy_window_are_timed_again(tiny_dirs, tmp_path, isolated_db, monkeypatch):
    db, run = _profile(tiny_dirs, tmp_path, isolated_db, monkeypatch, spell=2)
    out = run()
    stored = _stored(db)
    assert stored == {n: [10.0 + n] * 3 for n in (1, 2, 4)}  # three quiet samples each, none of the spell's
    # the spell fell in the first stage's window: its 9 samples were dropped and taken again
    assert out.remeasured == 9 and out.kept_busy == 0 and out.busy_checked
    assert sum(_SpellTimer.calls.values()) == 9 + 9


def test_a_machine_that_stays_busy_is_refused(tiny_dirs, tmp_path, isolated_db, monkeypatch):
    db, run = _profile(tiny_dirs, tmp_path, isolated_db, monkeypatch, spell=10**6)
    with pytest.raises(BusyMachineError, match=r"stayed busy while timing passes: 1\.9 cores of other work"):
        run()
    assert all(not samples for samples in _stored(db).values())  # nothing of the busy windows stored


def test_allow_busy_keeps_the_samples_and_counts_them(tiny_dirs, tmp_path, isolated_db, monkeypatch):
    db, run = _profile(tiny_dirs, tmp_path, isolated_db, monkeypatch, spell=2, allow_busy=True)
    out = run()
    assert out.kept_busy == 9 and out.remeasured == 0
    assert sorted(v for samples in _stored(db).values() for v in samples).count(500.0) == 2


def _report() -> ValidationReport:
    levels = [LevelResult("ngram", 5, 20, 10, 0.01), LevelResult("t", 5, 0, 0, 0.2, 3.0, 2.9)]
    auto = PlanResult(4, "autoregressive", Plan(("t",), (), Prediction(30.0, 1.0, 1.0)), 31.0, 1.0, 1.0, 5.0, 64, levels[1:])
    best = PlanResult(3, "best", Plan(("ngram", "t"), (4,), Prediction(10.0, 2.9, 3.0)), 11.0, 3.0, 31.0 / 11.0, 5.0, 64, levels)
    return ValidationReport(7, 1, "t", "w", "held", 2, 100, [90, 110], "greedy", "empirical", [best, auto], 3)


def test_a_validation_on_a_busy_machine_says_so():
    quiet = replace(_report(), contention=Load(60.0, 0.02, 0.0, 2, 2, 2, False))
    assert not quiet.busy and "warning: other work" not in format_validation(quiet)
    assert quiet.to_dict()["contention"]["other_cores"] == 0.02 and quiet.to_dict()["busy"] is False
    busy = replace(quiet, contention=Load(60.0, 1.1, 0.0, 4, 2, 2, True))
    text = format_validation(busy)
    warnings = [line for line in text.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "1.1 cores of other work on 2 cores" in warnings[0] and "not the model's" in warnings[0]
    assert busy.to_dict()["busy"] is True
    one_run = replace(quiet, plans=[replace(quiet.plans[0], busy_runs=1), *quiet.plans[1:]])
    assert one_run.busy and "contending with 1 run" in format_validation(one_run)
