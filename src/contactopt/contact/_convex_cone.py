"""Compiled (numba) helpers shared by the Newton kernels of the convex contact model
(:mod:`contactopt.contact._convex_kernels`): the solver status codes, the elastic-mode velocity
barrier ``d̄_V`` (:func:`dv_bar`), the friction-cone barrier and its derivatives, the step to the
cone's boundary and the projection into it, and a small in-place Cholesky solve."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

STATUS_CONVERGED = 0
STATUS_MAX_ITER = 1
STATUS_NUMERICAL = 2
_INF = np.inf


@njit(cache=True, inline="always")
def dv_bar(s, kappa, q):
    """Elastic-mode velocity barrier: (value, first, second derivative) at ``s``."""
    s0 = kappa / q
    if s >= s0:
        return -kappa * math.log(s), -kappa / s, kappa / (s * s)
    a0 = 0.5 * q * q / kappa
    a1 = -2.0 * q
    a2 = -kappa * math.log(s0) + 1.5 * kappa
    return (a0 * s + a1) * s + a2, 2.0 * a0 * s + a1, 2.0 * a0


@njit(cache=True, inline="always")
def _smallest_positive_root(a, b, c):
    """Smallest t > 0 with a t² + b t + c = 0 (c > 0 assumed), or +inf."""
    best = _INF
    scale = abs(a) + abs(b) + abs(c)
    if abs(a) <= 1e-14 * scale:
        if b < 0.0:
            best = -c / b
        return best
    disc = b * b - 4.0 * a * c
    if disc < 0.0:
        return best
    sq = math.sqrt(disc)
    qq = -0.5 * (b + sq) if b >= 0.0 else -0.5 * (b - sq)
    if qq != 0.0:
        r1 = qq / a
        r2 = c / qq
        if r1 > 0.0 and r1 < best:
            best = r1
        if r2 > 0.0 and r2 < best:
            best = r2
    return best


@njit(cache=True, inline="always")
def _cone_step(x, y, z, dx, dy, dz, mu):
    """Largest α keeping (x,y,z) + α(dx,dy,dz) inside {z > 0, μ² z² ≥ x² + y²}."""
    amax = _INF
    if dz < 0.0:
        amax = -z / dz
    if mu > 0.0:
        m2 = mu * mu
        a = m2 * dz * dz - dx * dx - dy * dy
        b = 2.0 * (m2 * z * dz - x * dx - y * dy)
        c = m2 * z * z - x * x - y * y
        t = _smallest_positive_root(a, b, c)
        if t < amax:
            amax = t
    return amax


@njit(cache=True, inline="always")
def _project_into_cone(x, y, z, mu, z_default):
    """Initial point: positive normal, tangents scaled to half the cone radius if outside."""
    if not (z > 0.0) or not math.isfinite(z):
        z = z_default
    if mu <= 0.0 or not (math.isfinite(x) and math.isfinite(y)):
        return 0.0, 0.0, z
    r = math.sqrt(x * x + y * y)
    lim = mu * z
    if r >= lim:
        s = 0.5 * lim / r
        x *= s
        y *= s
    return x, y, z


@njit(cache=True)
def _barrier_f(f, nl, nc, mu, kappa):
    """d_F(f); +inf outside the feasible set."""
    val = 0.0
    for i in range(nl):
        if f[i] <= 0.0:
            return _INF
        val -= kappa * math.log(f[i])
    for k in range(nc):
        o = nl + 3 * k
        x, y, z = f[o], f[o + 1], f[o + 2]
        if z <= 0.0:
            return _INF
        val -= kappa * math.log(z)
        if mu[k] > 0.0:
            g = mu[k] * mu[k] * z * z - x * x - y * y
            if g <= 0.0:
                return _INF
            val -= kappa * math.log(g)
    return val


@njit(cache=True)
def _cone_grad_hess(x, y, z, mu, kappa, g3, H3):
    """Gradient (g3) and Hessian (H3) of -κ[log(μ²z² - x² - y²) + log z]; μ = 0: only log z."""
    for a in range(3):
        g3[a] = 0.0
        for b in range(3):
            H3[a, b] = 0.0
    g3[2] = -kappa / z
    H3[2, 2] = kappa / (z * z)
    if mu > 0.0:
        m2 = mu * mu
        gc = m2 * z * z - x * x - y * y
        d0, d1, d2 = -2.0 * x, -2.0 * y, 2.0 * m2 * z
        inv = 1.0 / gc
        g3[0] -= kappa * d0 * inv
        g3[1] -= kappa * d1 * inv
        g3[2] -= kappa * d2 * inv
        k2 = kappa * inv * inv
        H3[0, 0] += k2 * d0 * d0 + 2.0 * kappa * inv
        H3[1, 1] += k2 * d1 * d1 + 2.0 * kappa * inv
        H3[2, 2] += k2 * d2 * d2 - 2.0 * m2 * kappa * inv
        H3[0, 1] += k2 * d0 * d1
        H3[0, 2] += k2 * d0 * d2
        H3[1, 2] += k2 * d1 * d2
        H3[1, 0] = H3[0, 1]
        H3[2, 0] = H3[0, 2]
        H3[2, 1] = H3[1, 2]


@njit(cache=True)
def _cholesky_solve(H, g, out, n):
    """Solve H out = -g in place (H overwritten by its Cholesky factor). False if not SPD."""
    for j in range(n):
        s = H[j, j]
        for k in range(j):
            s -= H[j, k] * H[j, k]
        if not (s > 0.0) or not math.isfinite(s):
            return False
        d = math.sqrt(s)
        H[j, j] = d
        for i in range(j + 1, n):
            t = H[i, j]
            for k in range(j):
                t -= H[i, k] * H[j, k]
            H[i, j] = t / d
    for i in range(n):
        t = -g[i]
        for k in range(i):
            t -= H[i, k] * out[k]
        out[i] = t / H[i, i]
    for i in range(n - 1, -1, -1):
        t = out[i]
        for k in range(i + 1, n):
            t -= H[k, i] * out[k]
        out[i] = t / H[i, i]
    return True


@njit(cache=True)
def _normal_index(j, nl):
    return j if j < nl else nl + 3 * (j - nl) + 2
