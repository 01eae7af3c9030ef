"""Whether other work shared the CPU while something was timed.

A pass timed while other processes run is not the pass a plan will run: the engine's threads
wait for cores (llama.cpp's threads spin while they wait for each other, so one descheduled
thread stalls them all: a llama.cpp profile of a 1.5B model taken beside other work priced it at
2.2x the ms per token a later validation measured). A window reads the CPU time the kernel accounts to the cores this process may run on
(``/proc/stat``'s ``cpuN`` lines, those of :func:`os.sched_getaffinity`) and this process's own CPU
time (every thread: torch's, llama.cpp's) at its start and end; what the cores spent beyond this
process is other work, in cores (:class:`Load`). A window is contended when that other work
leaves the engine's threads fewer cores than they need, by more than :data:`OTHER_LIMIT` of a
core, or when the hypervisor took more than :data:`STEAL_LIMIT` of the cores' time (steal).

The thresholds come from a measurement on a 2-core cloud machine (docs/engines.md, "A busy
machine"): over windows of 0.5 s, other work read 0.00-0.06 cores with nothing started (this
process asleep or running 2 threads of matrix products; two windows of 48 caught another
tenant's job), 0.50-1.32 with one busy-loop process beside the 2 threads and 0.98-1.52 with two.
A quarter of a core lies between.

Linux only: elsewhere :func:`probe` returns None and detection says it is unavailable.
Parsing and arithmetic are pure functions of given text and numbers, so they are tested without
burning CPU.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "MIN_WINDOW_S",
    "OTHER_LIMIT",
    "STEAL_LIMIT",
    "CoreTimes",
    "Load",
    "Probe",
    "Snapshot",
    "combine",
    "load_between",
    "parse_cpu_lines",
    "parse_running",
    "probe",
]

# cores of other work beyond those the engine's threads leave free: contended above this (the
# measurement above: a quiet machine's windows at 0.06 or less, one busy loop beside two threads
# at 0.50 or more)
OTHER_LIMIT = 0.25
# of the cores' time taken by the hypervisor for other guests: contended above this (the machine
# measured showed 0-1% in every window; a twentieth of the cores' time gone is a pass 5% slower)
STEAL_LIMIT = 0.05
# the shortest window judged: /proc/stat counts in clock ticks (10 ms), so a shorter window
# quantizes too coarsely (one tick over 0.5 s on 2 cores is 0.02 cores)
MIN_WINDOW_S = 0.5


@dataclass(frozen=True)
class CoreTimes:
    """Clock ticks the kernel accounted to a set of cores since boot."""

    busy: int  # user + nice + system + irq + softirq (guest time is inside user and nice)
    steal: int  # taken by the hypervisor for other guests
    total: int  # every field: busy, steal, idle and iowait


def parse_cpu_lines(text: str, cores: Iterable[int] | None = None) -> CoreTimes | None:
    """The summed ticks of ``/proc/stat``'s ``cpuN`` lines for ``cores`` (None: the aggregate
    ``cpu`` line); None when the text has none of them.

    >>> stat = "cpu  10 1 5 100 2 0 1 3 0 0\\ncpu0 6 1 3 50 1 0 1 2 0 0\\ncpu1 4 0 2 50 1 0 0 1 0 0\\n"
    >>> parse_cpu_lines(stat)
    CoreTimes(busy=17, steal=3, total=122)
    >>> parse_cpu_lines(stat, [1])
    CoreTimes(busy=6, steal=1, total=58)
    """
    wanted = None if cores is None else {f"cpu{c}" for c in cores}
    busy = steal = total = 0
    found = False
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        if (wanted is None and fields[0] != "cpu") or (wanted is not None and fields[0] not in wanted):
            continue
        # user nice system idle iowait irq softirq steal guest guest_nice; guest and guest_nice are
        # already counted in user and nice, so they are left out of the sums
        ticks = [int(v) for v in fields[1:9]] + [0] * max(0, 9 - len(fields))
        user, nice, system, idle, iowait, irq, softirq, stolen = ticks[:8]
        busy += user + nice + system + irq + softirq
        steal += stolen
        total += user + nice + system + idle + iowait + irq + softirq + stolen
        found = True
    return CoreTimes(busy, steal, total) if found else None


def parse_running(text: str) -> int | None:
    """Threads runnable now, from ``/proc/stat``'s ``procs_running`` line (this one included).

    >>> parse_running("cpu  1 2 3 4\\nprocs_running 3\\nprocs_blocked 0\\n")
    3
    """
    for line in text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return None


@dataclass(frozen=True)
class Snapshot:
    """The machine's and this process's CPU time at one moment."""

    wall_s: float  # a monotonic clock
    own_s: float  # this process's CPU time, every thread, user and system
    cores: CoreTimes  # ticks of the cores this process may run on
    running: int | None  # threads runnable at that moment


@dataclass(frozen=True)
class Load:
    """Other work over a window: how much, and whether it contended with the engine's threads."""

    seconds: float  # the window's wall time
    other_cores: float  # cores kept busy by other processes, on average
    steal: float  # fraction of the cores' time the hypervisor took
    running: int | None  # the most threads runnable at the window's ends (this process's included)
    cores: int  # cores this process may run on
    threads: int  # threads the engine runs passes on
    contended: bool

    def describe(self) -> str:
        """One phrase: ``1.9 cores of other work on 2 cores (steal 0%, 5 threads runnable)``."""
        running = f", {self.running} threads runnable" if self.running is not None else ""
        return f"{self.other_cores:.1f} cores of other work on {self.cores} cores (steal {self.steal:.0%}{running})"

    def to_dict(self) -> dict:
        """JSON: every field."""
        return {
            "seconds": self.seconds,
            "other_cores": self.other_cores,
            "steal": self.steal,
            "running": self.running,
            "cores": self.cores,
            "threads": self.threads,
            "contended": self.contended,
        }


def load_between(start: Snapshot, end: Snapshot, cores: int, threads: int, ticks_per_s: float) -> Load:
    """Other work between two snapshots of ``cores`` cores, against an engine of ``threads`` threads.

    Other work is the cores' busy time less this process's CPU time, over the wall time (never
    below 0: the kernel's tick accounting and this process's exact CPU time disagree by a tick or
    so). It contends when it exceeds the cores the engine leaves free by :data:`OTHER_LIMIT`, or
    when steal exceeds :data:`STEAL_LIMIT`.

    >>> a = Snapshot(0.0, 1.0, CoreTimes(busy=0, steal=0, total=0), 1)
    >>> b = Snapshot(1.0, 2.0, CoreTimes(busy=200, steal=0, total=200), 3)  # both cores busy, one of them ours
    >>> load = load_between(a, b, cores=2, threads=2, ticks_per_s=100)
    >>> round(load.other_cores, 2), load.contended, load.running
    (1.0, True, 3)
    >>> load_between(a, b, cores=2, threads=1, ticks_per_s=100).contended  # one core left free: it took that
    False
    """
    wall = max(end.wall_s - start.wall_s, 1e-9)
    busy_s = (end.cores.busy - start.cores.busy) / ticks_per_s
    other = max(0.0, busy_s - (end.own_s - start.own_s)) / wall
    total = end.cores.total - start.cores.total
    steal = (end.cores.steal - start.cores.steal) / total if total > 0 else 0.0
    running = max((r for r in (start.running, end.running) if r is not None), default=None)
    free = max(0, cores - threads)
    contended = other > free + OTHER_LIMIT or steal > STEAL_LIMIT
    return Load(wall, other, steal, running, cores, threads, contended)


def combine(loads: Iterable[Load]) -> Load | None:
    """The loads of several windows as one, weighted by their wall time (None for none): contended
    when any window was.

    >>> one = Load(1.0, 0.0, 0.0, 1, 2, 2, False)
    >>> two = Load(3.0, 2.0, 0.1, 4, 2, 2, True)
    >>> both = combine([one, two])
    >>> both.seconds, both.other_cores, round(both.steal, 3), both.running, both.contended
    (4.0, 1.5, 0.075, 4, True)
    """
    got = list(loads)
    if not got:
        return None
    seconds = sum(x.seconds for x in got)
    weigh = (lambda f: sum(f(x) * x.seconds for x in got) / seconds) if seconds > 0 else (lambda f: 0.0)
    running = max((x.running for x in got if x.running is not None), default=None)
    return Load(
        seconds,
        weigh(lambda x: x.other_cores),
        weigh(lambda x: x.steal),
        running,
        got[0].cores,
        got[0].threads,
        any(x.contended for x in got),
    )


class Probe:
    """Windows over this process's cores: :meth:`snapshot` at a window's start, :meth:`load` at its end.

    ``read`` returns ``/proc/stat``'s text (injected in tests); ``threads`` is the engine's thread
    count (torch's, which llama.cpp's passes run on too).
    """

    def __init__(self, threads: int, cores: Iterable[int], read: Callable[[], str], ticks_per_s: float) -> None:
        self.threads = threads
        self.cores = sorted(cores)
        self._read = read
        self._ticks_per_s = ticks_per_s

    def snapshot(self) -> Snapshot:
        """The machine's and this process's CPU time now (about 50 µs)."""
        text = self._read()
        cores = parse_cpu_lines(text, self.cores) or CoreTimes(0, 0, 0)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return Snapshot(time.monotonic(), usage.ru_utime + usage.ru_stime, cores, parse_running(text))

    def load(self, start: Snapshot) -> Load:
        """Other work since ``start``."""
        return load_between(start, self.snapshot(), len(self.cores), self.threads, self._ticks_per_s)


def probe(threads: int) -> Probe | None:
    """A probe of this process's cores for an engine of ``threads`` threads; None where the
    machine does not say (not Linux, or ``/proc/stat`` unreadable): detection is then unavailable."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            text = f.read()
        cores = sorted(os.sched_getaffinity(0))
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):
        return None
    if parse_cpu_lines(text, cores) is None:
        return None

    def read() -> str:
        with open("/proc/stat", encoding="ascii") as f:
            return f.read()

    return Probe(threads, cores, read, float(ticks))
