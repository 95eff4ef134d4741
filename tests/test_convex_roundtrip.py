"""Convex inverse-then-forward round trip on 500 random humanoid states (issue 26, last bullet).

States: :func:`contactopt.bench.convex_roundtrip.random_states` with seed 2 (seed 0 was used to
tune the forward solver's stopping rule, seed 1 for the 10,000-state measurement in
``docs/experiments/fuzz-and-soak.md``).  For each state ``u = inverse(q, w, w⁺)`` and
``w⁺_fwd = forward(q, w, u)``, both cold.

What is asserted, and why not "≥ 99.9 % within 1e-8":

* every state but at most one (≥ 499 of 500, i.e. ≥ 99.8 %: 99.9 % of 500 is 499.5, and a
  500/500 requirement would only hold reliably for a true rate ≥ 99.98 %) has both solves
  converged, an error within the float64 floor ``max(1e-8, 100 ε · cancelled)`` and ≤ 1e-6.
  Here ``err = max|w⁺_fwd − w⁺| / max(1, |w⁺|)`` and ``cancelled = max|M⁻¹Jᵀf| / max(1, |w⁺|)``,
  the size of the two terms ``w + hM⁻¹(n + u)`` and ``M⁻¹Jᵀf`` whose sum is ``w⁺``;
* the floor, not 1e-8: these random targets are mostly infeasible (pushing into the floor), so
  the elastic velocity barrier makes impulses of 1e5–1e7 N·s and ``u`` of 1e8–1e9;
  ``cancelled`` is then 1e6–1e8 and a one-ulp change of ``u`` alone moves ``w⁺`` by
  2e-9–3e-8 (measured), so the plain 1e-8 test is below double precision for a large share of
  this distribution and no solver passes 99.9 % of it (about 62 % pass; see the experiment
  notes).  100 ulps is above the worst ratio measured (81, seed 1); before the stopping-rule
  fix the worst states were 1e-5–5e-3 off, i.e. 1e3–1e6 ulps;
* the one state allowed is statistical headroom, not a known failure: with the solver's
  earlier default ``max_iter`` = 100, seed 2's state 484 (n = 123 rows) was a forward solve
  that stopped at the limit in its last continuation stage (error 4.5); with the default 300
  it converges, and so does the one such state of 2,000 of seed 1 (2026-11-27).
"""

import numpy as np
import pytest

from contactopt.bench.convex_roundtrip import (
    EPS,
    FLOOR_ULPS,
    PASS_TOL,
    random_states,
    round_trip_errors,
)
from contactopt.contact import ContactStatus
from contactopt.contact.convex_dynamics import ConvexDynamics
from contactopt.model import load_model

STATES = 500
SEED = 2


@pytest.mark.slow
def test_inverse_then_forward_round_trip_on_random_states():
    model = load_model("humanoid", timestep=0.01)
    dyn = ConvexDynamics(model)
    errs, inv_st, fwd_st, cancelled = round_trip_errors(dyn, random_states(model, STATES, SEED))
    floor = np.maximum(PASS_TOL, FLOOR_ULPS * EPS * cancelled)
    ok = ((inv_st == int(ContactStatus.CONVERGED)) & (fwd_st == int(ContactStatus.CONVERGED))
          & (errs <= floor) & (errs <= 1e-6))
    bad = np.flatnonzero(~ok)
    detail = [(int(i), float(errs[i]), float(cancelled[i]), int(inv_st[i]), int(fwd_st[i])) for i in bad[:5]]
    assert bad.size <= 1, detail
