"""``contactopt bench contact``: the convex contact model's Table 1, consistency, and the ball drop.

Rows (Todorov 2011, Table 1 and Fig. 4): contact-space problems built from states of
the humanoid (or each ``--model``) at h = 10 ms with the paper's parameters (κ = 0.1,
q = 10, R from 0.01 to 100 over w_max = 0.1), with 2, 5, 10 and 20 active contacts:

* states come from a MuJoCo simulation of the model falling from its ``home``
  keyframe and lying (from ``lying`` when it has one) under random pushes; a problem
  with k contacts keeps the k closest contacts of a state that has at least k (and
  drops joint limits), so ``A = J M⁻¹ Jᵀ``, ``c``, ``v_min``, ``R`` are those of the
  sub-selected rows;
* ``iterations_median``: Newton iterations of the inverse from a cold start (the
  paper's Fig. 4 left); ``forward_iterations_median`` likewise for the forward;
* ``inverse_per_s``, ``forward_per_s``: evaluations per second on one thread through
  the batched entry point (``ConvexContactModel.inverse_batch``/``forward_batch``,
  cold starts, the whole batch in one compiled call);
* ``reference_per_s``: the exact forward problem 13 with the same R solved by
  Clarabel (set up and solved per problem, as a user would), when clarabel is
  installed (``pip install clarabel``), else null;
* ``consistency_max_rel_err``: the largest of ``|c_inv(v_fwd(c)) − c|/|c|`` and
  ``|v_fwd(c_inv(v)) − v|/|v|`` (∞-norms) over the batch, with ``v`` the forward
  velocities perturbed by N(0, 0.05 m/s) so that many are infeasible.

The ball drop (paper Fig. 3) runs the bundled ``ball`` (1 kg, r = 0.1 m, h = 1 ms)
dropped from 0.5 m with κ = 1e-5 (κ scales with impulse × velocity: a 1 kg ball at
1 ms carries impulses of ~0.01 N·s, the humanoid at 10 ms several N·s), once with
the paper's linear R schedule (eq. 24) and once with the ``smooth-onset`` schedule,
and reports when the impulse starts, its size at onset, the deepest penetration and
the rest state.  With eq. 24 the impulse steps up to ``−c/(A + R_max)`` (≈ 30 % of
its peak here) when the ball crosses w_max, because R is finite there; the
smooth-onset schedule (R → ∞ at w_max) starts it from zero.  With ``--plots DIR``
it writes ``DIR/ball_drop.png`` (vertical velocity, vertical impulse and gap against time).
"""

from __future__ import annotations

import os
from pathlib import Path

import mujoco
import numpy as np

from ..contact import ContactBatch, ConvexContactModel
from ..contact.convex_dynamics import ConvexDynamics
from ..errors import ParameterError
from ..model import load_model, model_name, reset_to_keyframe
from ..progress import progress_bar
from . import Benchmark, format_table, median, register_benchmark, time_per_call
from .timing import DEFAULT_REPEATS, check_repeats, load_average, paired_ratio

__all__ = ["contact_problems", "benchmark_contacts", "ball_drop", "run"]

CONTACT_COUNTS = (2, 5, 10, 20)
BENCH_TIMESTEP = 0.01
PROBLEMS_PER_ROW = 200
BALL_KAPPA = 1e-5


# --------------------------------------------------------------------------- problems


def _state_pool(model: mujoco.MjModel, seed: int = 0, seconds: float = 3.0) -> list[tuple]:
    """(qpos, qvel) samples of the model falling and lying under random pushes (MuJoCo dynamics)."""
    rng = np.random.default_rng(seed)
    keys = ["home"] + (["lying"] if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "lying") >= 0 else [])
    pool = []
    for key in keys:
        data = mujoco.MjData(model)
        reset_to_keyframe(model, data, key)
        steps = int(round(seconds / model.opt.timestep))
        for k in range(steps):
            if k % 25 == 0:
                data.xfrc_applied[:] = 0.0
                body = int(rng.integers(1, model.nbody))
                data.xfrc_applied[body, :3] = rng.normal(scale=100.0, size=3)
            data.ctrl[:] = rng.uniform(-0.3, 0.3, model.nu) if model.nu else 0.0
            mujoco.mj_step(model, data)
            if not np.isfinite(data.qpos).all():
                break
            if k % 3 == 0:
                pool.append((data.qpos.copy(), data.qvel.copy()))
    return pool


def contact_problems(model: mujoco.MjModel, contacts: int, count: int = PROBLEMS_PER_ROW, *,
                     contact_model: ConvexContactModel | None = None, seed: int = 0, pool=None):
    """``count`` contact-space problems with exactly ``contacts`` contacts from states of ``model``.

    Returns:
      ``(batch, c)``: a :class:`ContactBatch` and the concatenated ``c`` vectors; or
      ``(None, None)`` when no state has that many contacts within ``w_max``.
    """
    cm = contact_model or ConvexContactModel()
    dyn = ConvexDynamics(model, cm)
    rng = np.random.default_rng(seed)
    pool = _state_pool(model, seed) if pool is None else pool
    order = rng.permutation(len(pool))
    As, cs, mus, vmins, Rs = [], [], [], [], []
    for idx in order:
        qpos, qvel = pool[idx]
        p = dyn.problem(qpos, qvel)
        s = p.space
        if s.n_contacts < contacts:
            continue
        keep = np.sort(np.argsort(s.distance[s.n_limits:], kind="stable")[:contacts])
        rows = (s.n_limits + 3 * keep[:, None] + np.arange(3)).ravel()
        J = s.J[rows]
        As.append(p.A[np.ix_(rows, rows)])
        cs.append(J @ (qvel + p.timestep * p.qacc_smooth))
        mus.append(s.friction[keep])
        vmins.append(p.v_min[s.n_limits + keep])
        Rs.append(p.R[rows])
        if len(As) == count:
            break
    if not As:
        return None, None
    while len(As) < count:  # cycle through the states found
        i = len(As) % len(cs)
        As.append(As[i]); cs.append(cs[i]); mus.append(mus[i]); vmins.append(vmins[i]); Rs.append(Rs[i])
    batch = ContactBatch(As, friction=mus, v_min=vmins, R=Rs, n_limits=[0] * count)
    return batch, np.concatenate(cs)


def _max_rel_err(batch, got, want):
    worst = 0.0
    for p in range(batch.count):
        s, e = batch.offsets[p], batch.offsets[p + 1]
        scale = max(np.abs(want[s:e]).max(), 1e-12)
        worst = max(worst, float(np.abs(got[s:e] - want[s:e]).max() / scale))
    return worst


def _clarabel_solver(batch, c):
    """``solve()`` that solves the batch's next exact forward problem with Clarabel (set-up +
    solve, cycling through the problems), or None without clarabel."""
    from ..contact.reference import clarabel_available, solve_forward_exact

    if not clarabel_available():
        return None
    problems = []
    for p in range(batch.count):
        s, e = batch.offsets[p], batch.offsets[p + 1]
        n = e - s
        A = batch.A_flat[batch.a_offsets[p]:batch.a_offsets[p] + n * n].reshape(n, n)
        problems.append((A, c[s:e], batch.friction[batch.contact_offsets[p]:batch.contact_offsets[p + 1]],
                         batch.v_min[batch.normal_offsets[p]:batch.normal_offsets[p + 1]], batch.R[s:e]))
    state = {"i": 0}

    def solve():
        A, ci, mu, vmin, R = problems[state["i"] % len(problems)]
        state["i"] += 1
        solve_forward_exact(A, ci, friction=mu, v_min=vmin, R=R)

    return solve


def benchmark_contacts(model: mujoco.MjModel, contacts: int, *, min_time: float = 0.2, pool=None,
                       contact_model: ConvexContactModel | None = None,
                       repeats: int = DEFAULT_REPEATS) -> dict | None:
    """One Table-1 row (see the module docstring), or None if no state has ``contacts`` contacts.

    The ratios ``inverse_vs_reference`` and ``forward_vs_reference`` (Clarabel seconds per
    problem ÷ ours) are medians over ``repeats`` interleaved pairs of blocks
    (:func:`~contactopt.bench.timing.paired_ratio`), with their interquartile ranges
    ``*_iqr``."""
    cm = contact_model or ConvexContactModel()
    batch, c = contact_problems(model, contacts, contact_model=cm, pool=pool)
    if batch is None:
        return None
    fwd = cm.forward_batch(batch, c)
    inv = cm.inverse_batch(batch, fwd.v)
    rng = np.random.default_rng(1)
    v_pert = fwd.v + rng.normal(scale=0.05, size=fwd.v.shape)
    inv2 = cm.inverse_batch(batch, v_pert)
    fwd2 = cm.forward_batch(batch, inv2.c)
    converged = bool(fwd.all_converged and inv.all_converged and inv2.all_converged and fwd2.all_converged)
    consistency = max(_max_rel_err(batch, inv.c, c), _max_rel_err(batch, fwd2.v, v_pert))
    inverse = lambda: cm.inverse_batch(batch, fwd.v)
    forward = lambda: cm.forward_batch(batch, c)
    reference = _clarabel_solver(batch, c)
    block = max(min_time / 4, 0.02)
    n = batch.count
    if reference is not None:
        # Clarabel (the yardstick) against each batched evaluation, in interleaved blocks
        inv_pair = paired_ratio(reference, inverse, repeats=repeats, block_time=block, per_call_b=n)
        fwd_pair = paired_ratio(reference, forward, repeats=repeats, block_time=block, per_call_b=n)
        t_ref = float(np.median(inv_pair.a + fwd_pair.a))
        t_inv, t_fwd = float(np.median(inv_pair.b)), float(np.median(fwd_pair.b))
        spread = {"inverse_vs_reference_iqr": list(inv_pair.iqr), "forward_vs_reference_iqr": list(fwd_pair.iqr),
                  "repeats": inv_pair.repeats}
    else:
        t_inv = time_per_call(inverse, min_time=min_time) / n
        t_fwd = time_per_call(forward, min_time=min_time) / n
        t_ref, spread = None, {"repeats": None}
    return {
        "contacts": int(contacts),
        "problems": int(batch.count),
        "iterations_median": median(inv.iterations.tolist()),
        "forward_iterations_median": median(fwd.iterations.tolist()),
        "inverse_per_s": 1.0 / t_inv,
        "forward_per_s": 1.0 / t_fwd,
        "reference_per_s": None if t_ref is None else 1.0 / t_ref,
        "inverse_vs_reference": None if t_ref is None else inv_pair.median,
        "forward_vs_reference": None if t_ref is None else fwd_pair.median,
        **spread,
        "consistency_max_rel_err": consistency,
        "all_converged": converged,
    }


# --------------------------------------------------------------------------- ball drop


def ball_drop(*, kappa: float = BALL_KAPPA, schedule: str = "linear", drop_height: float = 0.5,
              seconds: float = 1.2) -> dict:
    """Simulate the bundled ball dropped from ``drop_height`` [m] (gap to the floor) with the convex model.

    ``kappa`` and ``schedule`` set the :class:`ConvexContactModel` (other parameters: the paper's).

    Returns:
      ``{"time", "gap", "velocity", "impulse"}`` arrays (s, m, m/s, N·s per step) and a
      ``"summary"`` dict: impulse onset gap, deepest penetration, final gap/velocity/impulse.
    """
    from ..simulate import simulate

    model = load_model("ball")
    radius = float(model.geom("ball").size[0])
    cm = ConvexContactModel(kappa=kappa, schedule=schedule)
    result = simulate(model, seconds, qpos=[0, 0, radius + drop_height, 1, 0, 0, 0], contact="convex",
                      contact_model=cm, progress=False)
    h = model.opt.timestep
    gap = result.qpos[:, 2] - radius
    impulse = result.normal_force * h
    weight_impulse = float(model.body_mass.sum() * -model.opt.gravity[2] * h)
    onset = int(np.argmax(impulse > 1e-4 * weight_impulse))
    touchdown = int(np.argmax(gap < 1e-3))
    summary = {
        "timestep": h, "kappa": kappa, "w_max": cm.w_max, "schedule": schedule,
        "impulse_onset_time": float(result.time[onset]), "impulse_onset_gap": float(gap[onset]),
        "touchdown_time": float(result.time[touchdown]),
        "max_penetration": float(max(0.0, -gap.min())), "min_gap": float(gap.min()),
        "peak_impulse": float(impulse.max()), "onset_impulse": float(impulse[onset]),
        "max_step_change_over_peak": float(np.abs(np.diff(impulse)).max() / max(impulse.max(), 1e-300)),
        "final_gap": float(gap[-1]),
        "final_velocity": float(result.qvel[-1, 2]), "final_impulse": float(impulse[-1]),
        "weight_impulse": weight_impulse,
        "unconverged_steps": int(result.extra["contact_unconverged_steps"]),
    }
    return {"time": result.time, "gap": gap, "velocity": result.qvel[:, 2], "impulse": impulse,
            "summary": summary}


def plot_ball_drop(drops: list[dict], path: str | os.PathLike) -> None:
    """The paper's Fig. 3: vertical velocity and vertical impulse against time (plus the gap),
    one line per :func:`ball_drop` result in ``drops``."""
    from ..plots import new_figure, save_figure

    fig, axes = new_figure(3, row_height=2.2)
    first = drops[0]["summary"]
    axes[0, 0].set_title(f"ball drop with the convex contact model: h = {first['timestep'] * 1e3:g} ms, "
                         f"κ = {first['kappa']:g}, w_max = {first['w_max']:g} m")
    styles = ["tab:blue", "tab:orange", "tab:green"]
    for drop, color in zip(drops, styles):
        s = drop["summary"]
        label = f"R schedule: {s['schedule']}" + (" (eq. 24)" if s["schedule"] == "linear" else "")
        t = drop["time"]
        axes[0, 0].plot(t, drop["velocity"], color=color, lw=1.4, label=label)
        axes[1, 0].plot(t, drop["impulse"], color=color, lw=1.4, label=label)
        axes[2, 0].plot(t, 1e3 * drop["gap"], color=color, lw=1.4, label=label)
        for row in axes[:, 0]:
            row.axvline(s["impulse_onset_time"], color=color, lw=0.8, ls=":")
    axes[0, 0].set_ylabel("vertical velocity [m/s]")
    axes[0, 0].legend(loc="lower left", fontsize=8)
    axes[1, 0].axhline(first["weight_impulse"], color="gray", lw=0.8, ls="--", label="weight × h")
    axes[1, 0].set_ylabel("vertical impulse [N·s]")
    axes[1, 0].legend(loc="upper right", fontsize=8)
    ax = axes[2, 0]
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.axhline(1e3 * first["w_max"], color="gray", lw=0.8, ls="--")
    ax.set_ylabel("gap to floor [mm]")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("time [s]  (dotted: impulse onset)")
    for row in axes[:, 0]:
        row.grid(alpha=0.3)
    save_figure(fig, path)


# --------------------------------------------------------------------------- run


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, plots=None,
        repeats: int = DEFAULT_REPEATS) -> dict:
    """Run the benchmark; ``models`` default to the humanoid; ``plots`` a directory for PNGs.

    Returns:
      ``{"rows": [...], "models": [{"name", "rows"}...], "ball_drop": {...}, "plots": [...]}``;
      ``rows`` are the first model's (the issue's JSON form).
    """
    if plots is not None:
        plots = Path(plots)
        if not plots.is_dir():
            raise ParameterError(f"--plots: {plots} is not an existing directory")
    repeats = check_repeats(repeats)
    load_start = load_average()
    names = list(models) if models else ["humanoid"]
    loaded = [load_model(n, timestep=BENCH_TIMESTEP) for n in names]
    out_models = []
    with progress_bar(total=len(loaded) * len(CONTACT_COUNTS) + 1, desc="bench contact", unit="row",
                      enable=progress) as bar:
        for model in loaded:
            pool = _state_pool(model)
            rows, skipped = [], []
            for k in CONTACT_COUNTS:
                row = benchmark_contacts(model, k, min_time=min_time, pool=pool, repeats=repeats)
                if row is not None:
                    rows.append(row)
                else:
                    skipped.append(k)
                bar.update(1)
            out_models.append({"name": model_name(model), "nv": int(model.nv), "rows": rows,
                               "skipped_contact_counts": skipped})
        drops = [ball_drop(schedule="linear"), ball_drop(schedule="smooth-onset")]
        bar.update(1)
    written = []
    if plots is not None:
        path = plots / "ball_drop.png"
        plot_ball_drop(drops, path)
        written.append(str(path))
    return {"rows": out_models[0]["rows"], "models": out_models,
            "ball_drop": [d["summary"] for d in drops],
            "plots": written, "paper_table_1": PAPER_TABLE_1, "threads": 1, "repeats": repeats,
            "loadavg_1min": {"start": load_start, "end": load_average()}}


# the paper's single-thread inverse evaluations per second (3 GHz Core 2, 2011)
PAPER_TABLE_1 = {"2": 241_774, "5": 54_190, "10": 12_991, "20": 2_361}


def _ratio_text(row: dict, key: str):
    """``median× [q25–q75]`` of a ratio column (None when Clarabel is missing)."""
    if row.get(key) is None:
        return None
    q25, q75 = row.get(key + "_iqr") or (row[key], row[key])
    return f"{row[key]:.1f}x [{q25:.1f}-{q75:.1f}]"


def table(result: dict) -> str:
    """Readable tables of a :func:`run` result."""
    parts = []
    cols = [("contacts", "contacts", "{}"), ("iterations_median", "inv iters", "{:g}"),
            ("forward_iterations_median", "fwd iters", "{:g}"),
            ("inverse_per_s", "inverse/s", "{:,.0f}"), ("paper", "paper inv/s", "{:,.0f}"),
            ("forward_per_s", "forward/s", "{:,.0f}"), ("reference_per_s", "Clarabel/s", "{:,.0f}"),
            ("inverse_vs_reference", "inv/ref", "{}"), ("forward_vs_reference", "fwd/ref", "{}"),
            ("consistency_max_rel_err", "consistency", "{:.1e}")]
    for m in result["models"]:
        rows = [dict(r, paper=PAPER_TABLE_1.get(str(r["contacts"])),
                     **{k: _ratio_text(r, k) for k in ("inverse_vs_reference", "forward_vs_reference")})
                for r in m["rows"]]
        parts.append(f"{m['name']} (nv = {m['nv']}), one thread, batches of {PROBLEMS_PER_ROW} problems:")
        parts.append(format_table(rows, cols))
        if m.get("skipped_contact_counts"):
            parts.append(f"  no state of {m['name']} reached {m['skipped_contact_counts']} contacts within w_max")
    for b in result["ball_drop"]:
        parts.append(
            f"ball drop (h = {b['timestep'] * 1e3:g} ms, κ = {b['kappa']:g}, {b['schedule']} R): impulse "
            f"starts {1e3 * b['impulse_onset_gap']:.1f} mm above the floor at "
            f"{100 * b['onset_impulse'] / b['peak_impulse']:.1f} % of its peak, largest step change "
            f"{100 * b['max_step_change_over_peak']:.0f} % of the peak, deepest penetration "
            f"{1e3 * b['max_penetration']:.3f} mm, rests {1e3 * b['final_gap']:.3f} mm above the floor "
            f"with impulse {b['final_impulse']:.5f} N·s (weight × h = {b['weight_impulse']:.5f})")
    for p in result["plots"]:
        parts.append(f"wrote {p}")
    return "\n".join(parts)


register_benchmark(Benchmark(
    "contact",
    "convex contact model: inverse/forward evaluations per second vs Clarabel, ball drop",
    run, table, ("plots", "repeats")))
