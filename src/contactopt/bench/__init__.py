"""Benchmark harness: named benchmarks with a readable table and a JSON form.

A benchmark is a :class:`Benchmark` registered under a name; ``contactopt bench NAME``
runs it.  Results are plain dicts (JSON-ready); ``table`` turns one into text.
Speed targets are always reported as ratios against a yardstick measured in the
same run (``bench mujoco`` is the yardstick for the others), because the machines
are shared and noisy.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import ContactoptError

__all__ = [
    "Benchmark",
    "register_benchmark",
    "available_benchmarks",
    "get_benchmark",
    "time_per_call",
    "format_table",
]


@dataclass(frozen=True)
class Benchmark:
    """A named benchmark.

    Attributes:
      name: CLI name.
      description: one line.
      run: ``run(models, min_time, progress) -> dict``; ``models`` is a list of
        model names/paths or None for the benchmark's default set.
      table: ``table(result) -> str`` readable rendering of the result.
      options: extra keyword options ``run`` accepts from the command line (e.g. ``"plots"``);
        ``"workers"``: it runs its units on the sweep engine (``bench --workers N``) and takes its
        ``--seeds`` as a range ``A:B``.
      seed_ranges: ``run`` takes ``--seeds`` as a ``range`` (``N`` is ``0:N``) even without
        ``"workers"``; the other serial benchmarks take a count from 0.
    """

    name: str
    description: str
    run: Callable[..., dict]
    table: Callable[[dict], str]
    options: tuple[str, ...] = ()
    seed_ranges: bool = False


_BENCHMARKS: dict[str, Benchmark] = {}

#: Modules that register the built-in benchmarks.
_BUILTIN_MODULES = tuple(f"contactopt.bench.{name}" for name in
                         ("mujoco_bench", "contact_bench", "ilqg_bench", "gdd_bench", "idto_bench", "tasks_bench",
                          "noise_bench", "remote_bench", "sweep_bench", "robustness_bench", "soak_bench",
                          "smooth_contact_bench"))


def register_benchmark(bench: Benchmark) -> Benchmark:
    """Add a benchmark to the registry."""
    _BENCHMARKS[bench.name] = bench
    return bench


def available_benchmarks() -> dict[str, Benchmark]:
    """Registered benchmarks by name (imports the built-in ones)."""
    import importlib

    for module in _BUILTIN_MODULES:  # they register themselves on import
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a planner's benchmark that has not landed yet
            if exc.name != module:
                raise
    return dict(_BENCHMARKS)


def get_benchmark(name: str) -> Benchmark:
    """The benchmark ``name``; :class:`ContactoptError` lists the known ones otherwise."""
    benches = available_benchmarks()
    if name not in benches:
        raise ContactoptError(f"unknown benchmark {name!r} (available: {', '.join(sorted(benches))})")
    return benches[name]


def time_per_call(fn: Callable[[], object], min_time: float = 0.2, repeats: int = 3) -> float:
    """Seconds per call of ``fn``: the best of ``repeats`` timed batches of ≥ ``min_time/repeats`` s each.

    The batch size is calibrated by doubling; taking the best batch rejects
    interference from other processes on a shared machine.
    """
    fn()  # warm up
    budget = max(min_time / repeats, 1e-3)
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= budget or n >= 1 << 24:
            break
        n = n * 2 if dt < budget / 8 else max(n + 1, int(n * budget / max(dt, 1e-9)))
    best = dt / n
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def format_table(rows: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """Render ``rows`` as an aligned text table.

    Args:
      rows: dicts.
      columns: ``(key, header, format)`` triples, e.g. ``("step_per_s", "mj_step/s", "{:,.0f}")``.
    """
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for j, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence."""
    return float(statistics.median(values))
