"""Batched controllers: one ``policy_batch(obs (N, 36)) -> (N, 4)`` call for N independent envs.

A vector env steps N vehicles at once; its controller should too. :class:`BatchController` is
the interface, :func:`make_batch_controller` the one entry point:

* ``pid``, ``geo``, ``geo_res``, ``geo_rls`` have vectorized implementations (numpy over the
  batch, no per-env Python loop): per-env integrators, estimator and RLS states, the same formula
  functions as the single controllers where the arithmetic allows it (the geometric attitude
  torque, the outer loop, the PID integrator, the env's period residual), and results equal to N
  single controllers fed the same observations to ≤ 1e-9 (``tests/controllers/test_batch_*``);
* ``ppo`` batches the numpy forward of its network (:class:`BatchedPPO`, bit for bit one env's);
* ``ppo_res`` is batched ``geo`` around that forward (:class:`~residual_quad.controllers.ppo_res.
  BatchedResidualPPO`: corrections bit for bit, actions to ≤ 1e-12);
* any other controller (``hnewton``, ``hnewton_rls``, user controllers) is wrapped by
  :class:`BatchedLoop`, N per-env instances behind the same interface.

``reset_batch(seeds)`` resets every env, ``reset_env(i, seed)`` one env (a vector env's
autoreset). A batch of the wrong shape is a ``ValueError``. A row with a non-finite entry (a bad
sample of one env) follows the single controllers' rule
(:class:`~residual_quad.controllers.base.ObservationGuard`) row by row: that env gets its last
action (hover before its first), its state is left exactly as it was, and the other rows are
computed as if the bad row had been clean (:class:`RowGuard`).
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from residual_quad.controllers.attitude import AttitudeGains, InnerLoop, geometric_torque
from residual_quad.controllers.base import (
    ControlContext,
    Controller,
    ObservationGuard,
    available_controllers,
    controller_context,
    hover_action,
    make_controller,
    to_rotor_action,
)
from residual_quad.controllers.trackers import (
    DEFAULT_KD,
    DEFAULT_KP,
    outer_accel,
    pid_integral_step,
)
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

Seeds = Sequence[int | None] | None


@runtime_checkable
class BatchController(Protocol):
    """What a vector env's harness flies: N controllers behind one call."""

    #: the env ``action_mode`` the actions are meant for
    action_mode: str
    #: number of envs in the batch
    n_envs: int

    def reset_batch(self, seeds: Seeds = None) -> None: ...

    def reset_env(self, index: int, seed: int | None = None) -> None: ...

    def policy_batch(self, obs: np.ndarray) -> np.ndarray: ...


# ----------------------------------------------------------------------------- input checks
def check_n_envs(n_envs: Any) -> int:
    """``n_envs`` as an int ≥ 1, or a ``ValueError`` naming it."""
    if isinstance(n_envs, bool) or not isinstance(n_envs, numbers.Integral) or n_envs < 1:
        raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
    return int(n_envs)


def check_obs_batch(obs: Any, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """``obs`` as a float64 array (n_envs, 36) and the (n_envs,) mask of its rows with a NaN or
    ±inf entry; a ``ValueError`` for another shape."""
    arr = np.asarray(obs, dtype=np.float64)
    if arr.shape != (n_envs, OBS_DIM):
        raise ValueError(
            f"observation batch must have shape ({n_envs}, {OBS_DIM}) (n_envs, obs), "
            f"got {arr.shape}"
        )
    return arr, ~np.isfinite(arr).all(axis=1)


def _neutral_obs() -> np.ndarray:
    """A finite stand-in for a bad row while the batch is computed (its result is discarded and
    the row's state restored): at rest at the origin, level, reference at the origin."""
    obs = np.zeros(OBS_DIM)
    obs[L.rot] = np.eye(3).ravel()
    return obs


NEUTRAL_OBS = _neutral_obs()


class RowGuard:
    """Held actions of a batch, one row per env: :class:`~residual_quad.controllers.base.
    ObservationGuard`'s rule row by row.

    Args:
        n_envs: number of envs.
        hover: the action held by an env that has not acted since its reset (4,).
    """

    def __init__(self, n_envs: int, hover: np.ndarray):
        self.hover = np.asarray(hover, dtype=float)
        self.held = np.tile(self.hover, (n_envs, 1))
        #: (N,) bad samples (and numerical failures) answered with the held action since reset
        self.nonfinite_observations = np.zeros(n_envs, dtype=np.int64)

    def reset(self, index: int | slice = slice(None)) -> None:
        """No held action (hover) and no count for the envs ``index``."""
        self.held[index] = self.hover
        self.nonfinite_observations[index] = 0

    def finish(self, action: np.ndarray, bad: np.ndarray) -> np.ndarray:
        """``action`` (N, 4) with the rows ``bad`` (and rows that came out non-finite) replaced
        by their held action; every other row becomes its env's held action."""
        bad = bad | ~np.isfinite(action).all(axis=1)
        if bad.any():
            action = np.where(bad[:, None], self.held, action)
            self.nonfinite_observations += bad
        self.held[...] = action
        return action


def check_seeds(seeds: Seeds, n_envs: int) -> list[int | None]:
    """``seeds`` as a list of n_envs seeds (``None`` → all ``None``); ``ValueError`` otherwise."""
    if seeds is None:
        return [None] * n_envs
    seeds = list(seeds)
    if len(seeds) != n_envs:
        raise ValueError(f"reset_batch needs {n_envs} seeds (one per env), got {len(seeds)}")
    for i, s in enumerate(seeds):
        if s is not None and (isinstance(s, bool) or not isinstance(s, numbers.Integral)):
            raise ValueError(f"seed of env index {i} must be an integer or None, got {s!r}")
    return seeds


def _check_index(index: Any, n_envs: int) -> int:
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise ValueError(f"env index must be an integer in [0, {n_envs}), got {index!r}")
    if not 0 <= index < n_envs:
        raise ValueError(f"env index {index} is out of range [0, {n_envs})")
    return int(index)


# ----------------------------------------------------------------------------- generic fallback
class BatchedLoop:
    """Any :class:`Controller` as a :class:`BatchController`: N per-env instances, one
    ``policy`` call each (the fallback for controllers without a vectorized path).

    Args:
        controllers: the N instances (independent objects; all with the same ``action_mode``).
    """

    def __init__(self, controllers: Sequence[Controller]):
        self.controllers = list(controllers)
        if not self.controllers:
            raise ValueError("BatchedLoop needs at least one controller")
        if len({id(c) for c in self.controllers}) != len(self.controllers):
            raise ValueError("BatchedLoop needs one independent controller instance per env")
        modes = {c.action_mode for c in self.controllers}
        if len(modes) != 1:
            raise ValueError(f"the controllers of a batch act in different modes {sorted(modes)}")
        self.action_mode = modes.pop()
        self.n_envs = len(self.controllers)
        # controllers without their own guard (user controllers) are guarded here, per row
        self._guarded = np.array([isinstance(c, ObservationGuard) for c in self.controllers])
        context = getattr(self.controllers[0], "context", None) or ControlContext()
        self.guard = RowGuard(self.n_envs, hover_action(self.action_mode, context.airframe))

    @classmethod
    def from_factory(cls, factory: Callable[[], Controller], n_envs: int) -> BatchedLoop:
        """N instances from a zero-argument factory."""
        return cls([factory() for _ in range(check_n_envs(n_envs))])

    def reset_batch(self, seeds: Seeds = None) -> None:
        for c, s in zip(self.controllers, check_seeds(seeds, self.n_envs), strict=True):
            c.reset(s)
        self.guard.reset()

    def reset_env(self, index: int, seed: int | None = None) -> None:
        index = _check_index(index, self.n_envs)
        self.controllers[index].reset(seed)
        self.guard.reset(index)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, bad = check_obs_batch(obs, self.n_envs)
        skip = bad & ~self._guarded  # a guarded controller answers its bad sample itself
        action = np.stack(
            [
                h if s else np.asarray(c.policy(o), dtype=float)
                for c, o, s, h in zip(self.controllers, obs, skip, self.guard.held, strict=True)
            ]
        )
        return self.guard.finish(action, skip)

    @property
    def last_residual(self) -> np.ndarray:
        """(N, 3) m/s², world: each instance's ``last_residual`` (NaN where it has none)."""
        nan = (np.nan, np.nan, np.nan)
        return np.array([getattr(c, "last_residual", nan) for c in self.controllers], dtype=float)


class BatchGroups:
    """Several batch controllers side by side in one batch: part ``j`` flies the envs
    ``rows[j]`` (e.g. every controller of a sweep in one vector env).

    Args:
        parts: ``(controller, rows)`` pairs; the rows of all parts partition ``range(N)`` and
            each controller's ``n_envs`` is its number of rows; one ``action_mode`` for all.
    """

    def __init__(self, parts: Sequence[tuple[BatchController, Sequence[int]]]):
        if not parts:
            raise ValueError("BatchGroups needs at least one part")
        self.parts = [(c, np.asarray(rows, dtype=np.int64)) for c, rows in parts]
        every = np.sort(np.concatenate([rows for _, rows in self.parts]))
        if not np.array_equal(every, np.arange(len(every))):
            raise ValueError("the rows of the parts must partition range(n_envs)")
        for c, rows in self.parts:
            if c.n_envs != len(rows):
                raise ValueError(f"a part flies {c.n_envs} envs but was given {len(rows)} rows")
        modes = {c.action_mode for c, _ in self.parts}
        if len(modes) != 1:
            raise ValueError(f"the parts of a batch act in different modes {sorted(modes)}")
        self.action_mode = modes.pop()
        self.n_envs = len(every)
        self._owner = np.empty(self.n_envs, dtype=np.int64)  # env → (part, row in the part)
        self._local = np.empty(self.n_envs, dtype=np.int64)
        for j, (_, rows) in enumerate(self.parts):
            self._owner[rows] = j
            self._local[rows] = np.arange(len(rows))

    def reset_batch(self, seeds: Seeds = None) -> None:
        seeds = check_seeds(seeds, self.n_envs)
        for c, rows in self.parts:
            c.reset_batch([seeds[i] for i in rows.tolist()])

    def reset_env(self, index: int, seed: int | None = None) -> None:
        index = _check_index(index, self.n_envs)
        self.parts[self._owner[index]][0].reset_env(int(self._local[index]), seed)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, _ = check_obs_batch(obs, self.n_envs)  # each part holds its own bad rows
        action = np.empty((self.n_envs, 4))
        for c, rows in self.parts:
            action[rows] = c.policy_batch(obs[rows])
        return action

    @property
    def last_residual(self) -> np.ndarray:
        """(N, 3) m/s², world: each part's ``last_residual`` (NaN where it has none)."""
        out = np.full((self.n_envs, 3), np.nan)
        for c, rows in self.parts:
            value = getattr(c, "last_residual", None)
            if value is not None:
                out[rows] = value
        return out


# ----------------------------------------------------------------------------- inner loop
def mix_batch(frame: Airframe, thrust: np.ndarray, torque: np.ndarray) -> np.ndarray:
    """:func:`residual_quad.envs.airframe.mix` of each env: collective (N,) N, torque (N, 3)
    N·m → rotor thrusts (N, 4) N, with the same clip and proportional torque squeeze."""
    fmax = frame.max_rotor_thrust
    thrust = np.clip(thrust, 0.0, 4.0 * fmax)
    tx, ty, tz = torque[:, 0], torque[:, 1], torque[:, 2]
    base = 0.25 * thrust
    delta = np.stack([a * tx + b * ty + c * tz for a, b, c in frame._mix_rows], axis=1)
    lo, hi = delta.min(axis=1), delta.max(axis=1)
    fits = (base + lo >= 0.0) & (base + hi <= fmax)
    if fits.all():
        return base[:, None] + delta
    s = np.ones_like(base)
    up = hi > 1e-12
    s = np.where(up, np.minimum(s, (fmax - base) / np.where(up, hi, 1.0)), s)
    down = lo < -1e-12
    s = np.where(down, np.minimum(s, -base / np.where(down, lo, -1.0)), s)
    s = np.maximum(s, 0.0)
    squeezed = np.clip(base[:, None] + s[:, None] * delta, 0.0, fmax)
    return np.where(fits[:, None], base[:, None] + delta, squeezed)


class BatchInnerLoop:
    """:class:`InnerLoop` for N envs: acceleration commands (N, 3) world m/s² and headings →
    rotor thrusts (N, 4) N; :attr:`saturated` and :attr:`last_thrust` are per env."""

    def __init__(self, airframe: Airframe, n_envs: int, gains: AttitudeGains | None = None):
        single = InnerLoop(airframe, gains)  # the gains, computed once, the same way
        self.airframe = airframe
        self.gains = single.gains
        self._J, self._kR, self._kW = single._J, single._kR, single._kW
        self.tan_max_tilt = single.tan_max_tilt
        self.n_envs = n_envs
        self.saturated = np.zeros(n_envs, dtype=bool)
        self.last_thrust = np.full(n_envs, airframe.hover_thrust)

    def thrust_vector(self, a_cmd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Desired force components (N,) each (N, world), tilt-limited; sets :attr:`saturated`."""
        frame = self.airframe
        m = frame.mass
        fx, fy, fz = m * a_cmd[:, 0], m * a_cmd[:, 1], m * (a_cmd[:, 2] + frame.gravity)
        f_min = 0.05 * frame.hover_thrust
        sat = fz < f_min  # never command a downward thrust vector
        fz = np.where(sat, f_min, fz)
        h = np.sqrt(fx * fx + fy * fy)
        h_max = fz * self.tan_max_tilt
        over = h > h_max
        if over.any():
            h_safe = np.where(over, h, 1.0)
            fx = np.where(over, fx * h_max / h_safe, fx)
            fy = np.where(over, fy * h_max / h_safe, fy)
            sat = sat | over
        self.saturated = sat
        return fx, fy, fz

    def __call__(
        self,
        R_rows: np.ndarray,
        omega_b: np.ndarray,
        a_cmd: np.ndarray,
        yaw_des: np.ndarray,
        yaw_rate_des: np.ndarray,
    ) -> np.ndarray:
        """Rotor thrusts (N, 4) for rotations ``R_rows`` (N, 9) body → world row-major, rates
        ``omega_b`` (N, 3) rad/s body, commands ``a_cmd`` (N, 3) m/s² world and headings
        ``yaw_des``/``yaw_rate_des`` (N,) rad, rad/s."""
        r = R_rows.T  # 9 rows of N values
        fx, fy, fz = self.thrust_vector(a_cmd)
        frame = self.airframe
        thrust = fx * r[2] + fy * r[5] + fz * r[8]  # F · (R e_z)
        self.saturated = self.saturated | (thrust > frame.max_thrust)
        thrust = np.clip(thrust, 0.0, frame.max_thrust)
        self.last_thrust = thrust
        n = np.sqrt(fx * fx + fy * fy + fz * fz)
        w = omega_b.T
        torque = geometric_torque(
            np,
            r,
            (w[0], w[1], w[2]),
            (fx / n, fy / n, fz / n),
            yaw_des,
            yaw_rate_des,
            self._J,
            self._kR,
            self._kW,
        )
        return mix_batch(frame, thrust, np.stack(torque, axis=1))


# ----------------------------------------------------------------------------- trackers
class BatchTracker:
    """:class:`~residual_quad.controllers.trackers.Tracker` (``geo``) for N envs.

    Args:
        context: nominal airframe and control period (shared by the batch).
        n_envs: number of envs.
        kp, kd, attitude: as the single tracker.
    """

    action_mode = "rotor"
    name = "geo"

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
    ):
        self.n_envs = check_n_envs(n_envs)
        self.context = context or ControlContext()
        self.airframe = self.context.airframe
        self.dt = self.context.control_dt
        self.kp, self.kd = float(kp), float(kd)
        self.inner = BatchInnerLoop(self.airframe, self.n_envs, attitude)
        self.excitation = np.zeros((self.n_envs, 3))  # m/s², added to a_cmd per env
        self.last_a_cmd = np.zeros((self.n_envs, 3))
        self.last_residual = np.zeros((self.n_envs, 3))
        self.guard = RowGuard(self.n_envs, hover_action(self.action_mode, self.airframe))
        self.reset_batch()

    # -- state ---------------------------------------------------------------------------------
    def _reset_rows(self, index: int | slice) -> None:
        """Initial state of the envs ``index`` (override and extend)."""
        self.last_a_cmd[index] = 0.0
        self.last_residual[index] = 0.0
        self.inner.saturated[index] = False
        self.inner.last_thrust[index] = self.airframe.hover_thrust
        self.guard.reset(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        """``(object, attribute)`` of every per-env state array (row = env), which a bad
        sample must leave as it was (override and extend)."""
        return [
            (self, "last_a_cmd"),
            (self, "last_residual"),
            (self.inner, "saturated"),
            (self.inner, "last_thrust"),
        ]

    def _forget_rows(self, rows: np.ndarray) -> None:
        """The envs ``rows`` had a bad sample: their next observation does not follow their
        previous one (see :meth:`ObservationGuard.forget_previous_sample`)."""

    def reset_batch(self, seeds: Seeds = None) -> None:
        """Initial state of every env (the trackers are deterministic: seeds are checked only)."""
        check_seeds(seeds, self.n_envs)
        self._reset_rows(slice(None))

    def reset_env(self, index: int, seed: int | None = None) -> None:
        """Initial state of env ``index`` only (autoreset), the others untouched."""
        check_seeds([seed], 1)
        self._reset_rows(_check_index(index, self.n_envs))

    # -- hooks ---------------------------------------------------------------------------------
    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        return outer_accel(obs[:, L.ref_acc], e_p, e_v, self.kp, self.kd)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return np.zeros_like(a_cmd)

    # -- interface -----------------------------------------------------------------------------
    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions (N, 4) in [-1, 1] (``rotor`` mode) for observations (N, 36); a row with a
        non-finite entry gets its env's last action and leaves its state as it was."""
        obs, bad = check_obs_batch(obs, self.n_envs)
        if not bad.any():
            return self.guard.finish(self._act_batch(obs), bad)
        # the batch is computed with a finite stand-in in the bad rows (every operation is row
        # by row, so the other rows are those of a clean batch), then their state is restored
        saved = [(o, a, getattr(o, a)[bad].copy()) for o, a in self._row_state()]
        action = self._act_batch(np.where(bad[:, None], NEUTRAL_OBS, obs))
        for o, a, rows in saved:
            getattr(o, a)[bad] = rows
        self._forget_rows(bad)
        return self.guard.finish(action, bad)

    @property
    def nonfinite_observations(self) -> np.ndarray:
        """(N,) bad samples answered with the held action since each env's reset."""
        return self.guard.nonfinite_observations

    def _act_batch(self, obs: np.ndarray) -> np.ndarray:
        """The trackers' law for a finite batch (N, 36) → actions (N, 4)."""
        R = obs[:, L.rot].reshape(-1, 3, 3)
        e_p = obs[:, L.ref_pos] - obs[:, L.pos]
        e_v = obs[:, L.ref_vel] - obs[:, L.vel]
        a_cmd = self.desired_accel(obs, e_p, e_v) + self.excitation
        self.last_residual = self.residual_world(obs, R, a_cmd)
        a_eff = a_cmd - self.last_residual
        thrusts = self.inner(
            obs[:, L.rot], obs[:, L.omega_b], a_eff, obs[:, L.ref_yaw], obs[:, L.ref_yaw_rate]
        )
        self.last_a_cmd = a_cmd
        return to_rotor_action(thrusts, self.airframe)


class BatchGeoTracker(BatchTracker):
    """``geo`` for N envs."""

    name = "geo"


class BatchPIDTracker(BatchTracker):
    """``pid`` for N envs: one integrator (m·s, 3 axes) per env, the same anti-windup rule."""

    name = "pid"

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        ki: float = 15.0,  # 1/s³
        i_max: float = 1.0,  # m·s
        **kw: Any,
    ):
        self.ki = float(ki)
        self.i_max = float(i_max)
        self.integral = np.zeros((check_n_envs(n_envs), 3))
        super().__init__(context, n_envs, **kw)

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self.integral[index] = 0.0

    def _row_state(self) -> list[tuple[Any, str]]:
        return [*super()._row_state(), (self, "integral")]

    def desired_accel(self, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray) -> np.ndarray:
        self.integral = pid_integral_step(
            self.integral, e_p, self.dt, self.inner.saturated[:, None], self.i_max
        )
        return super().desired_accel(obs, e_p, e_v) + self.ki * self.integral


class BatchResidualGeoTracker(BatchTracker):
    """``geo_res`` for N envs (and ``geo_rls`` with ``learn``): one
    :class:`~residual_quad.controllers.residual.estimator.BatchResidualEstimator`.

    Args: as :class:`~residual_quad.controllers.residual.trackers.ResidualGeoTracker`, plus
    ``n_envs``.
    """

    name = "geo_res"
    learn = False
    default_settings: dict[str, Any] = {"output_filter": {"tau": 0.2}}  # as the single geo_res

    def __init__(
        self,
        context: ControlContext | None = None,
        n_envs: int = 1,
        *,
        config: Any = None,
        network: Any = None,
        attitude: AttitudeGains | None = None,
        **overrides: Any,
    ):
        from residual_quad.controllers.residual.config import residual_config
        from residual_quad.controllers.residual.estimator import BatchResidualEstimator

        context = context or ControlContext()
        n_envs = check_n_envs(n_envs)
        if config is None:
            overrides = {**self.default_settings, **overrides}
        self.config = cfg = residual_config(config, **overrides)
        if not cfg.vectorized:
            raise ValueError(
                "the batched residual estimator implements the source's settings only (no OOD "
                "guard, no output filter, the trace_cap covariance); make_batch_controller "
                "flies other settings in a BatchedLoop"
            )
        self.estimator = BatchResidualEstimator(context, cfg, n_envs, network, learn=self.learn)
        super().__init__(context, n_envs, kp=cfg.kp, kd=cfg.kd, attitude=attitude)

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self.estimator.reset(index)

    def _row_state(self) -> list[tuple[Any, str]]:
        est = self.estimator
        state = [(est, a) for a in est.ROW_STATE]
        if est.rls is not None:
            state += [(est.rls, a) for a in est.rls.ROW_STATE]
        return [*super()._row_state(), *state]

    def _forget_rows(self, rows: np.ndarray) -> None:
        self.estimator.forget_previous_sample(rows)

    def residual_world(self, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray) -> np.ndarray:
        return self.estimator.estimate(obs, R, a_cmd)

    @property
    def rls(self) -> Any:
        """The batched last-layer RLS (``None`` for ``geo_res``)."""
        return self.estimator.rls

    @property
    def last_estimate(self) -> np.ndarray:
        """Δâ (N, 3) applied at the last step (world, m/s²)."""
        return self.estimator.last_estimate


class BatchRLSGeoTracker(BatchResidualGeoTracker):
    """``geo_rls`` for N envs: per-env RLS state (θ, P, filters, warm-up, previous step)."""

    name = "geo_rls"
    learn = True
    default_settings: dict[str, Any] = {}


# ----------------------------------------------------------------------------- PPO
class BatchedPPO:
    """``ppo`` for N envs: per-env features, one forward for the batch, per-env hold. With the
    numpy forward (:class:`~residual_quad.controllers.ppo.NumpyPolicy`, every plain MLP actor)
    each row equals the single controller's bit for bit; otherwise SB3's batched ``predict``
    runs, whose float32 rounding depends on the batch.

    Args:
        controller: a loaded :class:`~residual_quad.controllers.ppo.PPOController` (its model,
            normalizer and ``action_repeat`` are used).
        n_envs: number of envs.
    """

    def __init__(self, controller: Any, n_envs: int):
        self.single = controller
        self.n_envs = check_n_envs(n_envs)
        self.action_mode = controller.action_mode
        self.action_repeat = controller.action_repeat
        self._k = np.zeros(self.n_envs, dtype=np.int64)
        self._held = np.zeros((self.n_envs, 4))
        self.guard = RowGuard(
            self.n_envs, hover_action(self.action_mode, controller.context.airframe)
        )

    def reset_batch(self, seeds: Seeds = None) -> None:
        check_seeds(seeds, self.n_envs)
        self._k[:] = 0
        self._held[:] = 0.0
        self.guard.reset()

    def reset_env(self, index: int, seed: int | None = None) -> None:
        index = _check_index(index, self.n_envs)
        self._k[index] = 0
        self._held[index] = 0.0
        self.guard.reset(index)

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        from residual_quad.controllers.ppo import ppo_features

        obs, bad = check_obs_batch(obs, self.n_envs)
        due = (self._k % self.action_repeat == 0) & ~bad  # a bad sample is no call
        if due.any():
            x = np.stack([ppo_features(o) for o in obs[due]])
            if self.single.normalizer is not None:
                x = self.single.normalizer(x)
            self._held[due] = self.single.actions(x)
        self._k += ~bad
        return self.guard.finish(self._held.copy(), bad)


# ----------------------------------------------------------------------------- registry
#: name → "module:attribute" of a batched implementation ``factory(context, n_envs, **overrides)``
_BATCH_REGISTRY: dict[str, str | Callable[..., BatchController]] = {
    "pid": "residual_quad.controllers.batch:BatchPIDTracker",
    "geo": "residual_quad.controllers.batch:BatchGeoTracker",
    "geo_res": "residual_quad.controllers.batch:BatchResidualGeoTracker",
    "geo_rls": "residual_quad.controllers.batch:BatchRLSGeoTracker",
}


#: learned policies batched around one numpy forward (their policy files decide: an architecture
#: only SB3's ``predict`` runs flies in a :class:`BatchedLoop`)
_POLICY_BATCHES = ("ppo", "ppo_res")


def _policy_batch(single: Any, name: str, n_envs: int) -> BatchController:
    """The batched controller of a loaded ``ppo``/``ppo_res`` controller ``single``."""
    if name == "ppo":
        return BatchedPPO(single, n_envs)
    from residual_quad.controllers.ppo_res import BatchedResidualPPO

    return BatchedResidualPPO(single, n_envs)


def vectorized_controllers() -> list[str]:
    """Names with a vectorized batch path (the others run in :class:`BatchedLoop`)."""
    return [*_BATCH_REGISTRY, *_POLICY_BATCHES]


def make_batch_controller(
    name: str, n_envs: int, env_or_context: Any = None, **overrides: Any
) -> BatchController:
    """A :class:`BatchController` of ``n_envs`` envs for the registered controller ``name``.

    The vectorized implementation where there is one (:func:`vectorized_controllers`), else a
    :class:`BatchedLoop` of ``n_envs`` instances built by :func:`make_controller` with the same
    arguments. ``env_or_context`` and ``overrides`` as in :func:`make_controller`. The batch
    starts reset (``reset_batch()``).
    """
    if name not in available_controllers():
        raise ValueError(
            f"unknown controller {name!r}; valid choices: {', '.join(available_controllers())}"
        )
    n_envs = check_n_envs(n_envs)
    from residual_quad.controllers.specs import check_spec_options

    overrides = check_spec_options(name, overrides)  # the single controller's option domains
    factory = _BATCH_REGISTRY.get(name)
    if (
        factory is not None
        and name in ("geo_res", "geo_rls")
        and not _residual_vectorized(name, overrides)
    ):
        factory = None  # settings the vectorized estimator does not implement: the loop
    if factory is not None:
        context = controller_context(env_or_context)
        if isinstance(factory, str):
            module, attr = factory.split(":")
            factory = getattr(importlib.import_module(module), attr)
        return factory(context, n_envs, **overrides)
    if name in _POLICY_BATCHES:
        return _policy_batch(make_controller(name, env_or_context, **overrides), name, n_envs)
    loop = BatchedLoop([make_controller(name, env_or_context, **overrides) for _ in range(n_envs)])
    loop.reset_batch()
    return loop


def _residual_vectorized(name: str, overrides: dict[str, Any]) -> bool:
    """Whether the settings of residual tracker ``name`` with ``overrides`` are the vectorized
    estimator's."""
    from residual_quad.controllers.residual.config import residual_config
    from residual_quad.controllers.residual.trackers import ResidualGeoTracker, RLSGeoTracker

    rest = {k: v for k, v in overrides.items() if k not in ("config", "network", "attitude")}
    config = overrides.get("config")
    if config is None:
        cls = RLSGeoTracker if name == "geo_rls" else ResidualGeoTracker
        rest = {**cls.default_settings, **rest}
    return residual_config(config, **rest).vectorized


def has_batch_path(spec: Any, **overrides: Any) -> bool:
    """Whether :func:`batch_from_spec` gives ``spec`` (with ``overrides``) a numpy-vectorized
    batch rather than a loop of instances."""
    if spec.target in _POLICY_BATCHES:
        return True  # a numpy forward (exact) for plain MLP actors; batch_from_spec checks it
    if spec.is_import_path or spec.target not in _BATCH_REGISTRY:
        return False
    if spec.target in ("geo_res", "geo_rls"):
        try:
            return _residual_vectorized(spec.target, {**spec.options, **overrides})
        except (TypeError, ValueError):
            return False  # bad settings: building the controller names the problem
    return True


def batch_from_spec(
    spec: Any, n_envs: int, context: ControlContext | None = None, **overrides: Any
) -> BatchController:
    """The :class:`BatchController` of a resolved :class:`~residual_quad.controllers.specs.
    ControllerSpec` (a sweep's entry) whose actions equal the single controller's to ≤ 1e-9:
    the numpy-vectorized path of its registered name where there is one (``ppo`` with the numpy
    forward of its network), else a :class:`BatchedLoop` of ``spec.build`` instances (import
    paths, ``hnewton``, user controllers, and ``ppo`` policies whose architecture only SB3's
    ``predict`` runs: its float32 batch forward rounds differently from one sample's, which a
    20 s flight amplifies to 2 % in the metrics). ``overrides`` win over the spec's options."""
    n_envs = check_n_envs(n_envs)
    options = {**spec.options, **overrides}
    if spec.target in _POLICY_BATCHES:
        single = spec.build(context, **overrides)
        if getattr(single, "network", None) is not None:
            return _policy_batch(single, spec.target, n_envs)
        loop = BatchedLoop([single, *(spec.build(context, **overrides) for _ in range(n_envs - 1))])
        loop.reset_batch()
        return loop
    if not spec.is_import_path and spec.target in _BATCH_REGISTRY:
        try:
            return make_batch_controller(spec.target, n_envs, context, **options)
        except TypeError as exc:
            raise ValueError(f"controller {spec.label or spec.target!r}: {exc}") from None
    loop = BatchedLoop([spec.build(context, **overrides) for _ in range(n_envs)])
    loop.reset_batch()
    return loop
