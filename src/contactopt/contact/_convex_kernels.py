"""Compiled (numba) kernels of the convex, smooth, invertible contact model.

Layout of one problem (Todorov 2011, sections II–III): the unknown impulse
``f`` has ``n = nl + 3 nc`` components, joint limits first, then one
``(t1, t2, normal)`` triple per contact.  ``m = nl + nc`` normal rows.

Barrier terms (κ fixed, never driven to zero):

* ``d_F(f) = -κ Σ_limits log f_l  -κ Σ_contacts [log(μ² z² - x² - y²) + log z]``
  (friction cone eq. 9 and non-negative normal impulse eq. 10; a contact with
  μ = 0 keeps its tangential impulse at zero and has only the ``log z`` term);
* ``d̄_V(s)`` on ``s = N v - v_min`` (eq. 11) in elastic mode (eq. 25):
  ``-κ log s`` for ``s ≥ s0 = κ/q``, else the quadratic with matching value,
  slope ``-q`` and curvature ``q²/κ`` at ``s0``.  The same d̄_V is used in both
  directions, so forward and inverse are exact inverses of each other.

Forward: minimize ``½ fᵀ(A+R)f + fᵀc + d_F(f) + Σ d̄_V(N(Af+c) - v_min)`` (eq. 17).
Inverse: minimize ``½ fᵀRf + d_F(f) + fᵀ(v + A Nᵀ d̄_V'(Nv - v_min))`` (eq. 23),
which separates into one 3×3 (or 1×1) problem per contact (limit).

Both use a primal Newton method whose step is cut at a fixed fraction of the
analytic distance to the boundary of each cone and half-space, so iterates stay
strictly feasible.  They stop when a full Newton step is below ``tol`` relative to the
largest impulse; the forward solve also wants every gradient row stationary relative to the
terms that cancel in it (``|g_i| ≤ tol · gabs_i``), for at most ``_POLISH_STEPS`` more steps
(direct solve and last continuation stage only; they do not count against the iteration
budget), since one problem's impulses can span 1e0–1e7 and the largest alone sets a loose scale.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._convex_cone import (
    _INF,
    STATUS_CONVERGED,
    STATUS_MAX_ITER,
    STATUS_NUMERICAL,
    _barrier_f,
    _cholesky_solve,
    _cone_grad_hess,
    _cone_step,
    _normal_index,
    _project_into_cone,
    dv_bar,
)

_BOUNDARY_FRACTION = 0.99
# contacts whose tangential impulse exceeds this fraction of the cone radius take polar steps
_POLAR_FRACTION = 0.5
# Newton iterations at the model's κ before the forward solve falls back to continuation
_DIRECT_ITERATIONS = 50
# forward problems of at least this size build the Hessian's low-rank term with BLAS
_BLAS_MIN_SIZE = 24
# extra Newton iterations allowed after the step-size test passes while the optimality residual
# of some row is still above tol relative to its terms (bounded: that residual can sit at rounding)
_POLISH_STEPS = 4


@njit(cache=True)
def _forward_objective(A, c, R, f, mu, vmin, nl, nc, kappa, q, Af):
    """Forward cost (eq. 17 with elastic d̄_V); fills Af = A f.  +inf if f infeasible."""
    n = nl + 3 * nc
    bar = _barrier_f(f, nl, nc, mu, kappa)
    if bar == _INF:
        return _INF
    val = bar
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += A[i, j] * f[j]
        Af[i] = s
        val += f[i] * (0.5 * (s + R[i] * f[i]) + c[i])
    for j in range(nl + nc):
        r = _normal_index(j, nl)
        dv, _, _ = dv_bar(Af[r] + c[r] - vmin[j], kappa, q)
        val += dv
    return val


@njit(cache=True)
def _forward_guess(A, c, R, vmin, nl, nc, kappa, q, H, g, f):
    """Cold start: minimizer of the cost's quadratic part with every normal-velocity
    barrier in its elastic (quadratic) zone, ignoring the impulse barriers:
    ``(A + R + 2a₀ A Nᵀ N A) f = −(c + A Nᵀ(2a₀(N c − v_min) + a₁))``.
    The caller then moves it into the cones (positive normals, tangents inside)."""
    n = nl + 3 * nc
    a0 = 0.5 * q * q / kappa
    a1 = -2.0 * q
    for i in range(n):
        g[i] = c[i]
        for j in range(n):
            H[i, j] = A[i, j]
        H[i, i] += R[i]
    m = nl + nc
    Bn = np.empty((n, m))
    sw = math.sqrt(2.0 * a0)
    for j in range(m):
        r = _normal_index(j, nl)
        w1 = 2.0 * a0 * (c[r] - vmin[j]) + a1
        for a in range(n):
            g[a] += A[a, r] * w1
            Bn[a, j] = A[a, r] * sw
    H += np.dot(Bn, Bn.T)
    if not _cholesky_solve(H, g, f, n):
        for i in range(n):
            f[i] = 0.0


@njit(cache=True)
def forward_solve(A, c, R, mu, vmin, nl, nc, kappa, q, tol, max_iter, f, v, warm):
    """Forward contact problem (A, c) -> (f, v) in place.  Returns (iterations, status).

    ``f`` holds the warm start when ``warm`` is true, else it is initialized here.
    Newton at the model's κ first (at most ``_DIRECT_ITERATIONS`` iterations); if that
    does not converge (a small κ far from the solution makes a pure barrier method
    take many short steps), the solve is repeated as a barrier continuation: κ_s
    from the problem's own scale ``max|c, v_min|² / max diag(A + R)`` (at least 10 κ)
    down to κ by factors of 10, each stage warm-started from the last — a solver
    device only: the answer is still the fixed-κ minimizer.
    """
    n = nl + 3 * nc
    f0 = f.copy()
    it, status = _forward_newton(A, c, R, mu, vmin, nl, nc, kappa, q, tol,
                                 min(max_iter, _DIRECT_ITERATIONS), f, v, warm, _POLISH_STEPS)
    if status == STATUS_CONVERGED:
        return it, status
    total = it
    for i in range(n):
        f[i] = f0[i]
    vel = 1e-12
    for i in range(n):
        vel = max(vel, abs(c[i]))
    for j in range(nl + nc):
        vel = max(vel, abs(vmin[j]))
    diag = 1e-300
    for i in range(n):
        diag = max(diag, A[i, i] + R[i])
    k_s = max(10.0 * kappa, vel * vel / diag)
    if not math.isfinite(k_s):
        # inputs so large (|c| ~ 1e154 or more) that the continuation start overflows: no
        # stage schedule exists (inf * 0.1 stays inf, an endless loop); report the failure
        return total, STATUS_NUMERICAL
    warm_stage = warm
    while True:
        last = k_s <= kappa * (1.0 + 1e-12)
        if last:
            k_s = kappa
        # intermediate stages only warm-start the next one: no residual polishing there
        it, status = _forward_newton(A, c, R, mu, vmin, nl, nc, k_s, q, tol if last else 1e-6,
                                     max_iter, f, v, warm_stage, _POLISH_STEPS if last else 0)
        total += it
        warm_stage = True
        if last:
            break
        k_s = max(kappa, 0.1 * k_s)
    return total, status


@njit(cache=True)
def _trial_point(f, step, alpha, nl, nc, curved, drho, dtheta, out):
    """``out = f + α·step``, except that sliding contacts move along the polar curve
    ``ρ + α dρ, θ + α dθ`` (tangent to the Newton step at α = 0, so the local
    quadratic convergence is kept).  A straight step would leave the curved cone
    surface after a chord of length ~√(2ρ·gap), which limits how fast the sliding
    direction can turn: the crawl along the cone boundary this step avoids."""
    for i in range(nl + 3 * nc):
        out[i] = f[i] + alpha * step[i]
    for k in range(nc):
        if curved[k]:
            o = nl + 3 * k
            x, y = f[o], f[o + 1]
            rho = math.sqrt(x * x + y * y)
            theta = math.atan2(y, x)
            r = rho + alpha * drho[k]
            t = theta + alpha * dtheta[k]
            out[o] = r * math.cos(t)
            out[o + 1] = r * math.sin(t)


@njit(cache=True)
def _forward_newton(A, c, R, mu, vmin, nl, nc, kappa, q, tol, max_iter, f, v, warm, max_polish):
    n = nl + 3 * nc
    m = nl + nc
    H = np.empty((n, n))
    g = np.empty(n)
    gabs = np.empty(n)
    step = np.empty(n)
    Af = np.empty(n)
    ftrial = np.empty(n)
    d1 = np.empty(m)
    d2 = np.empty(m)
    g3 = np.empty(3)
    H3 = np.empty((3, 3))
    curved = np.zeros(nc, dtype=np.bool_)
    Bn = np.empty((n, m))
    drho = np.empty(nc)
    dtheta = np.empty(nc)
    if not warm:
        _forward_guess(A, c, R, vmin, nl, nc, kappa, q, H, g, f)
    for i in range(nl):
        zdef = math.sqrt(kappa / (A[i, i] + R[i]))
        if not (f[i] > zdef) or not math.isfinite(f[i]):
            f[i] = zdef
    for k in range(nc):
        o = nl + 3 * k
        zdef = math.sqrt(kappa / (A[o + 2, o + 2] + R[o + 2]))
        x, y, z = f[o], f[o + 1], f[o + 2]
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            x, y, z = 0.0, 0.0, zdef
        if mu[k] > 0.0:
            # keep the guessed tangential impulse: raise the normal until it fits the cone
            r = math.sqrt(x * x + y * y)
            z = max(z, zdef, r / (0.9 * mu[k]))
        else:
            x, y, z = 0.0, 0.0, max(z, zdef)
        f[o], f[o + 1], f[o + 2] = x, y, z
    obj = _forward_objective(A, c, R, f, mu, vmin, nl, nc, kappa, q, Af)
    status = STATUS_MAX_ITER
    it = 0
    polish = 0
    while it < max_iter + polish:  # polishing steps do not use up the iteration budget
        it += 1
        # gradient and Hessian
        for i in range(n):
            g[i] = Af[i] + R[i] * f[i] + c[i]
            gabs[i] = abs(Af[i]) + abs(R[i] * f[i]) + abs(c[i])
            for j in range(n):
                H[i, j] = A[i, j]
            H[i, i] += R[i]
        for i in range(nl):
            g[i] -= kappa / f[i]
            gabs[i] += kappa / f[i]
            H[i, i] += kappa / (f[i] * f[i])
        for k in range(nc):
            o = nl + 3 * k
            _cone_grad_hess(f[o], f[o + 1], f[o + 2], mu[k], kappa, g3, H3)
            for a in range(3):
                g[o + a] += g3[a]
                gabs[o + a] += abs(g3[a])
                for b in range(3):
                    H[o + a, o + b] += H3[a, b]
        for j in range(m):
            r = _normal_index(j, nl)
            _, d1[j], d2[j] = dv_bar(Af[r] + c[r] - vmin[j], kappa, q)
        # velocity barrier: g += A Nᵀ d̄', H += (A Nᵀ) diag(d̄'') (N A); one BLAS product for
        # large problems, a scalar loop (no call overhead) for small ones
        if n >= _BLAS_MIN_SIZE:
            for j in range(m):
                r = _normal_index(j, nl)
                w1 = d1[j]
                sw = math.sqrt(d2[j])
                for a in range(n):
                    g[a] += A[a, r] * w1
                    gabs[a] += abs(A[a, r] * w1)
                    Bn[a, j] = A[a, r] * sw
            H += np.dot(Bn, Bn.T)
        else:
            for j in range(m):
                r = _normal_index(j, nl)
                w1 = d1[j]
                w2 = d2[j]
                for a in range(n):
                    g[a] += A[a, r] * w1
                    gabs[a] += abs(A[a, r] * w1)
                    t = w2 * A[a, r]
                    for b in range(a + 1):
                        H[a, b] += t * A[b, r]
            for a in range(n):
                for b in range(a):
                    H[b, a] = H[a, b]
        for k in range(nc):  # frictionless contacts: tangential impulse stays zero
            if mu[k] <= 0.0:
                for t in range(2):
                    r = nl + 3 * k + t
                    g[r] = 0.0
                    for b in range(n):
                        H[r, b] = 0.0
                        H[b, r] = 0.0
                    H[r, r] = 1.0
        if not _cholesky_solve(H, g, step, n):
            status = STATUS_NUMERICAL
            break
        # analytic distance to the boundary of every cone and half-space
        amax = _INF
        for i in range(nl):
            if step[i] < 0.0:
                a = -f[i] / step[i]
                if a < amax:
                    amax = a
        for k in range(nc):
            o = nl + 3 * k
            x, y, z = f[o], f[o + 1], f[o + 2]
            rho = math.sqrt(x * x + y * y)
            if mu[k] > 0.0 and rho >= _POLAR_FRACTION * mu[k] * z:
                # sliding contact: polar step, linear in (ρ, z), so the cone bound is linear in α
                curved[k] = True
                cth, sth = x / rho, y / rho
                drho[k] = cth * step[o] + sth * step[o + 1]
                dtheta[k] = (cth * step[o + 1] - sth * step[o]) / rho
                a = _INF
                gap = mu[k] * z - rho
                dgap = mu[k] * step[o + 2] - drho[k]
                if dgap < 0.0:
                    a = -gap / dgap
                gap = mu[k] * z + rho
                dgap = mu[k] * step[o + 2] + drho[k]
                if dgap < 0.0:
                    a = min(a, -gap / dgap)
                if step[o + 2] < 0.0:
                    a = min(a, -z / step[o + 2])
            else:
                curved[k] = False
                a = _cone_step(x, y, z, step[o], step[o + 1], step[o + 2], mu[k])
            if a < amax:
                amax = a
        alpha = 1.0 if amax > 1.0 / _BOUNDARY_FRACTION else _BOUNDARY_FRACTION * amax
        fmax = 0.0
        smax = 0.0
        stationary = True
        for i in range(n):
            fmax = max(fmax, abs(f[i]))
            smax = max(smax, abs(step[i]))
            # optimality residual, row by row, against the size of the terms that cancel in it
            if abs(g[i]) > tol * gabs[i]:
                stationary = False
        small = alpha == 1.0 and smax <= tol * max(fmax, 1e-300)
        if small and not stationary and polish < max_polish:
            # the step is short relative to the largest impulse but some row's residual is not:
            # keep taking (full) Newton steps for a few more iterations
            polish += 1
            small = False
        if small:
            for i in range(n):
                f[i] += step[i]
            _forward_objective(A, c, R, f, mu, vmin, nl, nc, kappa, q, Af)
            status = STATUS_CONVERGED
            break
        accepted = False
        # safeguard: halve the step until the cost does not increase
        for _ in range(30):
            _trial_point(f, step, alpha, nl, nc, curved, drho, dtheta, ftrial)
            new = _forward_objective(A, c, R, ftrial, mu, vmin, nl, nc, kappa, q, Af)
            if new <= obj + 1e-12 * (abs(obj) + kappa * n):
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            _forward_objective(A, c, R, f, mu, vmin, nl, nc, kappa, q, Af)
            if smax <= tol * max(fmax, 1e-300) * 1e3:
                status = STATUS_CONVERGED
            else:
                status = STATUS_NUMERICAL
            break
        for i in range(n):
            f[i] = ftrial[i]
        obj = new
        if small:
            status = STATUS_CONVERGED
            break
        if not math.isfinite(obj):
            status = STATUS_NUMERICAL
            break
    for i in range(n):
        v[i] = Af[i] + c[i]
    return it, status


@njit(cache=True)
def inverse_solve(A, v, R, mu, vmin, nl, nc, kappa, q, tol, max_iter, f, c, warm):
    """Inverse contact problem (A, v) -> (f, c) in place; block-diagonal Newton per contact.

    Returns (iterations = max over blocks, status).
    """
    n = nl + 3 * nc
    m = nl + nc
    # b = v + A Nᵀ d̄_V'(N v - v_min)
    b = np.empty(n)
    for i in range(n):
        b[i] = v[i]
    for j in range(m):
        r = _normal_index(j, nl)
        _, d1, _ = dv_bar(v[r] - vmin[j], kappa, q)
        for i in range(n):
            b[i] += A[i, r] * d1
    status = STATUS_CONVERGED
    iters = 0
    # limits: R f - κ/f + b = 0 has the closed form root
    for i in range(nl):
        r_, bb = R[i], b[i]
        disc = math.sqrt(bb * bb + 4.0 * r_ * kappa)
        f[i] = (2.0 * kappa) / (bb + disc) if bb > 0.0 else (disc - bb) / (2.0 * r_)
    iters = 1 if nl > 0 else 0
    g3 = np.empty(3)
    H3 = np.empty((3, 3))
    for k in range(nc):
        o = nl + 3 * k
        it, st = _inverse_contact(b, R, mu[k], kappa, tol, max_iter, f, o, warm, g3, H3)
        if it > iters:
            iters = it
        if st > status:
            status = st
    for i in range(n):
        s = 0.0
        for j in range(n):
            s += A[i, j] * f[j]
        c[i] = v[i] - s
    return iters, status


@njit(cache=True)
def _inverse_guess(bx, by, bz, rx, ry, rz, mu, zdef):
    """Barrier-free solution of one contact block (stick or slide), pulled into the cone interior.

    Stick: t = -b_t / r_t, z = -b_z / r_z if that lies in the cone.  Slide: t on the
    cone edge opposite b_t with z = (μ|b_t| - b_z) / (r_t μ² + r_z).  The point is then
    moved inside (normal at least the barrier scale ``zdef``, tangent at most 0.9 of the
    cone radius) so Newton starts near the answer whatever the scale of b.
    """
    rt = 0.5 * (rx + ry)
    bt = math.sqrt(bx * bx + by * by)
    z = -bz / rz
    x = -bx / rx
    y = -by / ry
    if not (z > 0.0 and x * x + y * y <= mu * mu * z * z):
        z = (mu * bt - bz) / (rt * mu * mu + rz)
        if bt > 0.0:
            x = -mu * z * bx / bt
            y = -mu * z * by / bt
        else:
            x = 0.0
            y = 0.0
    if not z > zdef:
        z = zdef
    r = math.sqrt(x * x + y * y)
    lim = 0.9 * mu * z
    if r > lim:
        x *= lim / r
        y *= lim / r
    return x, y, z


@njit(cache=True)
def _contact_objective(x, y, z, b, R, o, mu, kappa):
    if z <= 0.0:
        return _INF
    val = 0.5 * (R[o] * x * x + R[o + 1] * y * y + R[o + 2] * z * z) + b[o] * x + b[o + 1] * y + b[o + 2] * z
    val -= kappa * math.log(z)
    if mu > 0.0:
        gc = mu * mu * z * z - x * x - y * y
        if gc <= 0.0:
            return _INF
        val -= kappa * math.log(gc)
    return val


@njit(cache=True)
def _inverse_contact(b, R, mu, kappa, tol, max_iter, f, o, warm, g3, H3):
    """Newton on one contact's 3×3 block of eq. 23 (1×1 in z when μ = 0)."""
    bz, rz = b[o + 2], R[o + 2]
    kk = 2.0 * kappa if mu > 0.0 else kappa
    disc = math.sqrt(bz * bz + 4.0 * rz * kk)
    zdef = (2.0 * kk) / (bz + disc) if bz > 0.0 else (disc - bz) / (2.0 * rz)
    if warm:
        x, y, z = _project_into_cone(f[o], f[o + 1], f[o + 2], mu, zdef)
    else:
        x, y, z = _inverse_guess(b[o], b[o + 1], bz, R[o], R[o + 1], rz, mu, zdef)
    if mu <= 0.0:
        # -κ/z + R z + b_z = 0: closed form
        f[o], f[o + 1], f[o + 2] = 0.0, 0.0, (2.0 * kappa) / (bz + math.sqrt(bz * bz + 4.0 * rz * kappa)) \
            if bz > 0.0 else (math.sqrt(bz * bz + 4.0 * rz * kappa) - bz) / (2.0 * rz)
        return 1, STATUS_CONVERGED
    if R[o] == R[o + 1]:
        return _inverse_contact_isotropic(b, R, mu, kappa, tol, max_iter, f, o, x, y, z)
    obj = _contact_objective(x, y, z, b, R, o, mu, kappa)
    status = STATUS_MAX_ITER
    it = 0
    while it < max_iter:
        it += 1
        _cone_grad_hess(x, y, z, mu, kappa, g3, H3)
        g0 = g3[0] + R[o] * x + b[o]
        g1 = g3[1] + R[o + 1] * y + b[o + 1]
        g2 = g3[2] + R[o + 2] * z + b[o + 2]
        h00 = H3[0, 0] + R[o]
        h11 = H3[1, 1] + R[o + 1]
        h22 = H3[2, 2] + R[o + 2]
        h01, h02, h12 = H3[0, 1], H3[0, 2], H3[1, 2]
        # 3×3 Cholesky solve of H d = -g
        if not h00 > 0.0:
            status = STATUS_NUMERICAL
            break
        l00 = math.sqrt(h00)
        l10 = h01 / l00
        l20 = h02 / l00
        t = h11 - l10 * l10
        if not t > 0.0:
            status = STATUS_NUMERICAL
            break
        l11 = math.sqrt(t)
        l21 = (h12 - l20 * l10) / l11
        t = h22 - l20 * l20 - l21 * l21
        if not t > 0.0:
            status = STATUS_NUMERICAL
            break
        l22 = math.sqrt(t)
        y0 = -g0 / l00
        y1 = (-g1 - l10 * y0) / l11
        y2 = (-g2 - l20 * y0 - l21 * y1) / l22
        dz = y2 / l22
        dy = (y1 - l21 * dz) / l11
        dx = (y0 - l10 * dy - l20 * dz) / l00
        amax = _cone_step(x, y, z, dx, dy, dz, mu)
        alpha = 1.0 if amax > 1.0 / _BOUNDARY_FRACTION else _BOUNDARY_FRACTION * amax
        fmax = max(abs(x), abs(y), abs(z))
        smax = max(abs(dx), abs(dy), abs(dz))
        if alpha == 1.0 and smax <= tol * fmax:
            x, y, z = x + dx, y + dy, z + dz
            status = STATUS_CONVERGED
            break
        accepted = False
        for _ in range(30):
            nx, ny, nz = x + alpha * dx, y + alpha * dy, z + alpha * dz
            new = _contact_objective(nx, ny, nz, b, R, o, mu, kappa)
            if new <= obj + 1e-12 * (abs(obj) + 3.0 * kappa):
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            status = STATUS_CONVERGED if smax <= tol * fmax * 1e3 else STATUS_NUMERICAL
            break
        x, y, z, obj = nx, ny, nz, new
        if alpha == 1.0 and smax <= tol * fmax:
            status = STATUS_CONVERGED
            break
    f[o], f[o + 1], f[o + 2] = x, y, z
    return it, status


# ----------------------------------------------------------------------------- batches


@njit(cache=True)
def solve_batch(inverse, A_flat, a_off, given, R, mu, vmin, nls, ncs, v_off, cn_off, m_off,
                kappa, q, tol, max_iter, f, other, warm, iters, status):
    """Solve every problem of a ragged batch (see ContactBatch for the layout): the inverse
    problems when ``inverse`` (``given`` = v, ``other`` = c), else the forward ones
    (``given`` = c, ``other`` = v)."""
    for p in range(nls.shape[0]):
        _solve_one(inverse, A_flat, a_off, given, R, mu, vmin, nls, ncs, v_off, cn_off, m_off,
                   kappa, q, tol, max_iter, f, other, warm, iters, status, p)


@njit(cache=True, parallel=True)
def solve_batch_parallel(inverse, A_flat, a_off, given, R, mu, vmin, nls, ncs, v_off, cn_off,
                         m_off, kappa, q, tol, max_iter, f, other, warm, iters, status):
    """Same as :func:`solve_batch`, problems spread over threads."""
    for p in prange(nls.shape[0]):
        _solve_one(inverse, A_flat, a_off, given, R, mu, vmin, nls, ncs, v_off, cn_off, m_off,
                   kappa, q, tol, max_iter, f, other, warm, iters, status, p)


@njit(cache=True)
def _solve_one(inverse, A_flat, a_off, given, R, mu, vmin, nls, ncs, v_off, cn_off, m_off,
               kappa, q, tol, max_iter, f, other, warm, iters, status, p):
    nl, nc = nls[p], ncs[p]
    n = nl + 3 * nc
    s, e = v_off[p], v_off[p + 1]
    A = A_flat[a_off[p]:a_off[p] + n * n].reshape((n, n))
    mu_p = mu[cn_off[p]:cn_off[p + 1]]
    vmin_p = vmin[m_off[p]:m_off[p + 1]]
    if inverse:
        iters[p], status[p] = inverse_solve(A, given[s:e], R[s:e], mu_p, vmin_p, nl, nc, kappa, q,
                                            tol, max_iter, f[s:e], other[s:e], warm)
    else:
        iters[p], status[p] = forward_solve(A, given[s:e], R[s:e], mu_p, vmin_p, nl, nc, kappa, q,
                                            tol, max_iter, f[s:e], other[s:e], warm)


@njit(cache=True)
def check_psd_batch(A_flat, a_off, ns, R, v_off, rel_sym_tol, rel_psd_tol):
    """First problem whose A is not symmetric (code 1), not positive semidefinite (code 2:
    ``A + rel_psd_tol·max|A|·I`` has no Cholesky factor) or whose ``A + R`` is not positive
    definite (code 3); ``(-1, 0)`` if all are good.  ``A = J M⁻¹ Jᵀ`` is singular whenever
    the contact space has more rows than degrees of freedom, so A itself is only PSD."""
    for p in range(ns.shape[0]):
        n = ns[p]
        A = A_flat[a_off[p]:a_off[p] + n * n].reshape((n, n))
        scale = 0.0
        for i in range(n):
            for j in range(n):
                scale = max(scale, abs(A[i, j]))
        for i in range(n):
            for j in range(i):
                if abs(A[i, j] - A[j, i]) > rel_sym_tol * scale:
                    return p, 1
        g = np.zeros(n)
        out = np.empty(n)
        L = A.copy()
        for i in range(n):
            L[i, i] += rel_psd_tol * scale + 1e-300
        if not _cholesky_solve(L, g, out, n):
            return p, 2
        L = A.copy()
        for i in range(n):
            L[i, i] += R[v_off[p] + i]
        if not _cholesky_solve(L, g, out, n):
            return p, 3
    return -1, 0


@njit(cache=True)
def _iso_objective(u, z, beta, rt, bz, rz, mu, kappa):
    w = 2.0 * mu * z - u
    if u <= 0.0 or w <= 0.0 or z <= 0.0:
        return _INF
    rho = mu * z - u
    return (0.5 * rt * rho * rho - beta * rho + 0.5 * rz * z * z + bz * z
            - kappa * (math.log(u) + math.log(w) + math.log(z)))


@njit(cache=True)
def _inverse_contact_isotropic(b, R, mu, kappa, tol, max_iter, f, o, x, y, z):
    """One contact block with equal tangential regularizers, solved in 2D.

    The optimal tangential impulse is anti-parallel to b_t, ``t = -ρ b̂_t``, leaving
    ``(ρ, z)``.  Newton runs in ``(u, z)`` with ``u = μz − ρ`` the distance to the cone
    edge, so the barrier ``−κ[log u + log(2μz − u) + log z]`` is evaluated without the
    cancellation in ``μ²z² − |t|²`` that limits precision near the cone boundary.
    (An affine change of variables: the Newton iterates are the same as in (ρ, z).)
    """
    rt, rz, bz = R[o], R[o + 2], b[o + 2]
    beta = math.sqrt(b[o] * b[o] + b[o + 1] * b[o + 1])
    if beta > 0.0:
        rho = -(x * b[o] + y * b[o + 1]) / beta
    else:
        rho = 0.0
    lim = 0.9 * mu * z
    if rho > lim:
        rho = lim
    if rho < -lim:
        rho = -lim
    u = mu * z - rho
    obj = _iso_objective(u, z, beta, rt, bz, rz, mu, kappa)
    status = STATUS_MAX_ITER
    it = 0
    while it < max_iter:
        it += 1
        w = 2.0 * mu * z - u
        rho = mu * z - u
        e = rt * rho - beta
        iu, iw, iz = 1.0 / u, 1.0 / w, 1.0 / z
        gu = -e - kappa * iu + kappa * iw
        gz = mu * e + rz * z + bz - 2.0 * mu * kappa * iw - kappa * iz
        huu = rt + kappa * (iu * iu + iw * iw)
        huz = -mu * rt - 2.0 * mu * kappa * iw * iw
        hzz = mu * mu * rt + rz + 4.0 * mu * mu * kappa * iw * iw + kappa * iz * iz
        det = huu * hzz - huz * huz
        if not det > 0.0:
            status = STATUS_NUMERICAL
            break
        du = -(hzz * gu - huz * gz) / det
        dz = -(huu * gz - huz * gu) / det
        # analytic distance to the boundaries u = 0, w = 0, z = 0
        amax = _INF
        if du < 0.0:
            amax = min(amax, -u / du)
        dw = 2.0 * mu * dz - du
        if dw < 0.0:
            amax = min(amax, -w / dw)
        if dz < 0.0:
            amax = min(amax, -z / dz)
        alpha = 1.0 if amax > 1.0 / _BOUNDARY_FRACTION else _BOUNDARY_FRACTION * amax
        small = abs(du) <= tol * u and abs(dz) <= tol * z
        if small and alpha == 1.0:
            # converged: the cost change is below rounding, so take the step without testing it
            u += du
            z += dz
            status = STATUS_CONVERGED
            break
        accepted = False
        for _ in range(30):
            nu, nz = u + alpha * du, z + alpha * dz
            new = _iso_objective(nu, nz, beta, rt, bz, rz, mu, kappa)
            if new <= obj + 1e-12 * (abs(obj) + 3.0 * kappa + abs(beta * rho) + abs(bz * z) + rz * z * z):
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            big = abs(du) <= 1e3 * tol * u and abs(dz) <= 1e3 * tol * z
            status = STATUS_CONVERGED if big else STATUS_NUMERICAL
            break
        u, z, obj = nu, nz, new
        if alpha == 1.0 and small:
            status = STATUS_CONVERGED
            break
    rho = mu * z - u
    if beta > 0.0:
        f[o] = -rho * b[o] / beta
        f[o + 1] = -rho * b[o + 1] / beta
    else:
        f[o] = 0.0
        f[o + 1] = 0.0
    f[o + 2] = z
    return it, status
