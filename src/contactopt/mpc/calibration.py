"""Deterministic closed-loop runs: a fixed policy lag calibrated once per machine.

Sync mode with ``lag="measured"`` models each update's lag as its wall compute time (divided by
the slowdown), so two runs of one seed differ with the machine's load.  A fixed lag makes a
run bit-reproducible, but which value is honest?  :func:`calibrated_lag` answers with this
machine's own number: it runs the task × planner pair once for :data:`CALIBRATION_SECONDS` of
simulated time with the measured lag, takes the median policy lag, rounds it *up* to
:data:`LAG_GRID` seconds (a slow calibration errs on the pessimistic side) and stores it in a
JSON cache (``$XDG_CACHE_HOME/contactopt/calibrated_lag.json``, or ``~/.cache/...``) keyed by
task, planner, slowdown, host name, the run's options (``--set`` settings, mode, model-error
scales: :func:`options_fingerprint`) and the installed contactopt's source
(:func:`code_fingerprint`): a planner setting or a code change that makes updates faster or
slower is calibrated again, not served the old lag.  Later runs reuse it, so ``--deterministic``
runs of one seed are identical on one machine; the report says the lag used, and ``--lag L``
with that value reproduces the run anywhere.  A user's own task file is not part of the key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import socket
from pathlib import Path
from typing import Callable

from ..errors import ContactoptError

__all__ = ["calibrated_lag", "runner_fixed_lag", "task_fixed_lag", "cache_path", "code_fingerprint",
           "options_fingerprint", "LAG_GRID", "CALIBRATION_SECONDS"]

#: the calibrated lag is rounded up to a multiple of this (s)
LAG_GRID = 0.001
#: simulated seconds of the calibration run
CALIBRATION_SECONDS = 1.0


def cache_path() -> Path:
    """The JSON file that stores calibrated lags (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "contactopt" / "calibrated_lag.json"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """12 hex digits of SHA-256 over the installed ``contactopt`` package's Python sources (path
    and content of every ``*.py``, in sorted order): it changes with any change to the library,
    which may change a planner's update time."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for file in sorted(root.rglob("*.py")):
        digest.update(file.relative_to(root).as_posix().encode())
        try:
            digest.update(file.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:12]


def options_fingerprint(options: dict | None) -> str:
    """12 hex digits of SHA-256 over the run options ``options`` (JSON with sorted keys; a value
    JSON cannot hold by its ``repr``); ``"-"`` for none."""
    if not options:
        return "-"
    text = json.dumps(options, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # a missing or damaged cache is recalibrated, never an error


def calibrated_lag(task: str, planner: str, slowdown: float, measure: Callable[[], dict], *,
                   path: Path | None = None, recalibrate: bool = False,
                   options: dict | None = None) -> tuple[float, bool]:
    """The fixed policy lag (s) of ``task`` × ``planner`` at ``slowdown`` on this machine.

    Args:
      task, planner, slowdown: the cache key (with the host name, :func:`code_fingerprint` and
        :func:`options_fingerprint` of ``options``).
      measure: runs the pair with the measured lag for a short time and returns its report
        (:meth:`~contactopt.mpc.MPCResult.summary` keys; ``policy_lag_ms`` is read).
      path: the cache file (default :func:`cache_path`).
      recalibrate: measure even when a value is cached.
      options: the options the pair runs with (those ``measure`` uses), part of the key; entries
        of the same task, planner, slowdown and host under another code fingerprint are dropped
        when a new value is stored.

    Returns:
      ``(lag, cached)``: ``lag = ⌈median policy lag / LAG_GRID⌉ · LAG_GRID`` seconds, and whether
      it came from the cache.
    """
    path = cache_path() if path is None else Path(path)
    prefix = f"{task}|{planner}|slowdown={float(slowdown):g}|{socket.gethostname()}|"
    code = f"code={code_fingerprint()}|"
    key = prefix + code + f"options={options_fingerprint(options)}"
    table = _load(path)
    if not recalibrate and isinstance(table.get(key), (int, float)) and math.isfinite(table[key]):
        return float(table[key]), True
    report = measure()
    lag_ms = report.get("policy_lag_ms")
    if lag_ms is None or not math.isfinite(lag_ms):
        raise ContactoptError(f"--deterministic: the calibration run of {task} with {planner} measured no lag")
    lag = math.ceil(lag_ms * 1e-3 / LAG_GRID - 1e-9) * LAG_GRID
    lag = round(max(lag, LAG_GRID), 6)
    # this pair's values under another version of the code are stale: dropped, not kept growing
    table = {k: v for k, v in table.items()
             if not k.startswith(prefix) or k.startswith(prefix + code)}
    table[key] = lag
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home still gets the calibrated value for this run
    return lag, False


def runner_fixed_lag(task: str, planner: str, runner, options: dict, seed: int) -> str:
    """Give a bundled task's ``runner`` (``contactopt.tasks`` runner form) a fixed lag in ``options``.

    A runner without a ``lag`` keyword models no lag (its runs repeat already); a task with its
    own fixed lag keeps it; otherwise the lag is :func:`calibrated_lag` of a short run with the
    runner's measured lag.  Returns where the lag came from (for the report).
    """
    import inspect

    if "lag" not in inspect.signature(runner).parameters:
        return "none (this planner's runs do not model a lag; they repeat exactly)"
    spec = getattr(runner, "task", None)
    fixed = getattr(spec, "lag", None)
    if isinstance(fixed, (int, float)):
        options["lag"] = float(fixed)
        return "the task's fixed lag"
    slowdown = options.get("slowdown", getattr(spec, "target_slowdown", 1.0))
    measure_options = {k: v for k, v in options.items() if k != "pushes"}
    lag, cached = calibrated_lag(
        task, planner, slowdown,
        lambda: runner(seconds=CALIBRATION_SECONDS, seed=seed, **measure_options),
        options=measure_options)
    options["lag"] = lag
    return "calibrated on this machine" + (" (cached)" if cached else "")


def task_fixed_lag(task, planner: str, seed: int, **run_options) -> tuple[float, str]:
    """The fixed lag [s] of a planner-independent :class:`~contactopt.task.Task` run with the
    registered planner ``planner``: :func:`calibrated_lag` of a short run (at most
    :data:`CALIBRATION_SECONDS`, seed ``seed``) of :func:`~contactopt.mpc.task_runner.run_task`
    with ``run_options`` (their ``slowdown`` is part of the cache key).  Returns ``(lag, where it
    came from)`` (for the report)."""
    from .task_runner import run_task

    lag, cached = calibrated_lag(
        task.name, planner, run_options.get("slowdown", 1.0),
        lambda: run_task(task, planner, seed=seed, seconds=min(CALIBRATION_SECONDS, task.duration),
                         **run_options).report,
        options=run_options)
    return lag, "calibrated on this machine" + (" (cached)" if cached else "")
