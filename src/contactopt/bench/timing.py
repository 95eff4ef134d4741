"""Paired timing: a measured thing and its yardstick timed in interleaved blocks.

On a shared machine the speed of both a benchmark and its yardstick drifts with the load
of other processes.  Timing them in alternating blocks (A B B A A B B A …) exposes both to
the same load, so each pair's ratio ``A / B`` is steady even when the absolute times are
not; the benchmark reports the median of the per-pair ratios and their interquartile
range.  Inside a timed block the garbage collector is off; a warm-up pair is excluded.

``paired_ratio(a, b)`` times two zero-argument callables; ``paired_blocks(a, b)`` takes
block functions that time themselves (return seconds per unit of work), for benchmarks
whose untimed set-up sits between the timed calls (e.g. the GDD replay).
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError

__all__ = ["DEFAULT_REPEATS", "Paired", "calls_per_block", "check_repeats", "load_average", "paired_blocks",
           "paired_ratio", "timed_calls"]

#: Pairs timed by default (at least 5 give an interquartile range; 11 keep the median steady under load).
DEFAULT_REPEATS = 11


def check_repeats(repeats) -> int:
    """``repeats`` as an int ≥ 5 (fewer pairs give no meaningful interquartile range)."""
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or int(repeats) < 5:
        raise ParameterError(f"--repeats must be an integer >= 5, got {repeats!r}")
    return int(repeats)


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class Paired:
    """Interleaved timings of ``a`` and its yardstick ``b``.

    Attributes:
      a, b: seconds per unit of work of each timed block, ``(repeats,)`` each.
      ratios: ``a[i] / b[i]`` per pair.
    """

    a: tuple
    b: tuple
    ratios: tuple

    @property
    def repeats(self) -> int:
        return len(self.ratios)

    @property
    def median(self) -> float:
        """Median of the per-pair ratios."""
        return float(np.median(self.ratios))

    @property
    def iqr(self) -> tuple[float, float]:
        """``(q25, q75)`` of the per-pair ratios."""
        q25, q75 = np.percentile(self.ratios, [25, 75])
        return float(q25), float(q75)

    def row(self, prefix: str = "ratio") -> dict:
        """JSON fields ``{prefix}_median``, ``{prefix}_iqr`` (``[q25, q75]``), ``repeats``, and the
        median seconds per unit of each side (``{prefix}_a_s``, ``{prefix}_b_s``)."""
        return {f"{prefix}_median": self.median, f"{prefix}_iqr": list(self.iqr), "repeats": self.repeats,
                f"{prefix}_a_s": float(np.median(self.a)), f"{prefix}_b_s": float(np.median(self.b))}

    def text(self, digits: int = 2) -> str:
        """``median [q25–q75]``, e.g. ``1.84 [1.80–1.88]``."""
        q25, q75 = self.iqr
        return f"{self.median:.{digits}f} [{q25:.{digits}f}–{q75:.{digits}f}]"


def timed_calls(fn: Callable[[], object], n: int) -> float:
    """Wall seconds of ``n`` calls of ``fn`` with the garbage collector off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0
    finally:
        if enabled:
            gc.enable()


def calls_per_block(fn: Callable[[], object], block_time: float) -> int:
    """How many calls of ``fn`` take about ``block_time`` seconds (doubling from one call)."""
    n = 1
    while True:
        dt = timed_calls(fn, n)
        if dt >= block_time or n >= 1 << 24:
            return n
        n = n * 2 if dt < block_time / 8 else max(n + 1, int(math.ceil(n * block_time / max(dt, 1e-9))))


def paired_blocks(a: Callable[[], float], b: Callable[[], float], *, repeats: int = DEFAULT_REPEATS,
                  warmup: int = 1) -> Paired:
    """Interleave block functions ``a`` and ``b`` (each returns seconds per unit of work of one
    timed block) in the order A B, B A, A B, … for ``repeats`` pairs after ``warmup`` pairs."""
    repeats = check_repeats(repeats)
    for _ in range(warmup):
        a(), b()
    ta, tb = [], []
    for i in range(repeats):
        if i % 2 == 0:
            ta.append(float(a()))
            tb.append(float(b()))
        else:
            tb.append(float(b()))
            ta.append(float(a()))
    ratios = tuple(x / y if y > 0 else math.inf for x, y in zip(ta, tb))
    return Paired(tuple(ta), tuple(tb), ratios)


def paired_ratio(a: Callable[[], object], b: Callable[[], object], *, repeats: int = DEFAULT_REPEATS,
                 block_time: float = 0.05, per_call_a: float = 1.0, per_call_b: float = 1.0) -> Paired:
    """Time zero-argument callables ``a`` and its yardstick ``b`` in interleaved blocks of about
    ``block_time`` seconds each (:func:`paired_blocks`).

    Args:
      per_call_a, per_call_b: units of work per call (e.g. problems in a batch), so that the
        recorded times and the ratio are per unit.

    Returns:
      :class:`Paired` of seconds per unit; ``ratios = t_a / t_b``.
    """
    na, nb = calls_per_block(a, block_time), calls_per_block(b, block_time)
    return paired_blocks(lambda: timed_calls(a, na) / (na * per_call_a),
                         lambda: timed_calls(b, nb) / (nb * per_call_b), repeats=repeats)
