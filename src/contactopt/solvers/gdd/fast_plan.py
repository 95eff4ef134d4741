"""The compiled step's plan and the MuJoCo memory layouts it reads (see :meth:`GDDSolver.solve`).

:class:`_FastPlan` says how the compiled step evaluates one cost for one solver; the helpers
measure (once) and check the ``mjData``/``mjModel`` layouts the native entry
(:func:`kernels.gdd_step`) reads through raw pointers, and look up compiled entry points.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from ...errors import ParameterError
from . import cost_base
from . import kernels as K
from .cost_base import AccelerationTerm, Cost

if TYPE_CHECKING:
    from .solver import GDDSolver


def _kernel_entry(fn, args):
    """The compiled entry point of the numba function ``fn`` for these argument types.

    Calling through numba's dispatcher type-checks the ~30 arguments on every call
    (several µs).  Their types never change for a solver (every array is made by
    this package with a fixed dtype and C layout), so the solver checks them once,
    here, and then calls the entry point directly.  Falls back to the dispatcher
    if numba's internals differ.
    """
    try:
        import numba

        sig = tuple(numba.typeof(a) for a in args)
        return fn.overloads[sig].entry_point
    except Exception:  # pragma: no cover - numba internals changed
        return fn


_STEP_ENTRY = []  # [entry point of kernels.gdd_step] once compiled


def _step_entry():
    """The compiled entry point of :func:`kernels.gdd_step`, or None where the ``mjData``
    layout is not the one measured at import (:func:`_efc_layout`): then every solve takes
    :func:`kernels.gdd_fast` with the stages and row views from Python."""
    if _efc_layout() is None:
        return None
    if not _STEP_ENTRY:
        import numba

        ctx = np.zeros(K.CX_N, dtype=np.int64)
        K.gdd_step.compile((numba.typeof(ctx),))  # compiled or loaded from numba's cache, not run
        _STEP_ENTRY.append(_kernel_entry(K.gdd_step, (ctx,)))
    return _STEP_ENTRY[0]


#: dtype and dimensions of each array slot of the step context (``kernels.AS_*``)
_SLOT_TYPES = {K.AS_SI: (np.int64, 1), K.AS_SPAN: (np.float64, 1), K.AS_DOFF: (np.int64, 1),
               K.AS_PTAB: (np.int64, 2), K.AS_M: (np.float64, 2), K.AS_C: (np.float64, 1),
               K.AS_DQ: (np.float64, 1), K.AS_ACT: (np.float64, 1), K.AS_SCALES: (np.float64, 2),
               K.AS_COST: (np.float64, 1), K.AS_KF2: (np.float64, 2), K.AS_A: (np.float64, 1),
               K.AS_LAM: (np.float64, 1), K.AS_MULO: (np.float64, 1), K.AS_MUHI: (np.float64, 1),
               K.AS_PARAMS: (np.float64, 1), K.AS_IPARAMS: (np.int64, 1),
               K.AS_OUTF: (np.float64, 1), K.AS_OUTS: (np.int64, 1), K.AS_WSF: (np.float64, 1),
               K.AS_WSI: (np.int64, 1)}


def _factor_layout_ok(model) -> bool:
    """Whether ``data.qLD`` holds ``M = Lᵀ D L`` in the CSR layout of ``model.M_rownnz/M_rowadr/
    M_colind`` (what the compiled step reads), checked once at ``qpos0``: ``kernels.ldl_factor``
    of ``data.M`` must reproduce it (MuJoCo versions that keep ``qLD`` in another layout use the
    general path)."""
    try:
        d = mujoco.MjData(model)
        mujoco.mj_fwdPosition(model, d)
        if d.M.shape != d.qLD.shape or d.qLDiagInv.shape != (model.nv,):
            return False
        rn, ra, ci = (np.asarray(x, dtype=np.int64) for x in (model.M_rownnz, model.M_rowadr, model.M_colind))
        q, dinv = np.array(d.M, dtype=float), np.empty(model.nv)
        return bool(K.ldl_factor(rn, ra, ci, q, dinv)
                    and np.allclose(q, d.qLD, rtol=1e-9, atol=1e-12 * max(1.0, np.abs(d.qLD).max()))
                    and np.allclose(dinv, d.qLDiagInv, rtol=1e-9))
    except (AttributeError, ValueError, TypeError):
        return False


_EMPTY_KF2 = np.zeros((0, 0))


class _FastPlan:
    """How the compiled step evaluates one cost for one solver (see :meth:`GDDSolver.solve`).

    ``ok`` is False when some term is not built in (the general path is used then).
    ``si``: the static int array (``kernels.SI_*`` header: model structure, the term table
    and the subtree body lists); ``tparams``: the terms' parameter arrays (weights, targets:
    the terms' own arrays, so changes of weight, activity and goals are seen without
    rebuilding; a term never replaces them, it writes into them); ``ptab (n, 2)``: their
    addresses and lengths, what the kernels read; ``costbuf``: the packed cost the kernel
    fills (``CostArrays`` layout).
    """

    __slots__ = ("ok", "cost", "terms", "version", "si", "tparams", "ptab", "costbuf", "dims",
                 "Kf2", "entry", "act", "floss", "native")

    def __init__(self, solver: "GDDSolver", cost):
        self.cost = cost
        self.version = cost_base._STRUCTURE[0]
        self.terms = list(cost.terms) if isinstance(cost, Cost) else None
        self.ok = False
        self.entry = None
        self.native = None  # entry point of kernels.gdd_step, after the first solve
        if isinstance(cost, Cost):
            terms = cost.terms
        elif isinstance(cost, AccelerationTerm):
            terms = [cost]
        else:
            return
        model = solver.model
        specs = [t._fast_spec() for t in terms]
        if not specs or any(sp is None for sp in specs):
            return
        nv = model.nv
        head = np.zeros(K.SI_NHEAD, dtype=np.int64)
        parts = [head]
        off = [K.SI_NHEAD]

        def add(arr):
            arr = np.asarray(arr, dtype=np.int64).ravel()
            o = off[0]
            parts.append(arr)
            off[0] += arr.size
            return o

        head[K.SI_NBODY] = model.nbody
        head[K.SI_NJNT] = model.njnt
        head[K.SI_NTERM] = len(terms)
        head[K.SI_PARENT] = add(model.body_parentid)
        head[K.SI_ROOT] = add(model.body_rootid)
        head[K.SI_DOFADR] = add(model.body_dofadr)
        head[K.SI_DOFNUM] = add(model.body_dofnum)
        head[K.SI_DOFPARENT] = add(model.dof_parentid)
        head[K.SI_MROWNNZ] = add(model.M_rownnz)
        head[K.SI_MROWADR] = add(model.M_rowadr)
        head[K.SI_MCOLIND] = add(model.M_colind)
        head[K.SI_JTYPE] = add(model.jnt_type)
        head[K.SI_JQPOS] = add(model.jnt_qposadr)
        head[K.SI_JDOF] = add(model.jnt_dofadr)
        head[K.SI_XFRC] = 1
        table = np.zeros((len(terms), K.TERM_NCOL), dtype=np.int64)
        head[K.SI_TERMS] = add(table)  # filled below (parts[-1] is a copy: write it there)
        table = parts[-1].reshape(len(terms), K.TERM_NCOL)
        tparams = []

        def param(arr):
            if not (isinstance(arr, np.ndarray) and arr.dtype == np.float64 and arr.ndim == 1
                    and arr.flags.c_contiguous):
                raise ValueError
            tparams.append(arr)
            return len(tparams) - 1

        counts = {"mass": 0, "diag": 0, "rows": 0}
        try:
            for i, sp in enumerate(specs):
                row = table[i]
                kind = sp["kind"]
                row[K.TC_CODE] = sp["code"]
                row[K.TC_SLOT] = counts[kind]
                counts[kind] += sp.get("rows", 1)
                row[K.TC_BODY] = sp.get("body", 0)
                row[K.TC_SITE] = sp.get("site", -1)
                row[K.TC_PW] = param(sp["w"])
                row[K.TC_PT] = param(sp["t"]) if "t" in sp else row[K.TC_PW]
                row[K.TC_PX] = param(sp["x"]) if "x" in sp else row[K.TC_PW]
                if "list" in sp:
                    row[K.TC_LIST] = add(sp["list"])
                    row[K.TC_COUNT] = sp.get("count", len(sp["list"]))
                pm = sp.get("model")
                if pm is not None and pm is not model and not (
                        pm.nq == model.nq and pm.nv == model.nv and pm.njnt == model.njnt
                        and np.array_equal(pm.jnt_type, model.jnt_type)):
                    raise ValueError
                if "t" in sp and sp["code"] in (K.TERM_MASS_FIXED, K.TERM_DIAG_FIXED) and sp["t"].size != 2 * nv:
                    raise ValueError
        except ValueError:
            return
        self.si = np.concatenate(parts)
        self.tparams = tuple(tparams)  # kept alive: the kernels read them through ptab
        self.ptab = np.array([(arr.ctypes.data, arr.size) for arr in tparams], dtype=np.int64)
        km, kd, m1 = counts["mass"], counts["diag"], counts["rows"]
        self.dims = (km, kd, m1, 0)
        self.costbuf = np.zeros(km * (nv + 1) + kd * (2 * nv + 1) + m1 * (nv + 2))
        self.Kf2 = _EMPTY_KF2
        self.act = None  # the (state-independent) actuation arrays, read at the first solve
        # friction-loss rows only exist when some dof or tendon has friction loss
        self.floss = bool(np.any(model.dof_frictionloss > 0) or (
            model.ntendon > 0 and np.any(model.tendon_frictionloss > 0)))
        self.ok = True


#: ``mjData`` fields of the constraint rows read by ``gdd_step``, by ``kernels.DL_*`` index
_EFC_FIELDS = ("efc_J", "efc_aref", "efc_D", "efc_R", "efc_frictionloss", "efc_type")
_EFC_LAYOUT = []  # [layout or None] once measured


def _efc_layout():
    """Byte offsets (``kernels.DL_*``, int64) in the ``mjData`` struct of ``nefc`` and of the
    pointer fields of the constraint rows, or None (no native MuJoCo calls in this installation
    or a layout other than ``mjdata.h``'s: ``nefc`` the fifth ``int`` after the ``timer`` array).

    Measured once on a probe model (a ball on a plane, a hinge with a limit and friction loss)
    and checked against the bindings' views at configurations with different numbers of rows."""
    if not _EFC_LAYOUT:
        try:
            _EFC_LAYOUT.append(_measure_efc_layout())
        except Exception:  # noqa: BLE001  # pragma: no cover - another layout: use gdd_fast
            _EFC_LAYOUT.append(None)
    return _EFC_LAYOUT[0]


def _measure_efc_layout():
    from ... import native

    if not native.NATIVE:
        return None
    m = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><geom type='plane' size='1 1 0.1'/>"
        "<body><freejoint/><geom type='sphere' size='0.1'/></body>"
        "<body><joint type='hinge' range='-0.5 0.5' frictionloss='0.1' limited='true'/>"
        "<geom type='capsule' size='0.02' fromto='0 0 1 0.3 0 1'/></body>"
        "</worldbody></mujoco>")
    layout = None
    for trial in range(2):  # two MjData: the same offsets
        d = mujoco.MjData(m)
        base = d._address
        counts = native.ncon_field_offset(d)
        cur = np.zeros(K.DL_N, dtype=np.int64)
        cur[K.DL_NEFC] = counts + 16  # ncon, ne, nf, nl, nefc
        seen = set()
        for height, angle in ((0.09, 0.7), (0.5, 0.0), (0.05, 0.0)):  # 6, 1 and 5 rows
            d.qpos[:] = m.qpos0
            d.qpos[2] = height
            d.qpos[7] = angle
            mujoco.mj_forward(m, d)
            ints = np.frombuffer((ctypes.c_int32 * 5).from_address(base + counts), dtype=np.int32)
            if list(ints) != [d.ncon, d.ne, d.nf, d.nl, d.nefc]:
                return None
            seen.add(d.nefc)
            for k, name in enumerate(_EFC_FIELDS, start=1):
                addr = getattr(d, name).ctypes.data
                if not cur[k]:
                    cur[k] = native.pointer_field_offset(d, addr, int(counts))
                if ctypes.c_uint64.from_address(base + int(cur[k])).value != addr:
                    return None
        if len(seen) < 3 or (layout is not None and not np.array_equal(layout, cur)):
            return None
        layout = cur
    return layout


_FLAGS_OFFSET = []  # [byte offset of mjModel.opt.disableflags or None] once measured


def _flags_offset():
    """Byte offset in the ``mjModel`` struct of ``opt.disableflags`` (then ``enableflags``), or
    None: the compiled step then runs ``mj_fwdPosition`` as it is (with ``mj_island``).
    Measured once (:func:`~contactopt.native.option_flags_offset`) on two probe
    models of different sizes, which must agree."""
    if not _FLAGS_OFFSET:
        from ... import native

        off = None
        try:
            if native.NATIVE:
                a = native.option_flags_offset(mujoco.MjModel.from_xml_string("<mujoco/>"))
                b = native.option_flags_offset(mujoco.MjModel.from_xml_string(
                    "<mujoco><worldbody><body><freejoint/><geom size='0.1'/></body>"
                    "<site name='s'/></worldbody></mujoco>"))
                off = a if a == b else None
        except Exception:  # noqa: BLE001  # pragma: no cover - another layout: keep mj_island
            off = None
        _FLAGS_OFFSET.append(off)
    return _FLAGS_OFFSET[0]


def _check_data(model, data) -> None:
    """Raise :class:`ParameterError` unless ``data`` has ``model``'s sizes (the compiled step runs
    MuJoCo on the pair through raw pointers; checked once per ``MjData``)."""
    if not isinstance(data, mujoco.MjData):
        raise ParameterError(f"data must be a mujoco.MjData, got {type(data).__name__}")
    sizes = (data.qpos.size, data.qvel.size, data.act.size, data.ctrl.size, data.xpos.shape[0])
    if sizes != (model.nq, model.nv, model.na, model.nu, model.nbody):
        raise ParameterError(
            "data was made for a different model (nq, nv, na, nu, nbody "
            f"{sizes} vs the solver's {(model.nq, model.nv, model.na, model.nu, model.nbody)})")


#: MuJoCo fixed-size arrays the compiled step reads, by ``kernels.DO_*`` offset index
_SPAN_FIELDS = ("M", "qpos", "qvel", "qfrc_bias", "qfrc_passive", "qfrc_applied", "xfrc_applied",
                "cdof", "cdof_dot", "cvel", "subtree_com", "xipos", "xpos", "site_xpos",
                "qLD", "qLDiagInv")


def _data_span(model, data):
    """``(data, span, offsets)``: one float64 view over the part of ``data``'s buffer that holds
    the arrays of :data:`_SPAN_FIELDS` and their offsets in it (one kernel argument instead of
    fourteen).  ``(data, None, None)`` if the arrays are not laid out in one buffer as expected."""
    arrs = [getattr(data, name) for name in _SPAN_FIELDS]
    live = [x for x in arrs if x.size]
    if not all(x.dtype == np.float64 and x.flags.c_contiguous for x in live):
        return data, None, None
    addr = [x.ctypes.data for x in live]
    lo = min(addr)
    hi = max(p + x.nbytes for p, x in zip(addr, live))
    nbuffer = getattr(data, "nbuffer", None)
    if nbuffer is None or hi - lo > nbuffer or any((p - lo) % 8 for p in addr):
        return data, None, None
    raw = (ctypes.c_double * ((hi - lo) // 8)).from_address(lo)
    span = np.frombuffer(raw, dtype=np.float64)
    doff = np.zeros(K.DO_N, dtype=np.int64)
    for k, x in enumerate(arrs):
        if x.size:
            doff[k] = (x.ctypes.data - lo) // 8
            if not np.shares_memory(span, x) or not np.array_equal(
                    span[doff[k]:doff[k] + x.size], x.ravel(), equal_nan=True):
                return data, None, None
    return data, span, doff
