"""Constraint rows: row kinds, the soft-constraint force and Hessian (MuJoCo's
``efc_force`` reimplemented: ``constraint_update``) and the product with ``H[s]``.
"""

from __future__ import annotations

import math

from numba import njit

from .constants import (
    _CNSTR_CONTACT_ELLIPTIC,
    _CNSTR_EQUALITY,
    _CNSTR_FRICTION_DOF,
    _CNSTR_FRICTION_TENDON,
    FM,
    ROW_CONE,
    ROW_CONE_TAIL,
    ROW_EQUALITY,
    ROW_FRICTION,
    ROW_ONESIDED,
    STATE_CONE,
    STATE_LINEARNEG,
    STATE_LINEARPOS,
    STATE_QUADRATIC,
    STATE_SATISFIED,
)

# ---------------------------------------------------------------- inverse constraint force


@njit(cache=True, error_model="numpy")
def row_kinds(efc_type, efc_id, con_dim, con_mu, con_fric, con_adr, kind, cdim, cmu, cfric):
    """Row kinds from ``efc_type`` and, for elliptic contacts, the contact data.

    Args:
      efc_type, efc_id: ``(nefc,)`` MuJoCo's row types and object ids.
      con_dim, con_mu, con_fric (ncon, 5), con_adr: contact ``dim``, ``mu``,
        ``friction`` and ``efc_address`` (only read for elliptic rows).
    Outputs:
      kind (nefc,) ``ROW_*``; cdim, cmu (nefc,), cfric (nefc, 5) on elliptic head rows.
    """
    for i in range(efc_type.shape[0]):
        t = efc_type[i]
        cdim[i] = 0
        cmu[i] = 0.0
        if t == _CNSTR_EQUALITY:
            kind[i] = ROW_EQUALITY
        elif t == _CNSTR_FRICTION_DOF or t == _CNSTR_FRICTION_TENDON:
            kind[i] = ROW_FRICTION
        elif t == _CNSTR_CONTACT_ELLIPTIC:
            cid = efc_id[i]
            if con_adr[cid] == i:
                kind[i] = ROW_CONE
                cdim[i] = con_dim[cid]
                cmu[i] = con_mu[cid]
                for j in range(5):
                    cfric[i, j] = con_fric[cid, j]
            else:
                kind[i] = ROW_CONE_TAIL
        else:
            kind[i] = ROW_ONESIDED


@njit(cache=True, error_model="numpy")
def constraint_update(jar, D, R, floss, kind, cdim, cmu, cfric, f, state, hdiag, hcone):
    """MuJoCo's inverse constraint force ``f = −∇s(jar)`` and the Hessian of ``s``.

    Args:
      jar: ``(nefc,)`` ``J a − aref``.
      D, R, floss: ``(nefc,)`` ``efc_D``, ``efc_R``, ``efc_frictionloss``.
      kind, cdim, cmu, cfric: from :func:`row_kinds`.
    Outputs (in place):
      f: ``(nefc,)`` constraint force; state: ``(nefc,)`` ``mjtConstraintState``;
      hdiag: ``(nefc,)`` diagonal of ``H[s]`` for rows not in a cone zone;
      hcone: ``(nefc, 6, 6)`` dim×dim Hessian block on the head row of an elliptic
      contact in the cone zone.
    Returns:
      ``s(jar)``, the constraint cost.
    """
    n = jar.shape[0]
    cost = 0.0
    i = 0
    while i < n:
        k = kind[i]
        x = jar[i]
        if k == ROW_EQUALITY:
            f[i] = -D[i] * x
            hdiag[i] = D[i]
            state[i] = STATE_QUADRATIC
            cost += 0.5 * D[i] * x * x
        elif k == ROW_FRICTION:
            rf = R[i] * floss[i]
            if x <= -rf:
                f[i] = floss[i]
                hdiag[i] = 0.0
                state[i] = STATE_LINEARNEG
                cost += -0.5 * R[i] * floss[i] * floss[i] - floss[i] * x
            elif x >= rf:
                f[i] = -floss[i]
                hdiag[i] = 0.0
                state[i] = STATE_LINEARPOS
                cost += -0.5 * R[i] * floss[i] * floss[i] + floss[i] * x
            else:
                f[i] = -D[i] * x
                hdiag[i] = D[i]
                state[i] = STATE_QUADRATIC
                cost += 0.5 * D[i] * x * x
        elif k == ROW_ONESIDED or k == ROW_CONE_TAIL:
            if x >= 0.0:
                f[i] = 0.0
                hdiag[i] = 0.0
                state[i] = STATE_SATISFIED
            else:
                f[i] = -D[i] * x
                hdiag[i] = D[i]
                state[i] = STATE_QUADRATIC
                cost += 0.5 * D[i] * x * x
        else:  # ROW_CONE
            dim = cdim[i]
            mu = cmu[i]
            N = x * mu
            T2 = 0.0
            for j in range(1, dim):
                u = jar[i + j] * cfric[i, j - 1]
                T2 += u * u
            T = math.sqrt(T2)
            if N >= mu * T or (T <= 0.0 and N >= 0.0):
                for j in range(dim):
                    f[i + j] = 0.0
                    hdiag[i + j] = 0.0
                    state[i + j] = STATE_SATISFIED
            elif mu * N + T <= 0.0 or (T <= 0.0 and N < 0.0):
                for j in range(dim):
                    xj = jar[i + j]
                    f[i + j] = -D[i + j] * xj
                    hdiag[i + j] = D[i + j]
                    state[i + j] = STATE_QUADRATIC
                    cost += 0.5 * D[i + j] * xj * xj
            else:
                Dm = D[i] / (mu * mu * (1.0 + mu * mu))
                NmT = N - mu * T
                cost += 0.5 * Dm * NmT * NmT
                f0 = -Dm * NmT * mu
                f[i] = f0
                for j in range(1, dim):
                    uj = jar[i + j] * cfric[i, j - 1]
                    f[i + j] = -f0 / T * uj * cfric[i, j - 1]
                # Hessian of ½ Dm (N − μT)² w.r.t. jar (as MuJoCo's cone Hessian)
                H = hcone[i]
                for r in range(dim):
                    for cc in range(dim):
                        H[r, cc] = 0.0
                H[0, 0] = 1.0
                for j in range(1, dim):
                    H[0, j] = -mu / T * jar[i + j] * cfric[i, j - 1]
                scl = mu * N / (T * T * T)
                for r in range(1, dim):
                    ur = jar[i + r] * cfric[i, r - 1]
                    for cc in range(r, dim):
                        H[r, cc] = scl * ur * jar[i + cc] * cfric[i, cc - 1]
                scl = mu * mu - mu * N / T
                for j in range(1, dim):
                    H[j, j] += scl
                for r in range(dim):
                    sr = Dm * (mu if r == 0 else cfric[i, r - 1])
                    for cc in range(r, dim):
                        H[r, cc] *= sr * (mu if cc == 0 else cfric[i, cc - 1])
                for r in range(dim):
                    for cc in range(r + 1, dim):
                        H[cc, r] = H[r, cc]
                for j in range(dim):
                    hdiag[i + j] = 0.0
                    state[i + j] = STATE_CONE
            i += dim
            continue
        i += 1
    return cost


@njit(cache=True, fastmath=FM, error_model="numpy")
def hs_mul(x, kind, cdim, state, hdiag, hcone, out):
    """``out = H[s] x`` for a vector in constraint space ``(nefc,)``."""
    n = x.shape[0]
    i = 0
    while i < n:
        if kind[i] == ROW_CONE and state[i] == STATE_CONE:
            dim = cdim[i]
            for r in range(dim):
                s = 0.0
                for cc in range(dim):
                    s += hcone[i, r, cc] * x[i + cc]
                out[i + r] = s
            i += dim
        else:
            out[i] = hdiag[i] * x[i]
            i += 1
