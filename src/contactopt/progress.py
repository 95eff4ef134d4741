"""Progress bars that appear on a terminal; when output is piped, silence or a plain log line.

Long jobs (benchmarks, sweeps) pass ``piped_lines=True``: in a log file or a CI job a tqdm bar
would be unreadable and silence leaves a user guessing for tens of minutes, so they write one
line to stderr at most every ``log_interval`` seconds (``bench tasks: 12/96 runs, 3:10 elapsed,
about 22:00 left``) and one when done.
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["progress_bar", "interactive", "LogLines"]


def interactive() -> bool:
    """True when stderr is attached to a terminal (and not running under CI)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass


def _duration(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) of a duration in seconds."""
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class LogLines:
    """A bar for piped output: ``desc: done/total unit, elapsed, about left`` on ``stream``
    at most every ``interval`` seconds, and once at the end (:meth:`close`)."""

    def __init__(self, total: int, desc: str, unit: str, *, interval: float = 30.0, stream=None,
                 clock=time.monotonic):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.interval = float(interval)
        self.stream = sys.stderr if stream is None else stream
        self._clock = clock
        self.start = self._last = clock()
        self.n = 0
        self.postfix = ""

    def _line(self) -> str:
        elapsed = self._clock() - self.start
        text = f"{self.desc}: {self.n}/{self.total} {self.unit}s, {_duration(elapsed)} elapsed"
        if 0 < self.n < self.total:
            text += f", about {_duration(elapsed / self.n * (self.total - self.n))} left"
        return text + (f" ({self.postfix})" if self.postfix else "")

    def _write(self) -> None:
        try:
            print(self._line(), file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed pipe: progress is not worth an error
            pass

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._clock()
        if now - self._last >= self.interval and self.n < self.total:
            self._last = now
            self._write()

    def set_postfix_str(self, s: str) -> None:
        self.postfix = str(s)

    def close(self) -> None:
        self._write()


@contextlib.contextmanager
def progress_bar(total: int, desc: str = "", unit: str = "it", enable: bool | None = None, *,
                 piped_lines: bool = False, log_interval: float = 30.0):
    """Yield a tqdm bar writing to stderr, a :class:`LogLines` bar, or a no-op bar.

    Args:
      total: number of updates expected.
      desc: label.
      unit: unit name shown by tqdm.
      enable: force on/off; None means "only when stderr is a terminal".
      piped_lines: with ``enable`` None and stderr not a terminal, write a progress line every
        ``log_interval`` seconds and one at the end instead of staying silent (long jobs).
    """
    if enable is None:
        enable = interactive()
        if not enable and piped_lines:
            bar = LogLines(total, desc, unit, interval=log_interval)
            try:
                yield bar
            finally:
                bar.close()
            return
    if not enable:
        yield _NullBar()
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True) as bar:
        yield bar
