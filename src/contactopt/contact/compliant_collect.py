"""Collection stage of :class:`~contactopt.contact.compliant_batch.CompliantContactBatch`: the
per-configuration loop of MuJoCo collision queries as a compiled (numba) kernel
(:func:`_collect_kernel`, used where
:data:`~contactopt.contact.compliant_batch.NATIVE_COLLECT` is set), the ``mjData`` /
``mjContact`` byte layout that it reads (:data:`_LAYOUT`), and the option bits of the sync of
the private collision copy."""

from __future__ import annotations

import ctypes

import mujoco
import numpy as np
from numba import njit as _njit

from .. import native

# =========================================================================== native collection loop
#
# The per-configuration loop of :meth:`CompliantContactBatch._collect` (``mj_kinematics``,
# ``mj_collision``, ``mj_comPos`` and the copies of the contact data) runs as a numba kernel without the GIL that
# calls the very MuJoCo C functions the bindings call (the mechanism of
# :mod:`contactopt.native`: the ``libmujoco`` of the bindings, on the ``MjModel`` /
# ``MjData`` pointers of the Python objects), so its outputs are bit for bit those of the Python
# loop, which remains the reference and the fallback.  The kernel reads ``mjData.ncon`` and the
# ``mjData.contact`` pointer from the ``mjData`` struct and the contact fields from the
# ``mjContact`` array at byte offsets measured once from the bindings' own views
# (:func:`_contact_layout`, checked on a probe model with contacts; any mismatch disables the
# kernel).  As in :mod:`contactopt.native`: a MuJoCo *fatal* error inside the kernel goes to
# MuJoCo's default handler, which prints it and ends the process, where the Python loop raised
# ``mujoco.FatalError``.


_mj_kinematics, _mj_compos, _mj_collision = (native.mj_kinematics, native.mj_compos,
                                              native.mj_collision)


def _struct_offsets(d: mujoco.MjData):
    """Byte offsets in the ``mjData`` struct of ``ncon`` and of the ``contact`` pointer (the field
    after the ``cfrc_ext`` pointer, found by its address among the pointer slots after ``ncon``)."""
    ncon_off = native.ncon_field_offset(d)
    return ncon_off, native.pointer_field_offset(d, d.cfrc_ext.ctypes.data, ncon_off) + 8


def _contact_layout():
    """``(ncon offset, contact pointer offset, sizeof(mjContact), field offsets)`` or None.

    Field offsets (bytes in ``mjContact``): dist, pos, frame, friction, geom, exclude.  Measured
    on two MjData of a probe model (overlapping spheres and a box) and checked against the
    bindings' ``d.ncon`` and ``d.contact`` views at several configurations.
    """
    if not native.NATIVE:
        return None
    try:
        m = mujoco.MjModel.from_xml_string(
            "<mujoco><worldbody><geom type='sphere' size='0.1'/>"
            "<body><freejoint/><geom type='sphere' size='0.1'/></body>"
            "<body pos='0 0.05 0'><freejoint/><geom type='box' size='0.1 0.1 0.1'/></body>"
            "</worldbody></mujoco>")
        layout = None
        for trial in range(2):
            d = mujoco.MjData(m)
            offs = _struct_offsets(d)
            for shift in (0.0, 0.03, 5.0):  # 3 contacts, fewer, none
                d.qpos[:] = m.qpos0
                d.qpos[0] += shift
                mujoco.mj_kinematics(m, d)
                mujoco.mj_collision(m, d)
                n = ctypes.c_int32.from_address(d._address + offs[0]).value
                if n != d.ncon:
                    return None
                if not n:
                    continue
                c = d.contact
                if ctypes.c_uint64.from_address(d._address + offs[1]).value != c.dist.ctypes.data:
                    return None
                a0 = c.dist.ctypes.data
                fields = tuple(getattr(c, f).ctypes.data - a0
                               for f in ("dist", "pos", "frame", "friction", "geom", "exclude"))
                cur = offs + (c.dist.strides[0], fields)
                if layout is not None and cur != layout:
                    return None
                layout = cur
        if layout is None or layout[2] % 8 or any(f % 8 for f in layout[3][:4]) or any(f % 4 for f in layout[3][4:]):
            return None
        return layout
    except Exception:  # noqa: BLE001  # pragma: no cover
        return None


_LAYOUT = _contact_layout()
_NO_X9, _NO_X3 = np.zeros((0, 0, 9)), np.zeros((0, 0, 3))
_NO_MASK = np.zeros(0, dtype=bool)
_CONTACT_FIELDS = np.array(_LAYOUT[3] if _LAYOUT is not None else (0,) * 6, dtype=np.int64)


@_njit(cache=True, nogil=True)
def _collect_kernel(m, d, ncon_off, con_off, stride, fields, qpos, dq, k0, top,
                    cfg, dist, geom, fric, excl, pos, frame,
                    d_cdof, d_scom, cdof, scom, want_x, d_xmat, d_xpos, xmat, xpos, status):
    """The loop of :meth:`CompliantContactBatch._collect` from configuration ``k0`` (contacts so far:
    ``top``).  ``status = (k, top, end)``: ``k == K`` when done, else configuration ``k`` needs
    ``end`` entries of capacity (its data are redone on the next call)."""
    K = qpos.shape[0]
    cap = dist.shape[0]
    nq = dq.shape[0]
    s8 = stride // 8
    s4 = stride // 4
    o_dist, o_pos, o_frame, o_fric = fields[0] // 8, fields[1] // 8, fields[2] // 8, fields[3] // 8
    o_geom, o_excl = fields[4] // 4, fields[5] // 4
    ncon_p = native.raw_i32(d + ncon_off, 1)
    con_p = native.raw_u64(d + con_off, 1)
    for k in range(k0, K):
        for j in range(nq):
            dq[j] = qpos[k, j]
        _mj_kinematics(m, d)
        _mj_collision(m, d)
        n = ncon_p[0]
        if n == 0:
            continue
        _mj_compos(m, d)
        cdof[k] = d_cdof
        scom[k] = d_scom
        if want_x:
            xmat[k] = d_xmat
            xpos[k] = d_xpos
        end = top + n
        if end > cap:
            status[0] = k
            status[1] = top
            status[2] = end
            return
        addr = con_p[0]
        cf = native.raw_f64(addr, n * s8)
        ci = native.raw_i32(addr, n * s4)
        for c in range(n):
            i = top + c
            b8 = c * s8
            b4 = c * s4
            cfg[i] = k
            dist[i] = cf[b8 + o_dist]
            geom[i, 0] = ci[b4 + o_geom]
            geom[i, 1] = ci[b4 + o_geom + 1]
            fric[i] = cf[b8 + o_fric]
            excl[i] = ci[b4 + o_excl]
            for j in range(3):
                pos[i, j] = cf[b8 + o_pos + j]
            for j in range(9):
                frame[i, j] = cf[b8 + o_frame + j]
        top = end
    status[0] = K
    status[1] = top
    status[2] = top


_DSBL_CONSTRAINT = int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
_DSBL_CONTACT = int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
_DSBL_OTHER = (int(mujoco.mjtDisableBit.mjDSBL_MIDPHASE) | int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
               | int(mujoco.mjtDisableBit.mjDSBL_EQUALITY) | int(mujoco.mjtDisableBit.mjDSBL_FRICTIONLOSS))
_ENBL_SLEEP = int(getattr(mujoco.mjtEnableBit, "mjENBL_SLEEP", 0))
_OPT_FIELDS = ("disableflags", "enableflags", "o_margin", "o_friction")
