"""Bounded recording of GDD sessions (issue 26: the humanoid-reach soak grew +24 % RSS).

A session used to keep every step's state and statistics (~1.35 kB per 5 ms humanoid step) for
its whole length.  Now the report's figures (goals, support fraction, solver statistics) come
from running summaries that see every step in bounded memory, and a long session records only
the series fields at the series rate (``record="series"``; ``"auto"`` picks it past
``STEP_RECORD_LIMIT`` steps).  Short sessions keep every step and report exactly as before.
"""

from __future__ import annotations

import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.solvers.gdd import session_runner
from contactopt.solvers.gdd.session_runner import (
    STEP_ONLY_FIELDS,
    _Recorder,
    _Reservoir,
    gdd_statistics,
)
from contactopt.solvers.gdd.sessions import humanoid_reach_spec, run_session

WALL_CLOCK = ("solve_us_median", "solve_us_mean", "step_us_median", "step_us_mean")


def _goal_results_per_step(result):
    """The per-step formula the runner used before the running summaries (every step recorded)."""
    t, dist, act = result.time, result.target_distance, result.active
    out = []
    for k, dr in enumerate(result.spec.drags):
        sel = np.flatnonzero(act == k)
        row = {"completed": bool(sel.size and t[sel[-1]] + result.timestep >= dr.end - 1e-9)}
        if sel.size:
            dd = dist[sel]
            hit = np.flatnonzero(dd <= result.spec.reach_tolerance)
            row.update(initial_distance=float(dd[0]), final_distance=float(dd[-1]), min_distance=float(dd.min()),
                       reached=bool(hit.size), time_reached=float(t[sel[hit[0]]]) if hit.size else None)
        out.append(row)
    return out


@pytest.fixture(scope="module")
def two_sessions():
    spec = humanoid_reach_spec(seconds=2.0)
    return run_session(spec, record="steps"), run_session(spec, record="series")


def test_running_summaries_match_the_per_step_formulas(two_sessions):
    full, _ = two_sessions
    assert full.record == "steps" and full.stride == 1 and full.steps == 400
    for got, want in zip(full.goal_results(), _goal_results_per_step(full)):
        assert {k: got[k] for k in want} == want
    report = full.report()
    assert report["gdd"] == gdd_statistics(full.arrays)  # exact: the session is below the reservoir size
    sup = full.support
    assert report["support_contact_fraction"] == float(np.mean(np.all(sup, axis=1)))
    assert report["gdd"]["converged_fraction"] == float(np.mean(full.status == 0))


def test_series_recording_keeps_the_report_and_the_series(two_sessions):
    full, series = two_sessions
    assert series.record == "series" and series.stride == 10 and series.steps == full.steps
    assert len(series.time) == 40 and not set(STEP_ONLY_FIELDS) & set(series.arrays)
    for key, rows in series.arrays.items():  # every 10th row of the full recording
        if key not in ("solve_time", "step_time"):
            np.testing.assert_array_equal(rows, full.arrays[key][::10], err_msg=key)
    rf, rs = full.report(), series.report()
    assert set(rf) == set(rs) and set(rf["gdd"]) == set(rs["gdd"])
    for key in rf:
        if key not in ("wall_time_s", "realtime_factor", "gdd"):
            assert rs[key] == rf[key], key
    for key in rf["gdd"]:
        if key not in WALL_CLOCK:
            assert rs["gdd"][key] == rf["gdd"][key], key
    with pytest.raises(AttributeError, match="record='steps'"):
        _ = series.qpos
    with pytest.raises(KeyError, match="record='steps'"):
        series.arrays["qacc"]
    # a coarser report series is every n-th recorded row; a finer one is the recorded rate
    assert rs["series"]["time"] == rf["series"]["time"]
    assert series.report(series_rate=10.0)["series"]["time"] == rf["series"]["time"][::2]
    assert len(series.report(series_rate=200.0)["series"]["time"]) == 40


def test_plot_of_a_series_recording(two_sessions, tmp_path):
    _, series = two_sessions
    path = tmp_path / "s.png"
    session_runner.plot_session(series, path)
    assert path.stat().st_size > 0


def test_auto_records_every_step_only_for_short_sessions(monkeypatch):
    spec = humanoid_reach_spec(seconds=1.0)
    exact = run_session(spec).report()
    monkeypatch.setattr(session_runner, "STEP_RECORD_LIMIT", 100)  # 200 steps: past the limit
    result = run_session(spec)
    assert result.record == "series" and result.summary.solver.capacity == 100
    assert not result.summary.solver.exact and result.summary.solver.rows.shape[0] == 100
    sampled = result.report()
    for key in ("success", "goals", "goals_reached", "support_contact_fraction", "series", "steps"):
        assert sampled[key] == exact[key], key
    assert sampled["gdd"]["iterations_median"] == exact["gdd"]["iterations_median"]
    assert sampled["gdd"]["converged_fraction"] == exact["gdd"]["converged_fraction"]
    with pytest.raises(ParameterError, match="record"):
        run_session(spec, record="everything")
    with pytest.raises(ParameterError, match="series_rate"):
        run_session(spec, series_rate=0.0)


def test_reservoir_is_exact_then_a_bounded_uniform_sample():
    rng = np.random.default_rng(0)
    x = rng.lognormal(size=200_000)
    r = _Reservoir(("x", "y"), 1000)
    for k in range(500):
        r.add((x[k], np.nan if k % 5 == 0 else 1.0))
    assert r.exact and r.percentile("x", 50) == float(np.percentile(x[:500], 50))
    assert r.mean("x") == float(np.mean(x[:500])) and r.finite == [500, 400] and r.mean("y") == 1.0
    for v in x[500:]:
        r.add((v, 2.0))
    assert not r.exact and r.count == x.size and r.rows.shape == (1000, 2)  # bounded
    assert r.mean("x") == pytest.approx(np.mean(x), rel=1e-12)  # running sums: exact up to rounding
    for q in (50, 95):  # a uniform sample of 1000: the quantile within a few percent
        assert r.percentile("x", q) == pytest.approx(np.percentile(x, q), rel=0.15)
    # the sample covers the whole stream, not its start (each half holds about half of it)
    late = np.isin(r.values("x"), x[100_000:]).mean()
    assert 0.4 < late < 0.6
    again = _Reservoir(("x", "y"), 1000)
    for k, v in enumerate(x):
        again.add((v, np.nan if k < 500 and k % 5 == 0 else (1.0 if k < 500 else 2.0)))
    np.testing.assert_array_equal(again.rows, r.rows)  # seeded: the same stream, the same sample


def test_series_recorder_allocates_for_rows_not_steps():
    from contactopt.model import load_model

    m = load_model("humanoid")
    rec = _Recorder(m, 10 ** 9, 2, 2, stride=10, every_field=False)
    assert len(rec.a["time"]) == 4096 and "qpos" not in rec.a
    assert rec.row(5) is None and rec.row(20) == 2 and rec.row(10 * 5000) == 5000
    assert len(rec.a["time"]) == 8192 and rec.a["active"][-1] == -1 and np.isnan(rec.a["step_time"][-1])
    assert len(rec.trimmed(21)["time"]) == 3
