"""The latency sweep's guard against a busy machine: samples are kept only from quiet windows.

The sweep's samples are held back in a window (:mod:`.contention`) until it has lasted
:data:`~.contention.MIN_WINDOW_S`; a quiet window's samples are kept, a contended one's are
dropped and taken again once the machine is quiet. Waiting is itself a window: the guard sleeps
in steps of :data:`WAITS` and watches what the other work does meanwhile (this process idle, all
the cores' busy time is other work), so it re-measures as soon as the machine is quiet, and
refuses (:class:`~hsd_planner.errors.BusyMachineError`) when it has stayed busy through every
wait. With ``allow_busy`` nothing is dropped: a contended window's samples are kept and counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from ..errors import BusyMachineError
from .contention import MIN_WINDOW_S, Load, Probe, Snapshot

__all__ = ["WAITS", "Guard"]

# seconds slept between checks of a busy machine before the sweep refuses: about half a minute in
# all, longer than a compile or a test run's burst and shorter than leaving a profile hanging
WAITS = (1.0, 2.0, 4.0, 8.0, 15.0)


class Guard:
    """Judges the sweep's sampling windows; counts what it dropped and what it kept busy.

    ``probe``: None where detection is unavailable (every window is then quiet). ``note``: told in
    one line when the sweep starts waiting for a busy machine.
    ``sleep``: injected in tests.
    """

    def __init__(
        self,
        probe: Probe | None,
        allow_busy: bool = False,
        waits: Sequence[float] = WAITS,
        sleep: Callable[[float], None] = time.sleep,
        note: Callable[[str], None] | None = None,
    ) -> None:
        self.probe, self.allow_busy, self.waits, self._sleep = probe, allow_busy, tuple(waits), sleep
        self._note = note or (lambda _text: None)
        self.remeasured = 0  # samples dropped from contended windows and taken again
        self.kept_busy = 0  # samples from contended windows kept (allow_busy)
        self.last: Load | None = None  # the last contended window's load
        self._start: Snapshot | None = None
        self._streak = 0  # contended windows in a row: a machine busy whenever this run times is busy too

    @property
    def available(self) -> bool:
        """Whether this machine says what else runs (Linux's /proc/stat)."""
        return self.probe is not None

    def open(self) -> None:
        """Start a window, unless one is open."""
        if self.probe is not None and self._start is None:
            self._start = self.probe.snapshot()

    def due(self) -> bool:
        """The open window is long enough to judge (at once where nothing can be judged: its
        samples are then kept as they come)."""
        if self.probe is None:
            return True
        return self._start is not None and time.monotonic() - self._start.wall_s >= MIN_WINDOW_S

    def keep(self, samples: int) -> bool:
        """Close the window holding ``samples`` samples: True to keep them, False to take them again
        (the machine was busy; the guard has waited until it is quiet). A short window is first
        filled up to :data:`~.contention.MIN_WINDOW_S` by sleeping, so that its ticks are enough
        to judge. Raises :class:`BusyMachineError` when the machine stays busy through every wait."""
        if self.probe is None or self._start is None:
            return True
        left = MIN_WINDOW_S - (time.monotonic() - self._start.wall_s)
        if left > 0 and not self.allow_busy:
            self._sleep(left)
        load = self.probe.load(self._start)
        self._start = None
        if not load.contended:
            self._streak = 0
            return True
        self.last = load
        self._streak += 1
        if self.allow_busy:  # asked for: counted in the summary, not told window by window
            self.kept_busy += samples
            return True
        self.remeasured += samples
        if self._streak == 1:
            self._note(f"note: other work shares the CPU ({load.describe()}); waiting for it to stop, then timing again")
        if self._streak > len(self.waits):  # quiet while waiting, busy again each time this run times
            raise self._refusal(load)
        self._wait_quiet()
        return False

    def _wait_quiet(self) -> None:
        """Sleep until a whole wait passes quietly; refuse after the last."""
        assert self.probe is not None
        for wait in self.waits:
            start = self.probe.snapshot()
            self._sleep(wait)
            seen = self.probe.load(start)
            if not seen.contended:
                return
            self.last = seen
        assert self.last is not None
        raise self._refusal(self.last)

    def _refusal(self, seen: Load) -> BusyMachineError:
        return BusyMachineError(
            f"the machine stayed busy while timing passes: {seen.describe()} beside the {seen.threads} threads of this run, "
            f"after waiting {sum(self.waits):.0f} s for it to clear; stop the other work and rerun the same command "
            "(what was measured is kept), or pass --allow-busy to keep samples taken on a busy machine"
        )
