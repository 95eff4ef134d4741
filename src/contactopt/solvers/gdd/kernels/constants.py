"""Codes and layouts shared by the kernels: the fastmath flags, row kinds and states,
solve status, parameter / statistics / log indices.
"""

FM = {"reassoc", "contract", "arcp", "nsz"}

# ---------------------------------------------------------------- row kinds / states

ROW_EQUALITY = 0
ROW_FRICTION = 1
ROW_ONESIDED = 2  # joint/tendon limits, frictionless and pyramidal contact rows
ROW_CONE = 3  # first (normal) row of an elliptic contact
ROW_CONE_TAIL = 4  # remaining rows of an elliptic contact (handled with their head)

# mujoco.mjtConstraint numbers
_CNSTR_EQUALITY = 0
_CNSTR_FRICTION_DOF = 1
_CNSTR_FRICTION_TENDON = 2
_CNSTR_CONTACT_ELLIPTIC = 7

# same numbers as mujoco.mjtConstraintState
STATE_SATISFIED = 0
STATE_QUADRATIC = 1
STATE_LINEARNEG = 2
STATE_LINEARPOS = 3
STATE_CONE = 4

# solver status codes (mirrored by contactopt.solvers.gdd.solver.GDDStatus)
STATUS_CONVERGED = 0
STATUS_MAX_ITERATIONS = 1
STATUS_MAX_DUAL_UPDATES = 2
STATUS_STALLED = 3
STATUS_NUMERICAL_ERROR = 4
STATUS_WORKSPACE = 5  # internal: the workspace is too small (sizes in stats[ST_WS_*]); call again

# float parameters
PAR_PENALTY = 0
PAR_TOL_GRAD = 1
PAR_TOL_FEAS = 2
PAR_NPAR = 3

# int parameters
IPAR_MAX_ITER = 0
IPAR_MAX_DUAL = 1
IPAR_EXACT_LS = 2  # 1: piecewise-quadratic sweep (pyramidal only), 0: 1-D Newton/bisection
IPAR_NEWTON_DUAL = 3  # 1: second-order multiplier update, 0: first-order λ += ρ h
IPAR_SCALES = 4  # 1: (re)compute the penalty/violation scales now (cleared by the solve)
IPAR_PATTERN = 5  # 1: (re)compute the sparsity of Ceq/Cbox (cleared by the solve), 0: the workspace holds it
IPAR_NZ = 6  # sizes of the packed actuation: unactuated directions, box rows, controls
IPAR_NB = 7
IPAR_NC = 8
IPAR_KM = 9  # sizes of the packed cost: mass terms, diagonal terms, rows, force rows
IPAR_KD = 10
IPAR_M1 = 11
IPAR_M2 = 12
IPAR_SAFEGUARD = 13  # 1: guard against non-finite / huge initial guesses and steps (restart cold)
IPAR_NEFC = 14  # out (gdd_step): the state's number of constraint rows
IPAR_OUT_NEED = 15  # out (gdd_step): the length of the float output it needs
IPAR_SINCE_SCALES = 16  # in/out: solves since the scales were computed
IPAR_SCALE_INTERVAL = 17  # recompute the scales when IPAR_SINCE_SCALES reaches this
IPAR_NIPAR = 18

# statistics
ST_STATUS = 0
ST_ITER = 1
ST_DUAL = 2
ST_FACT = 3
ST_GRAD = 4
ST_FEAS_EQ = 5
ST_FEAS_BOX = 6
ST_OBJECTIVE = 7
ST_COST = 8
ST_EVENTS = 9
ST_LS_EVALS = 10
ST_CLAMPED = 11
ST_WS_FLOAT = 12  # workspace lengths needed (with STATUS_WORKSPACE)
ST_WS_INT = 13
ST_SAFEGUARD = 14  # step safeguard actions (non-finite / huge / non-descent step replaced)
ST_NSTAT = 15

# per-iteration log columns
LOG_OBJECTIVE = 0
LOG_GRAD = 1
LOG_STEP = 2
LOG_ALPHA = 3
LOG_EVENTS = 4
LOG_NACTIVE = 5
LOG_FACTORED = 6
LOG_OUTER = 7
LOG_NCOL = 8
