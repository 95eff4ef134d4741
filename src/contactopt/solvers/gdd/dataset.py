"""Datasets of goal-directed sessions, and their offline replay for timing (seed section VI).

The seed records ``(q, v, a, τ)`` at every step of its interactive sessions, 20,000
records per model, then re-runs the solvers offline at those states, without
rendering or interaction, to time them.  Here:

* :func:`record` runs scripted sessions (:mod:`contactopt.solvers.gdd.sessions`; seeds
  ``seed, seed + 1, ...``) until it has ``n_records`` steps and returns a
  :class:`GDDDataset`: per record the time, ``q (nq,)``, ``v (nv,)``, the goal-directed
  acceleration ``a (nv,)``, the forward acceleration of the step, ``ctrl (nu,)``,
  ``τ = qfrc_actuator (nv,)`` and what reproduces the solve — the session it belongs
  to (its :class:`~contactopt.solvers.gdd.sessions.ReachSpec` is stored as JSON), the active
  drag, the dragged goal ``(3,)`` and the posture reference ``(nq,)``;
* :meth:`GDDDataset.save` / :meth:`GDDDataset.load` use one ``.npz`` file;
* :func:`replay` re-runs, at every record, MuJoCo's forward dynamics (``mj_forward``
  with the recorded control, warm-started from the previous record), the GDD solve
  (including its one MuJoCo evaluation, ``mj_fwdPosition`` + ``mj_fwdVelocity``), and
  the GDD solve followed by the warm-started forward check, timing each call on one
  thread; it also collects the solver statistics and checks that the replayed
  accelerations are the recorded ones.

Command line (also reachable through ``contactopt bench gdd --model FILE.npz``)::

    python -m contactopt.solvers.gdd.dataset record humanoid --records 20000 --out humanoid.npz [--workers N]
    python -m contactopt.solvers.gdd.dataset replay humanoid.npz
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from ...errors import ContactoptError, ParameterError
from ...model import load_model, model_name
from ...progress import progress_bar
from .sessions import (
    ReachSession,
    ReachSpec,
    auto_reach_spec,
    hand_reach_spec,
    humanoid_reach_spec,
    run_session,
)

__all__ = ["DEFAULT_RECORDS", "RECORD_FIELDS", "GDDDataset", "SessionUnit", "record", "replay", "run_session_unit",
           "session_spec"]

#: records per model in the seed's datasets
DEFAULT_RECORDS = 20_000

#: per-record arrays of a dataset
RECORD_FIELDS = ("time", "qpos", "qvel", "qacc", "qacc_forward", "ctrl", "qfrc_actuator",
                 "active", "goal", "qref")

_FORMAT = "contactopt-gdd-dataset-1"


def session_spec(model: str, seconds: float | None = None, seed: int = 0) -> ReachSpec:
    """The session spec used for ``model``: the task presets for ``"humanoid"`` and
    ``"hand"``, :func:`~contactopt.solvers.gdd.sessions.auto_reach_spec` for anything else."""
    if model == "humanoid":
        return humanoid_reach_spec(seconds, seed)
    if model == "hand":
        return hand_reach_spec(seconds, seed)
    return auto_reach_spec(model, seconds, seed)


@dataclass
class GDDDataset:
    """Records of goal-directed sessions of one model.

    Attributes:
      model: bundled name or model path the sessions ran on.
      specs: one :class:`~contactopt.solvers.gdd.sessions.ReachSpec` per session.
      arrays: ``session (N,)`` int and the :data:`RECORD_FIELDS`: ``time (N,)`` s,
        ``qpos (N, nq)``, ``qvel (N, nv)``, ``qacc (N, nv)`` goal-directed acceleration,
        ``qacc_forward (N, nv)`` forward acceleration of the step, ``ctrl (N, nu)``,
        ``qfrc_actuator (N, nv)`` τ (N, N·m), ``active (N,)`` drag index (−1: none),
        ``goal (N, 3)`` m (NaN without a drag), ``qref (N, nq)`` posture reference.
      info: per-session summaries (falls, drops, goals reached, error) and timing of recording.
    """

    model: str
    specs: list
    arrays: dict
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.arrays["time"].shape[0])

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays")
        if arrays is not None and name in arrays:
            return arrays[name]
        raise AttributeError(name)

    def save(self, path) -> Path:
        """Write the dataset to ``path`` (``.npz``, compressed; written atomically)."""
        from ...render import atomic_output

        path = Path(path)
        if path.suffix.lower() != ".npz":
            raise ParameterError(f"dataset path must end in .npz, got {path}")
        meta = {"format": _FORMAT, "model": self.model, "specs": [s.to_json() for s in self.specs],
                "info": self.info}
        with atomic_output(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, meta=np.array(json.dumps(meta)), **self.arrays)
        return path

    @classmethod
    def load(cls, path) -> "GDDDataset":
        """Read a dataset written by :meth:`save`.

        Raises:
          ModelNotFoundError: no such file.  ParameterError: not a dataset file.
        """
        from ...errors import ModelNotFoundError

        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(f"dataset file {path} does not exist")
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                arrays = {k: z[k] for k in z.files if k != "meta"}
        except (OSError, ValueError, KeyError) as exc:
            raise ParameterError(f"{path} is not a contactopt GDD dataset ({exc})") from None
        if meta.get("format") != _FORMAT:
            raise ParameterError(f"{path} is not a contactopt GDD dataset (format {meta.get('format')!r})")
        missing = [k for k in ("session",) + RECORD_FIELDS if k not in arrays]
        if missing:
            raise ParameterError(f"dataset {path} lacks arrays {missing}")
        specs = [ReachSpec.from_json(s) for s in meta["specs"]]
        return cls(meta["model"], specs, arrays, meta.get("info", {}))


@dataclass(frozen=True)
class SessionUnit:
    """One recording session: :func:`session_spec` ``(model, seconds, seed)``, run to its end,
    of which at most ``limit`` steps are kept."""

    model: str
    seconds: float | None
    seed: int
    limit: int


_MODELS: dict = {}


def run_session_unit(unit: SessionUnit) -> dict:
    """Run one :class:`SessionUnit` (here or in a sweep-engine worker).

    The loaded model is cached per model path in this process (as the serial recording reuses
    it for every session).

    Returns:
      picklable ``{"seed", "spec": ReachSpec, "steps": steps taken (before the cut), "arrays":
      {field: first min(steps, limit) rows of each of RECORD_FIELDS}, "report": {success, falls,
      drops, error, goals_reached, goals_total}, "timestep": s, "model_name"}``.
    """
    spec = session_spec(unit.model, unit.seconds, unit.seed)
    loaded = _MODELS.get(spec.model)
    if loaded is None:
        loaded = _MODELS[spec.model] = load_model(spec.model)
    result = run_session(spec, model=loaded, progress=False, record="steps")  # every step: the records
    n = min(result.steps, unit.limit)
    rep = result.report()
    return {"seed": unit.seed, "spec": spec, "steps": result.steps,
            "arrays": {f: result.arrays[f][:n] for f in RECORD_FIELDS},
            "report": {k: rep[k] for k in ("success", "falls", "drops", "error", "goals_reached", "goals_total")},
            "timestep": float(loaded.opt.timestep), "model_name": model_name(loaded)}


def _sessions(model: str, seconds, seed: int, n_records: int, workers: int):
    """Yield :func:`run_session_unit` results of seeds ``seed, seed + 1, ...`` in seed order until
    their steps add up to ``n_records`` (the caller stops earlier on an empty session).

    ``workers`` 1 runs one session at a time here; more submit batches of sessions to a local
    process pool, each batch as many sessions as the records still missing need at the longest
    session seen so far (at most ``workers``; the first batch ``workers``), so a parallel
    recording runs at most ``workers − 1`` sessions more than the serial one."""
    from ...sweep.engines import Lost, make_engine

    total, k, longest = 0, 0, 0
    with make_engine(workers, inline=workers == 1) as engine:
        while total < n_records:
            missing = n_records - total
            batch = workers if not longest else min(workers, max(1, -(-missing // longest)))
            units = [SessionUnit(model, seconds, seed + k + i, n_records) for i in range(batch)]
            done = {}
            for unit, value, _ in engine.imap_unordered(run_session_unit, units):
                if isinstance(value, Lost):
                    raise ContactoptError(f"recording {model!r}: the session of seed {unit.seed} lost its worker "
                                          f"({value.message})")
                done[unit.seed] = value
            for unit in units:
                value = done[unit.seed]
                longest = max(longest, value["steps"])
                yield value
                total += min(value["steps"], n_records - total)
                k += 1
                if total >= n_records:
                    break


def record(model: str = "humanoid", n_records: int = DEFAULT_RECORDS, path=None, *,
           seconds: float | None = None, seed: int = 0, progress: bool | None = None,
           workers: int = 1) -> GDDDataset:
    """Record ``n_records`` steps of scripted goal-directed sessions of ``model``.

    Sessions of ``seconds`` (default: the preset's) with seeds ``seed, seed + 1, ...`` run
    until there are enough steps; the last one is cut.  A session that stops on an
    error contributes the steps before it.  Each session is a unit on the sweep engine
    (:mod:`contactopt.sweep.engines`): with ``workers`` > 1 batches of sessions run at once on
    a local process pool and are put together in seed order, so the records are those of the
    serial recording of the same seeds (only ``info["record_seconds"]`` differs).

    Args:
      model: ``"humanoid"``, ``"hand"`` or a model path (see :func:`session_spec`).
      n_records: number of records N (≥ 1).
      path: optional ``.npz`` path to save the dataset to.
      seconds: session length, s.
      seed: seed of the first session.
      progress: progress bar (None: only on a terminal).
      workers: sessions run at once (1: here, one after the other; more: worker processes).

    Returns:
      :class:`GDDDataset` with N records; ``info`` has ``sessions`` (per session: seed, steps
      kept, success, falls, drops, error, goals reached/total), ``record_seconds`` (wall s),
      ``timestep`` (s), ``model_name`` and ``workers``.

    Raises:
      ParameterError: bad ``n_records`` or ``workers``, bad model (no actuators, ...), or
        sessions that stop at their first step.
      ContactoptError: a session's worker process died on every retry.
    """
    if isinstance(n_records, bool) or not isinstance(n_records, (int, np.integer)) or n_records < 1:
        raise ParameterError(f"n_records must be a positive integer, got {n_records!r}")
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ParameterError(f"workers must be an integer >= 1, got {workers!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ParameterError(f"seed must be an integer, got {seed!r}")
    if path is not None and Path(path).suffix.lower() != ".npz":
        raise ParameterError(f"dataset path must end in .npz, got {path}")
    model, n_records, workers, seed = str(model), int(n_records), int(workers), int(seed)
    chunks, specs, sessions = [], [], []
    total = 0
    last = None
    t0 = time.perf_counter()
    with progress_bar(total=n_records, desc=f"record {model}", unit="rec", enable=progress) as bar:
        try:
            for k, result in enumerate(_sessions(model, seconds, seed, n_records, workers)):
                n = min(result["steps"], n_records - total)
                if n == 0:
                    raise ParameterError(f"session {k} of {model!r} stopped at its first step: "
                                         f"{result['report']['error']}")
                arr = {f: result["arrays"][f][:n] for f in RECORD_FIELDS}
                arr["session"] = np.full(n, len(specs), dtype=np.int32)
                chunks.append(arr)
                specs.append(result["spec"])
                rep = result["report"]
                sessions.append({"seed": result["seed"], "steps": n, "success": rep["success"],
                                 "falls": rep["falls"], "drops": rep["drops"], "error": rep["error"],
                                 "goals_reached": rep["goals_reached"], "goals_total": rep["goals_total"]})
                last = result
                total += n
                bar.update(n)
        finally:
            _MODELS.clear()
    arrays = {key: np.concatenate([c[key] for c in chunks]) for key in chunks[0]}
    info = {"sessions": sessions, "record_seconds": time.perf_counter() - t0,
            "timestep": last["timestep"], "model_name": last["model_name"], "workers": workers}
    data = GDDDataset(model, specs, arrays, info)
    if path is not None:
        data.save(path)
    return data


def _percentiles(x) -> tuple:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if not x.size:
        return None, None
    return float(np.median(x)), float(np.percentile(x, 95))


def replay(dataset: GDDDataset, *, model: mujoco.MjModel | None = None, min_time: float = 0.0,
           max_repeats: int = 20, progress: bool | None = None, repeats: int = 1) -> dict:
    """Re-run forward dynamics and goal-directed dynamics at every record, timed on one thread.

    Three sequential passes over the records (a session's records in order, the
    solver reset at each session start — so its warm start is the one of the recording):

    * ``forward``: ``mj_forward`` with the recorded control, warm-started from the
      previous record's forward acceleration;
    * ``gdd``: :meth:`GDDSolver.solve` with its one MuJoCo evaluation
      (``mj_fwdPosition`` + ``mj_fwdVelocity``);
    * ``gdd_forward``: the solve plus :meth:`GDDSolver.forward` (clamped control applied,
      forward dynamics warm-started from the goal-directed acceleration).

    Setting the state and the targets of a record is not timed.  When a pass takes less
    than ``min_time`` seconds the passes are repeated (up to ``max_repeats``) and the
    fastest repeat of each is kept.

    Args:
      dataset: the :class:`GDDDataset`.
      model: the loaded model (default: load ``dataset.specs[0].model``).
      min_time: least seconds of timed calls per pass.
      max_repeats: most repeats.
      repeats: fewest repeats.  Each repeat runs the three passes back to back (in the order
        forward, gdd, gdd + forward, then reversed in the next repeat) with the garbage collector
        off, so a repeat's ratio ``gdd / forward`` compares passes that saw the same load;
        ``ratio`` is the median of the per-repeat ratios, ``ratio_iqr`` their ``[q25, q75]``.
      progress: progress bar (None: only on a terminal).

    Returns:
      dict: ``records``, ``forward_us``, ``gdd_us``, ``gdd_forward_us`` (mean µs per call),
      their medians (``*_median_us``), ``ratio`` (gdd / forward), ``forward_ratio``
      (gdd_forward / forward), statistics median and 95th percentile of ``constraints``,
      ``iterations``, ``dual_updates``, ``physics_violation`` (m/s²), ``residual_gradient``
      (N), ``converged_fraction``, ``replay_max_error`` (max ‖a_replay − a_recorded‖∞,
      m/s²: 0 up to roundoff when the replay reproduces the recording), ``repeats``.

    Raises:
      ParameterError: an empty dataset or a model that does not match it.
    """
    n = len(dataset)
    if n == 0:
        raise ParameterError("the dataset has no records")
    if model is None:
        model = load_model(dataset.specs[0].model)
    a = dataset.arrays
    if a["qpos"].shape[1] != model.nq or a["qvel"].shape[1] != model.nv or a["ctrl"].shape[1] != model.nu:
        raise ParameterError(f"dataset of {dataset.model!r} does not match model {model_name(model)!r} "
                             f"(nq/nv/nu {a['qpos'].shape[1]}/{a['qvel'].shape[1]}/{a['ctrl'].shape[1]} vs "
                             f"{model.nq}/{model.nv}/{model.nu})")
    sessions = [ReachSession(spec, model=model) for spec in dataset.specs]
    sess_of = a["session"]
    starts = np.flatnonzero(np.r_[True, sess_of[1:] != sess_of[:-1]])
    warm = np.zeros_like(a["qacc_forward"])
    same = np.r_[False, sess_of[1:] == sess_of[:-1]]
    warm[same] = a["qacc_forward"][np.flatnonzero(same) - 1]
    warm[~np.isfinite(warm)] = 0.0
    stats = {key: np.zeros(n) for key in ("nefc", "iterations", "dual_updates", "residual_gradient",
                                          "physics_violation", "status")}
    err = np.zeros(n)
    perf = time.perf_counter

    def begin(session, k):
        """Reset a session's solver and data at its first record (as the recording did)."""
        d = session.data
        session.solver.reset()
        d.qpos[:] = a["qpos"][k]
        d.qvel[:] = a["qvel"][k]
        d.time = a["time"][k]
        d.ctrl[:] = 0.0
        d.qacc_warmstart[:] = 0.0
        mujoco.mj_forward(model, d)

    def set_record(session, k):
        d = session.data
        d.qpos[:] = a["qpos"][k]
        d.qvel[:] = a["qvel"][k]
        d.time = a["time"][k]
        session.set_targets(a["active"][k], a["goal"][k], a["qref"][k])

    def pass_forward():
        total = np.zeros(n)
        first = set(starts.tolist())
        for k in range(n):
            s = sessions[sess_of[k]]
            d = s.data
            if k in first:
                begin(s, k)
            d.qpos[:] = a["qpos"][k]
            d.qvel[:] = a["qvel"][k]
            d.time = a["time"][k]
            d.ctrl[:] = a["ctrl"][k]
            d.qacc_warmstart[:] = warm[k]
            t0 = perf()
            mujoco.mj_forward(model, d)
            total[k] = perf() - t0
        return total

    def pass_gdd(with_forward: bool, collect: bool):
        total = np.zeros(n)
        first = set(starts.tolist())
        for k in range(n):
            s = sessions[sess_of[k]]
            if k in first:
                begin(s, k)
            set_record(s, k)
            solver, d = s.solver, s.data
            if with_forward:
                t0 = perf()
                res = solver.solve(d, s.cost)
                solver.forward(d, res)
                total[k] = perf() - t0
                if collect:
                    stats["physics_violation"][k] = res.physics_violation
            else:
                t0 = perf()
                res = solver.solve(d, s.cost)
                total[k] = perf() - t0
                if collect:
                    stats["nefc"][k] = res.nefc
                    stats["iterations"][k] = res.iterations
                    stats["dual_updates"][k] = res.dual_updates
                    stats["residual_gradient"][k] = res.residual_gradient
                    stats["status"][k] = int(res.status)
                    err[k] = float(np.max(np.abs(res.qacc - a["qacc"][k])))
        return total

    import gc

    passes = {"forward": lambda first: pass_forward(),
              "gdd": lambda first: pass_gdd(False, first),
              "gdd_forward": lambda first: pass_gdd(True, first)}
    least = max(1, int(repeats))
    best = {}
    pair_ratio, pair_forward_ratio = [], []
    done = 0
    with progress_bar(total=3 * least, desc=f"replay {dataset.model}", unit="pass", enable=progress) as bar:
        while True:
            means = {}
            order = list(passes) if done % 2 == 0 else list(reversed(passes))
            for key in order:
                enabled = gc.isenabled()
                gc.disable()
                try:
                    t = passes[key](done == 0)
                finally:
                    if enabled:
                        gc.enable()
                means[key] = float(t.mean())
                if key not in best or t.mean() < best[key].mean():
                    best[key] = t
                if done < least:
                    bar.update(1)
            pair_ratio.append(means["gdd"] / means["forward"])
            pair_forward_ratio.append(means["gdd_forward"] / means["forward"])
            done += 1
            shortest = min(t.sum() for t in best.values())
            if done >= least and (shortest >= min_time or done >= max(max_repeats, least)):
                break
    from .solver import GDDStatus

    out = {"records": n, "sessions": len(dataset.specs), "repeats": done}
    for key, t in best.items():
        out[f"{key}_us"] = 1e6 * float(t.mean())
        out[f"{key}_median_us"] = 1e6 * float(np.median(t))
    out["ratio"] = float(np.median(pair_ratio))
    out["ratio_iqr"] = [float(q) for q in np.percentile(pair_ratio, [25, 75])]
    out["forward_ratio"] = float(np.median(pair_forward_ratio))
    out["forward_ratio_iqr"] = [float(q) for q in np.percentile(pair_forward_ratio, [25, 75])]
    for key, name in (("nefc", "constraints"), ("iterations", "iterations"),
                      ("dual_updates", "dual_updates"), ("physics_violation", "physics_violation"),
                      ("residual_gradient", "residual_gradient")):
        med, p95 = _percentiles(stats[key])
        out[f"{name}_median"] = med
        out[f"{name}_p95"] = p95
    out["converged_fraction"] = float(np.mean(stats["status"] == int(GDDStatus.CONVERGED)))
    out["replay_max_error"] = float(np.nanmax(err))
    return out


# --------------------------------------------------------------------------- command line


def main(argv=None) -> int:
    """``python -m contactopt.solvers.gdd.dataset record|replay ...`` (see the module docstring)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m contactopt.solvers.gdd.dataset",
                                description="Record goal-directed session datasets and replay them for timing.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="record a dataset")
    r.add_argument("model", help="humanoid, hand, or an MJCF path")
    r.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    r.add_argument("--seconds", type=float, default=None, help="session length (default: the preset's)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", type=Path, required=True, help="output .npz")
    r.add_argument("--workers", type=int, default=1,
                   help="sessions recorded at once in worker processes (default 1: one after the other here); "
                        "the dataset is the same for any value")
    q = sub.add_parser("replay", help="replay a dataset and print the timing as JSON")
    q.add_argument("path", type=Path)
    args = p.parse_args(argv)
    try:
        if args.command == "record":
            data = record(args.model, args.records, args.out, seconds=args.seconds, seed=args.seed,
                          workers=args.workers)
            print(json.dumps({"path": str(args.out), "records": len(data), **data.info}, indent=2))
        else:
            print(json.dumps(replay(GDDDataset.load(args.path)), indent=2))
    except ContactoptError as exc:
        print(f"contactopt: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
