"""Compiled entry points: :func:`gdd_fast`, :func:`gdd_general` and :func:`gdd_step` (one
call per step on a context of buffer addresses: ``DL_*``, ``CX_*``, ``AS_*`` layouts).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.extending import intrinsic

from ....native import (
    mj_fwdposition,
    mj_fwdvelocity,
    raw_f64,
    raw_i32,
    raw_i64,
    raw_u64,
)
from .constants import (
    IPAR_KM,
    IPAR_MAX_ITER,
    IPAR_NC,
    IPAR_NEFC,
    IPAR_OUT_NEED,
    LOG_NCOL,
    ST_NSTAT,
    ST_STATUS,
    STATUS_WORKSPACE,
)
from .cost import DO_QLD, DO_QLDINV, SI_MCOLIND, SI_MROWADR, SI_MROWNNZ, fill_problem
from .solve import gdd_solve
from .workspace import _as_2d, _take, _take2


@intrinsic
def _unmanaged(typingctx, arr):
    """The array ``arr`` without its reference-counted owner (meminfo set to NULL).

    numba reference-counts every array view it creates and every array it passes to a
    non-inlined call (atomic increments and decrements: about a fifth of the compiled
    step's ``perf`` samples).  Views of an array without an owner are not
    counted.  Only for arguments of an entry point: the caller keeps them alive for the
    whole call, and nothing made from them may outlive it.
    """
    sig = arr(arr)

    def codegen(context, builder, signature, args):
        src = context.make_array(arr)(context, builder, value=args[0])
        out = context.make_array(arr)(context, builder)
        context.populate_array(out, data=src.data, shape=src.shape, strides=src.strides,
                               itemsize=src.itemsize, meminfo=None)
        return out._getvalue()

    return sig, codegen


# ---------------------------------------------------------------- one compiled step (fast path)
#
# gdd_fast builds the problem (dense M, c) and the built-in cost terms straight from
# MuJoCo's arrays — the Jacobians from cdof / cdof_dot / cvel, as mj_jac, mj_jacDot and
# mj_jacSubtreeCom compute them — and then runs gdd_solve, all in one compiled call.


@njit(cache=True, error_model="numpy", _nrt=False)
def gdd_fast(si, span, doff, ptab, J1, aref, D, R, floss, efc_type, M, c, dq,
             actbuf, scales, costbuf, Kf2,
             a, lam, mu_lo, mu_hi, params, iparams, outf, out_state, wsf, wsi):
    """:func:`fill_problem` then :func:`gdd_solve` (pyramidal cones, dense ``efc_J`` ``J1``
    of ``nefc·nv``); the arguments after ``costbuf`` are those of :func:`gdd_solve`, except
    that its float outputs are packed in ``outf``: ``out_g (nv) | out_f (nefc) | out_w (nc) |
    out_ctrl (nc) | stats (ST_NSTAT) | a (nv) | out_state (nefc, as floats) | log (max_iter ·
    LOG_NCOL)`` (``nc = iparams[IPAR_NC]``, ``max_iter = iparams[IPAR_MAX_ITER]``; the layout
    of ``solver.GDDResult``, :func:`step_output_length` long).
    ``M (nv, nv)`` (zero outside MuJoCo's sparsity pattern on entry: see :func:`fill_problem`),
    ``c (nv,)`` and the scratch ``dq (nv + 6 nbody,)`` are filled here (kept for diagnostics).

    Compiled without numba's reference counting (``_nrt=False``: nothing below allocates; the
    temporaries live in the workspace), on owner-less views of the arguments
    (:func:`_unmanaged`); see :func:`gdd_general` for why every caller of :func:`gdd_solve` must
    be compiled so."""
    U = _unmanaged
    si, span, doff, ptab, J1, aref, D, R = U(si), U(span), U(doff), U(ptab), U(J1), U(aref), U(D), U(R)
    floss, efc_type, M, c, dq = U(floss), U(efc_type), U(M), U(c), U(dq)
    actbuf, scales, costbuf, Kf2 = U(actbuf), U(scales), U(costbuf), U(Kf2)
    a, lam, mu_lo, mu_hi, params, iparams = U(a), U(lam), U(mu_lo), U(mu_hi), U(params), U(iparams)
    outf, out_state, wsf, wsi = U(outf), U(out_state), U(wsf), U(wsi)
    nv = M.shape[0]
    nefc = aref.shape[0]
    nc = iparams[IPAR_NC]
    out_g, o = _take(outf, 0, nv)
    out_f, o = _take(outf, o, nefc)
    out_w, o = _take(outf, o, nc)
    out_ctrl, o = _take(outf, o, nc)
    stats, o = _take(outf, o, ST_NSTAT)
    out_a, o = _take(outf, o, nv)
    out_sf, o = _take(outf, o, nefc)
    log, o = _take2(outf, o, iparams[IPAR_MAX_ITER], LOG_NCOL)
    dims = iparams[IPAR_KM:IPAR_KM + 4]  # (km, kd, m1, m2): consecutive
    fill_problem(si, span, doff, ptab, M, c, costbuf, dims, dq)
    J = _as_2d(J1, nefc, nv)
    rn = si[SI_MROWNNZ]
    ra = si[SI_MROWADR]
    ci = si[SI_MCOLIND]
    nnz = si[ra + nv - 1] + si[rn + nv - 1]
    oq = doff[DO_QLD]
    oqi = doff[DO_QLDINV]
    gdd_solve(M, si[rn:rn + nv], si[ra:ra + nv], si[ci:ci + nnz], span[oq:oq + nnz],
              span[oqi:oqi + nv], c, J, aref, D, R, floss, efc_type, efc_type, _EMPTY_I32, _EMPTY_F1, _EMPTY_F5,
              _EMPTY_I32, actbuf, scales, costbuf, Kf2, a, lam, mu_lo, mu_hi, params, iparams,
              out_g, out_f, out_state, out_w, out_ctrl, stats, log, wsf, wsi)
    for k in range(nv):
        out_a[k] = a[k]
    if stats[ST_STATUS] != STATUS_WORKSPACE:
        for i in range(nefc):
            out_sf[i] = out_state[i]


@njit(cache=True, error_model="numpy", _nrt=False)
def gdd_general(M, Mrownnz, Mrowadr, Mcolind, qld, qldinv,
                c, J, aref, D, R, floss, efc_type, efc_id, con_dim, con_mu, con_fric, con_adr,
                actbuf, scales, costbuf, Kf2,
                a, lam, mu_lo, mu_hi, params, iparams,
                out_g, out_f, out_state, out_w, out_ctrl, stats, log, wsf, wsi):
    """:func:`gdd_solve` called from Python (the general path), arguments as there.

    Like :func:`gdd_fast` it is compiled without numba's reference counting (``_nrt=False``) and
    hands :func:`gdd_solve` owner-less views: the kernels below it are compiled once per
    signature, whatever the caller, so they must only ever run in that mode (a view returned by
    a helper compiled without reference counting must not be released by a caller that counts).
    """
    U = _unmanaged
    gdd_solve(U(M), U(Mrownnz), U(Mrowadr), U(Mcolind), U(qld), U(qldinv),
              U(c), U(J), U(aref), U(D), U(R), U(floss), U(efc_type), U(efc_id), U(con_dim),
              U(con_mu), U(con_fric), U(con_adr), U(actbuf), U(scales), U(costbuf), U(Kf2),
              U(a), U(lam), U(mu_lo), U(mu_hi), U(params), U(iparams),
              U(out_g), U(out_f), U(out_state), U(out_w), U(out_ctrl), U(stats), U(log), U(wsf),
              U(wsi))


# byte offsets in the ``mjData`` struct that gdd_step reads (``solver._efc_layout``): the
# ``nefc`` int and the pointer fields of the constraint rows
DL_NEFC = 0
DL_J = 1
DL_AREF = 2
DL_D = 3
DL_R = 4
DL_FLOSS = 5  # the aref field again when the model has no friction loss (not read then)
DL_TYPE = 6
DL_N = 7


@njit(cache=True, inline="always", error_model="numpy")
def _field(d, off):
    """The address an ``mjData`` pointer field (byte offset ``off``) holds."""
    return raw_u64(d + off, 1)[0]


# the step context of gdd_step (int64): the mjModel and mjData addresses, whether to run the
# stages, how to skip mj_island in them (CX_FLAGS: the address of the model's opt.disableflags
# and enableflags, or 0; the mjDSBL_ISLAND and mjENBL_SLEEP bits), the mjData offsets (DL_*),
# then one (address, rows, columns) triple per array (AS_*)
CX_MODEL = 0
CX_DATA = 1
CX_STAGES = 2
CX_FLAGS = 3
CX_ISLAND = 4
CX_SLEEP = 5
CX_DL = 6
CX_ARRAYS = CX_DL + DL_N
AS_SI = 0  # int64 (static structure)
AS_SPAN = 1  # float64 view of mjData's buffer
AS_DOFF = 2  # int64 offsets in it
AS_PTAB = 3  # int64 (n, 2) term parameter table
AS_M = 4  # float64 (nv, nv)
AS_C = 5
AS_DQ = 6
AS_ACT = 7
AS_SCALES = 8  # float64 (4, w)
AS_COST = 9
AS_KF2 = 10  # float64 (m2, ·)
AS_A = 11  # the acceleration: warm start in, solution out
AS_LAM = 12
AS_MULO = 13
AS_MUHI = 14
AS_PARAMS = 15
AS_IPARAMS = 16  # int64
AS_OUTF = 17
AS_OUTS = 18  # int64
AS_WSF = 19
AS_WSI = 20  # int64
AS_N = 21
CX_N = CX_ARRAYS + 3 * AS_N


@njit(cache=True, inline="always", error_model="numpy")
def _cx_slot(ctx, slot):
    """``(address, rows, columns)`` of the array in slot ``slot`` (``AS_*``) of the step context
    (one column for a 1-D array)."""
    o = CX_ARRAYS + 3 * slot
    return ctx[o], ctx[o + 1], ctx[o + 2]


@njit(cache=True, inline="always", error_model="numpy")
def _cx_f(ctx, slot):
    """The float64 array of slot ``slot``, flat (see :func:`_cx_2d`)."""
    adr, n, m = _cx_slot(ctx, slot)
    return raw_f64(adr, n * m)


@njit(cache=True, inline="always", error_model="numpy")
def _cx_2d(ctx, slot, flat):
    """``flat`` (:func:`_cx_f` or :func:`_cx_i` of slot ``slot``) as its ``(rows, columns)`` array."""
    _, n, m = _cx_slot(ctx, slot)
    return _as_2d(flat, n, m)


@njit(cache=True, inline="always", error_model="numpy")
def _cx_i(ctx, slot):
    """The int64 array of slot ``slot``, flat (see :func:`_cx_2d`)."""
    adr, n, m = _cx_slot(ctx, slot)
    return raw_i64(adr, n * m)


def step_output_length(nv, nefc, nc, max_iter):
    """Length of the float output of :func:`gdd_fast` and :func:`gdd_step` for a state with
    ``nefc`` rows (``nc`` controls, at most ``max_iter`` iterations logged)."""
    return 2 * (nv + nefc + nc) + ST_NSTAT + max_iter * LOG_NCOL


@njit(cache=True, inline="always", error_model="numpy")
def _stages(m, d, flags, island_bit, sleep_bit):
    """``mj_fwdPosition`` + ``mj_fwdVelocity`` on the ``mjModel``/``mjData`` at ``m``/``d``.

    ``mj_fwdPosition`` ends with ``mj_island``, the forward solver's partition of the
    constraints, which goal-directed dynamics does not use (~0.5 µs of the humanoid's step).
    With ``flags`` (the address of the model's ``opt.disableflags``, ``enableflags`` after
    it) it runs with ``mjDSBL_ISLAND`` set and the flags are restored right after — within
    this compiled call, so Python never sees the change — unless islands are already disabled
    or sleeping (which uses them) is enabled.  ``d.nisland`` is then 0; MuJoCo's forward
    solver gives the same acceleration without islands (a later ``mj_forward`` or ``mj_step``
    recomputes them).
    """
    if flags != 0:
        fl = raw_i32(flags, 2)
        old = fl[0]
        if (old & island_bit) == 0 and (fl[1] & sleep_bit) == 0:
            fl[0] = old | island_bit
            mj_fwdposition(m, d)
            fl[0] = old
        else:
            mj_fwdposition(m, d)
    else:
        mj_fwdposition(m, d)
    mj_fwdvelocity(m, d)


@njit(cache=True, error_model="numpy", _nrt=False)
def gdd_step(ctx):
    """:func:`gdd_fast` on the arrays and ``mjModel``/``mjData`` pointers of the step context
    ``ctx`` (``CX_*``, ``AS_*``): one integer array instead of ~25 arguments, which the
    caller builds once per solver, cost and ``mjData`` (every array it points to is kept alive
    and not reallocated while it is used).

    With ``ctx[CX_STAGES]`` it first runs ``mj_fwdPosition`` + ``mj_fwdVelocity`` (the C
    functions of the bindings' ``libmujoco``; without ``mj_island``: :func:`_stages`), then
    reads the constraint rows through the ``mjData`` fields at the byte offsets ``ctx[CX_DL:]``
    (``DL_*``) — no Python-level MuJoCo call or array view per step.

    The float output (slot ``AS_OUTF``) gets the layout of :func:`gdd_fast`, ``need`` =
    :func:`step_output_length` long.  Returns ``16 · need + status`` (``STATUS_*``), or
    ``−need`` when the outputs are too short or the workspace too small (status
    ``STATUS_WORKSPACE``): the stages are computed, ``a`` and the multipliers are untouched;
    grow what is short and call again without stages.  Writes ``iparams[IPAR_NEFC]`` and
    ``iparams[IPAR_OUT_NEED]``."""
    m = ctx[CX_MODEL]
    d = ctx[CX_DATA]
    if ctx[CX_STAGES] != 0:
        _stages(m, d, ctx[CX_FLAGS], ctx[CX_ISLAND], ctx[CX_SLEEP])
    nefc = np.int64(raw_i32(d + ctx[CX_DL + DL_NEFC], 1)[0])
    M = _cx_2d(ctx, AS_M, _cx_f(ctx, AS_M))
    nv = M.shape[0]
    iparams = _cx_i(ctx, AS_IPARAMS)
    outf = _cx_f(ctx, AS_OUTF)
    out_state = _cx_i(ctx, AS_OUTS)
    nc = iparams[IPAR_NC]
    need = 2 * (nv + nefc + nc) + ST_NSTAT + iparams[IPAR_MAX_ITER] * LOG_NCOL
    iparams[IPAR_NEFC] = nefc
    iparams[IPAR_OUT_NEED] = need
    if outf.shape[0] < need or out_state.shape[0] < nefc:
        return -need
    J1 = raw_f64(_field(d, ctx[CX_DL + DL_J]), nefc * nv)
    aref = raw_f64(_field(d, ctx[CX_DL + DL_AREF]), nefc)
    D = raw_f64(_field(d, ctx[CX_DL + DL_D]), nefc)
    R = raw_f64(_field(d, ctx[CX_DL + DL_R]), nefc)
    floss = raw_f64(_field(d, ctx[CX_DL + DL_FLOSS]), nefc)
    efc_type = raw_i32(_field(d, ctx[CX_DL + DL_TYPE]), nefc)
    a = _cx_f(ctx, AS_A)
    ptab = _cx_2d(ctx, AS_PTAB, _cx_i(ctx, AS_PTAB))
    gdd_fast(_cx_i(ctx, AS_SI), _cx_f(ctx, AS_SPAN), _cx_i(ctx, AS_DOFF), ptab, J1, aref, D, R,
             floss, efc_type, M, _cx_f(ctx, AS_C), _cx_f(ctx, AS_DQ), _cx_f(ctx, AS_ACT),
             _cx_2d(ctx, AS_SCALES, _cx_f(ctx, AS_SCALES)), _cx_f(ctx, AS_COST),
             _cx_2d(ctx, AS_KF2, _cx_f(ctx, AS_KF2)), a,
             _cx_f(ctx, AS_LAM), _cx_f(ctx, AS_MULO), _cx_f(ctx, AS_MUHI), _cx_f(ctx, AS_PARAMS),
             iparams, outf, out_state, _cx_f(ctx, AS_WSF), _cx_i(ctx, AS_WSI))
    status = np.int64(outf[nv + nefc + 2 * nc + ST_STATUS])
    if status == STATUS_WORKSPACE:
        return -need
    return 16 * need + status


_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_F1 = np.zeros(0)
_EMPTY_F5 = np.zeros((0, 5))
