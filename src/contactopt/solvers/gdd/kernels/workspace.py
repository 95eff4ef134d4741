"""The problem / workspace bundles (``Prob``, ``Work``), workspace sizes and views.
"""

from __future__ import annotations

import math
from collections import namedtuple

from numba import njit
from numba.extending import intrinsic

from .constants import FM

# ---------------------------------------------------------------- problem bundle

Prob = namedtuple("Prob", [
    "M", "Lrn", "Lra", "Lci", "Lq", "Ldi", "c", "J", "aref", "D", "R", "floss", "kind", "cdim", "cmu", "cfric",
    "jnz", "jnnz", "Ceq", "ce_idx", "ce_nnz", "Cbox", "cb_idx", "cb_nnz", "lo", "hi",
    "rho_e", "rho_b", "sc_e", "sc_b", "Q", "q", "Ka2", "Kf2", "e2",
])

Work = namedtuple("Work", [
    "jar", "f", "state", "hdiag", "hcone", "g", "y", "h", "w", "nu", "bact", "r2", "gradg",
    "grad", "tmp_nv", "tmp_efc", "tmp_efc2", "K2", "P", "Hm", "LH",
    "kink", "release", "nk", "Z", "kidx", "nuk", "scr", "scri", "Qa",
])


@njit(cache=True, inline="always", fastmath=FM, error_model="numpy")
def _dims(pb):
    """``(nv, nefc, nz, nb, m2)``: the sizes of a :data:`Prob` (dofs, constraint rows, equality
    and box rows of the actuation, force-dependent cost rows)."""
    return pb.M.shape[0], pb.J.shape[0], pb.Ceq.shape[0], pb.Cbox.shape[0], pb.Ka2.shape[0]


@njit(cache=True, error_model="numpy")
def _scratch_size(nv, nefc, nz, nb, m2):
    """Float scratch (``Work.scr``) that the temporaries of :func:`_dual_newton`, :func:`_face_step`,
    :func:`_linesearch_1d` and :func:`_probe_states` take in turn (never two at once)."""
    na = nz + nb
    dual = nv * na + na + 2 * na * na + nv * nefc + 2 * nefc * nefc + nefc * na + nefc
    face = nv * nefc + nv + 4 * nefc * nefc + 2 * nefc
    line = 6 * nv + 41 * nefc + nz + 2 * nb + m2
    return max(dual, face, line, 2 * nefc)


@njit(cache=True, error_model="numpy")
def _ws_sizes(nv, nefc, nz, nb, m2, ncone):
    """Lengths ``(float64, int64)`` of the workspace :func:`gdd_solve` carves its arrays from."""
    nev = 2 * nefc + 1
    tri = nv * (nv + 1) // 2
    nf = (nefc * 14 + nv * nv * 4 + tri + nv * 15 + m2 * (nv * 2 + nefc + 4) + nz * 3 + nb * 4
          + ncone * 36 + nev + (nv + nz + nb + m2) * nv + _scratch_size(nv, nefc, nz, nb, m2))
    ni = (nz + nb + nefc) * (nv + 1) + nefc * 10 + nb * 5 + nev * 3 + 1 + 2 * nv + tri
    return nf, ni


@njit(cache=True, error_model="numpy")
def _take(buf, o, n):
    return buf[o:o + n], o + n


@intrinsic
def _as_2d(typingctx, arr, n, m):
    """The C-contiguous 1-D ``arr`` (at least ``n·m`` long) seen as an ``(n, m)`` array,
    without an owner (meminfo NULL; see :func:`_unmanaged`): unlike ``reshape`` no runtime
    helper call (numba's ``reshape`` checks the layout through one, ~40 ns a view)."""
    from numba.core import cgutils, types

    outty = types.Array(arr.dtype, 2, "C")

    def codegen(context, builder, signature, args):
        src = context.make_array(signature.args[0])(context, builder, value=args[0])
        out = context.make_array(outty)(context, builder)
        size = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(arr.dtype)))
        n_ = context.cast(builder, args[1], signature.args[1], types.intp)
        m_ = context.cast(builder, args[2], signature.args[2], types.intp)
        context.populate_array(out, data=src.data, shape=cgutils.pack_array(builder, [n_, m_]),
                               strides=cgutils.pack_array(builder, [builder.mul(m_, size), size]),
                               itemsize=size, meminfo=None)
        return out._getvalue()

    return outty(arr, n, m), codegen


@njit(cache=True, error_model="numpy")
def _take2(buf, o, n, m):
    return _as_2d(buf[o:o + n * m], n, m), o + n * m


@njit(cache=True, error_model="numpy")
def _fill(x, value):
    """``x[:] = value`` for a 1-D array (a plain loop: no allocation)."""
    for i in range(x.shape[0]):
        x[i] = value


@njit(cache=True, error_model="numpy")
def _all_finite(x):
    """Whether every entry of the 1-D ``x`` is finite (a plain loop: no allocation)."""
    for i in range(x.shape[0]):
        if not math.isfinite(x[i]):
            return False
    return True


@njit(cache=True, error_model="numpy")
def _actuation_blocks(actbuf, nz, nb, nc, nv):
    """Views of the packed actuation (``ActuationArrays.packed``): ``Ceq (nz, nv)``, ``Cbox``,
    ``Bdir (nb, nv)``, ``Bpinv (nc, nv)``, the bounds ``lo``, ``hi (nb,)`` and the control map
    ``gain``, ``bias``, ``ctrl_lo``, ``ctrl_hi (nc,)``."""
    Ceq, o = _take2(actbuf, 0, nz, nv)
    Cbox, o = _take2(actbuf, o, nb, nv)
    Bdir, o = _take2(actbuf, o, nb, nv)
    Bpinv, o = _take2(actbuf, o, nc, nv)
    box, o = _take2(actbuf, o, 2, nb)
    cmap, o = _take2(actbuf, o, 4, nc)
    return Ceq, Cbox, Bdir, Bpinv, box[0], box[1], cmap[0], cmap[1], cmap[2], cmap[3]


@njit(cache=True, error_model="numpy")
def _cost_blocks(costbuf, km, kd, m1, nv):
    """Views of the packed cost buffer: mass-weighted targets (``km``), diagonal terms
    (``kd``), first-order acceleration terms (``m1``); returns them and the next offset."""
    o = 0
    mass_w, o = _take(costbuf, o, km)
    mass_t, o = _take2(costbuf, o, km, nv)
    diag_w, o = _take(costbuf, o, kd)
    diag_m, o = _take2(costbuf, o, kd, nv)
    diag_t, o = _take2(costbuf, o, kd, nv)
    Ka1, o = _take2(costbuf, o, m1, nv)
    e1, o = _take(costbuf, o, m1)
    wa, o = _take(costbuf, o, m1)
    return mass_w, mass_t, diag_w, diag_m, diag_t, Ka1, e1, wa, o
