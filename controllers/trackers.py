"""Trajectory trackers on one shared inner loop; they differ only in the desired acceleration.

A tracker is a :class:`~residual_quad.controllers.law.Law`: its step computes
``a_cmd = command(...)`` (outer loop, world frame, m/s²), subtracts the estimated residual
``residual(...)`` (zero here; the residual-learning trackers override it) and hands
``a_eff = a_cmd − Δâ`` to its inner stage ``inner_command(...)``: :class:`InnerLoop` here,
``hnewton``'s prioritized thrust vector and allocation there. Its state is one
:class:`TrackerState` (one row per env; the residual trackers and the observer add their
parts). Each hook has the batch form (numpy over the envs) and the one-vehicle form (float
code: one vehicle is not a batch of one, numpy's per-call cost would be several times the
law's), on the same formula functions: :func:`outer_accel`, :func:`pid_integral_step`, the inner
loop's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from residual_quad.controllers.attitude import (
    LAG_INDI_ADAPT,
    MIXERS,
    AttitudeGains,
    InnerLoop,
    attitude_gains,
    default_attitude_gains,
    default_attitude_loop,
    default_mixer,
)
from residual_quad.controllers.base import ControlContext, InformationUse, to_rotor_action
from residual_quad.controllers.feedforward import FeedforwardLead
from residual_quad.controllers.indi import DEFAULT_INDI_HZ, IndiLoop
from residual_quad.controllers.latency import LatencyPredictor
from residual_quad.controllers.law import Law
from residual_quad.controllers.options import (
    NON_NEGATIVE,
    POSITIVE,
    Choice,
    Domain,
    Flag,
    Instance,
    Number,
    Range,
)
from residual_quad.controllers.outer_indi import OuterIndi
from residual_quad.controllers.rotor_model import RotorModel, RotorState, SensedThrusts
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

_ZERO3 = np.zeros(3)

DEFAULT_KP = 20.0  # 1/s², position gain of the trackers (hover offset under Δa: Δa/K_p)
DEFAULT_KD = 8.0  # 1/s, velocity gain
DEFAULT_KI = 15.0  # 1/s³, ``pid``'s integral gain
DEFAULT_I_MAX = 1.0  # m·s, ``pid``'s integral bound per axis

#: the search ranges of the trackers' position and attitude gains (``rquad tune``): a decade
#: around the defaults (kp 20 1/s², kd 8 1/s, ω_n 18 rad/s, ζ 0.9)
GAIN_RANGES: dict[str, Range] = {
    "kp": Range(5.0, 60.0, log=True),  # 1/s²
    "kd": Range(2.0, 20.0, log=True),  # 1/s
    "attitude.wn_rp": Range(8.0, 30.0),  # rad/s
    # damping from 0.7: searched gains settled near ζ 0.52–0.57 fly the 0–0.5 kg tuning vehicles
    # but tip over with the held-out payload's 1.6 × inertia (docs/tuning.md, isolated by one gain)
    "attitude.zeta_rp": Range(0.7, 1.5),
}

#: the attitude loops a tracker flies: the geometric PD alone, or with INDI's torque increment
ATTITUDE_LOOPS = ("pd", "indi")
#: Hz, the filters' bound in the option table: the Nyquist frequency of the default 100 Hz
#: control rate (another rate's is checked when the filter is built)
NYQUIST_HZ = 50.0
#: the options of the attitude loop every tracker takes
LOOP_OPTIONS: dict[str, Domain] = {
    "attitude_loop": Choice(ATTITUDE_LOOPS),
    "mixer": Choice(MIXERS),
    "indi_hz": Number(gt=0.0, lt=NYQUIST_HZ),  # Hz, the INDI filter's natural frequency
    "indi_adapt": Number(ge=0.0, le=1.0),  # the INDI inertia identification's step (0: off)
    "predict_latency": Flag(),  # the latency predictor (default: on behind latency)
    "outer_indi_hz": Number(ge=0.0, lt=NYQUIST_HZ),  # Hz, outer-loop INDI's filter (0: none)
    "ff_lead_s": Number(ge=0.0, le=1.0),  # s, the feed-forward's lead by the jerk (0: none)
}

#: the inner-loop gains option: :class:`AttitudeGains` or a mapping of its fields
ATTITUDE = Instance(
    (AttitudeGains,),
    "AttitudeGains or a mapping of its fields (wn_rp, zeta_rp, wn_yaw, zeta_yaw, max_tilt, "
    "budget_tilt, thrust_budget), each finite and > 0 (budget_tilt ≥ 0)",
    coerce=attitude_gains,
)


def outer_accel(
    ref_acc: np.ndarray, e_p: np.ndarray, e_v: np.ndarray, kp: float, kd: float
) -> np.ndarray:
    """Desired acceleration (world, m/s²): feed-forward plus PD on ``ref − state`` (m, m/s);
    shapes (3,) or (N, 3) — one formula for the single and the batched trackers."""
    return ref_acc + kp * e_p + kd * e_v


def pid_integral_step(
    integral: np.ndarray,
    e_p: np.ndarray,
    dt: float,
    saturated: bool | np.ndarray,
    i_max: float,
) -> np.ndarray:
    """The PID's integral (m·s) after one period: ``∫ += e_p·dt`` unless the inner loop saturated
    on the previous step and the step would grow the integral, then clipped to ``±i_max``.

    ``integral`` and ``e_p`` are (3,) with ``saturated`` a bool, or (N, 3) with ``saturated`` a
    bool array of shape (N, 1) (one flag per env) — one formula for both trackers.
    """
    step = e_p * dt
    if saturated is True or (saturated is not False and bool(np.any(saturated))):
        step = np.where(np.logical_and(saturated, step * integral > 0.0), 0.0, step)
    return np.clip(integral + step, -i_max, i_max)


class TrackerState(NamedTuple):
    """The state of a tracker, one row per env; parts a tracker does not have are ``None``."""

    last_a_cmd: np.ndarray  # m/s², world, (n, 3): the previous step's command
    last_residual: np.ndarray  # m/s², world, (n, 3): Δâ applied at the last step
    saturated: np.ndarray  # (n,) bool: the inner loop clipped tilt or collective last step
    last_thrust: np.ndarray  # N, (n,): the collective of the last command
    rotors: RotorState | None = None  # the rotor model (a tracker told the rotors' lag)
    integral: np.ndarray | None = None  # m·s, world, (n, 3): ``pid``'s position-error integral
    estimator: Any = None  # the residual estimator (residual trackers)
    observer: Any = None  # the angular disturbance observer (``geo_rls_dob``)
    #: m/s², world, (n, 3): an input added to the command (data collection's excitation)
    excitation: np.ndarray | None = None
    indi: Any = None  # the INDI attitude loop's filter and previous sample (``attitude_loop``)
    latency: Any = None  # the latency predictor's commands and disturbance estimates
    prioritized: Any = None  # ``hnewton``'s thrust vector, Newton memory and warm faces
    policy: Any = None  # ``ppo_res``'s correction: its hold and the policy inputs' memory
    outer: Any = None  # outer-loop INDI's filter (``outer_indi_hz``)
    #: m/s², world, (n, 3): the tracker's own residual estimate of the last step (outer INDI's)
    last_model: np.ndarray | None = None
    sensed: Any = None  # the thrusts of the last periods (behind sensor latency)
    lead: Any = None  # the feed-forward lead's previous reference acceleration (``ff_lead_s``)


class Tracker(Law):
    """Base tracker: position feedback + trajectory feed-forward through the shared inner loop.

    Args:
        context: nominal airframe and control period.
        kp: position gain, 1/s². With no integrator the hover steady-state error under a constant
            model error Δa is exactly Δa/kp (0.129 m for +0.25 kg at kp = 20).
        kd: velocity gain, 1/s.
        attitude: inner-loop gains (``None``: the context's default,
            :func:`~residual_quad.controllers.attitude.default_attitude_gains` — behind rotors
            with a time constant, the lag-tuned set at a bandwidth scheduled on the lag).
        rotor_tau_s: the rotors' time constant the tracker is told, s (0: ideal rotors;
            ``None``: the context's). With lagged rotors the tracker reads the thrusts through
            its first-order model of them (:mod:`~residual_quad.controllers.rotor_model`)
            instead of the commanded ones.
        attitude_loop: ``"pd"`` (the geometric PD) or ``"indi"``: the PD plus the filtered torque
            the nominal rotational model misses (:mod:`~residual_quad.controllers.indi`);
            ``None``: the context's default (``"indi"`` behind lagging rotors).
        mixer: ``"squeeze"`` (the source's: the torque scaled around the commanded collective)
            or ``"desaturate"`` (at the top the collective yields to the torque;
            :func:`~residual_quad.envs.airframe.rotor_thrusts`); ``None``: the context's
            default (``"desaturate"`` behind lagging rotors).
        indi_hz: natural frequency of the INDI filter, Hz.
        indi_adapt: step of INDI's online inertia identification (0: the nominal inertia;
            ``None``: 0.02 behind lagging rotors, else 0).
        predict_latency: run the control law on the state predicted over the loop's latency
            (:mod:`~residual_quad.controllers.latency`); ``None``: on when the context reports
            command or sensor latency. The estimators (residual, observer, INDI) read the
            observation as it is either way.
        outer_indi_hz: outer-loop INDI (:mod:`~residual_quad.controllers.outer_indi`): the
            filtered accelerometer residual the tracker's own estimate misses is added to it;
            the filter's natural frequency, Hz (0: none, the default).
        ff_lead_s: the reference's acceleration handed to the outer loop led by its jerk,
            ``a_ref + lead·j_ref`` (:mod:`~residual_quad.controllers.feedforward`), s (0: none);
            ``None``: :attr:`lag_ff_lead_s` behind lagging rotors (0.15 s for the trackers with
            a residual estimate, 0 for the others), else 0.

    A tracker reads the observation's base fields (no preview). Subclasses override the hooks
    :meth:`command`/:meth:`command_one` (outer loop), :meth:`residual`/:meth:`residual_one`
    (Δâ), :meth:`torque_feedforward` (one method for both forms) and
    :meth:`inner_command`/:meth:`inner_command_one` (``a_eff`` → rotor thrusts), and extend
    :meth:`init_state` with their parts of :class:`TrackerState`.
    """

    action_mode = "rotor"
    name = "tracker"
    #: option → domain, checked when a spec is parsed (:mod:`residual_quad.controllers.options`)
    OPTIONS: dict[str, Domain] = {
        "kp": POSITIVE,
        "kd": POSITIVE,
        "attitude": ATTITUDE,
        "rotor_tau_s": NON_NEGATIVE,
        **LOOP_OPTIONS,
    }
    #: option path → search range of ``rquad tune``
    TUNABLE: dict[str, Range] = GAIN_RANGES
    #: s, the feed-forward's lead behind lagging rotors (``ff_lead_s``'s default there): none
    #: without a residual estimate, where it was measured to cost (docs/controllers.md)
    lag_ff_lead_s = 0.0

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        kp: float = DEFAULT_KP,  # 1/s²
        kd: float = DEFAULT_KD,  # 1/s
        attitude: AttitudeGains | None = None,
        rotor_tau_s: float | None = None,  # s, the rotors' time constant (None: the context's)
        attitude_loop: str | None = None,
        mixer: str | None = None,
        indi_hz: float = DEFAULT_INDI_HZ,  # Hz
        indi_adapt: float | None = None,
        predict_latency: bool | None = None,
        outer_indi_hz: float = 0.0,  # Hz (0: no outer-loop INDI)
        ff_lead_s: float | None = None,  # s (None: the context's default)
    ):
        self.context = context or ControlContext()
        self.airframe = self.context.airframe
        self.dt = self.context.control_dt
        self.kp, self.kd = float(kp), float(kd)
        tau = self.context.rotor_tau_s if rotor_tau_s is None else float(rotor_tau_s)  # s
        self.rotor_model = RotorModel(tau, self.dt) if tau else None
        if attitude is None:
            attitude = default_attitude_gains(self.context.rotor_tau_s, self.context.dead_time_s)
        if mixer is None:
            mixer = default_mixer(self.context.rotor_tau_s)
        self.inner = InnerLoop(self.airframe, attitude, mixer)
        if attitude_loop is None:
            attitude_loop = default_attitude_loop(self.context.rotor_tau_s)
        if indi_adapt is None:  # the inertia is identified by default behind lag
            indi_adapt = LAG_INDI_ADAPT if self.context.rotor_tau_s > 0.0 else 0.0
        if attitude_loop not in ATTITUDE_LOOPS:
            raise ValueError(
                f"attitude_loop must be one of {', '.join(ATTITUDE_LOOPS)}, got {attitude_loop!r}"
            )
        self.attitude_loop = attitude_loop
        self.indi = (
            IndiLoop(
                self.airframe,
                self.dt,
                float(indi_hz),
                lagged=self.rotor_model is not None,
                adapt=float(indi_adapt),
            )
            if attitude_loop == "indi"
            else None
        )
        delays = (self.context.obs_delay_steps, self.context.action_delay_steps)
        if predict_latency is None:
            predict_latency = sum(delays) > 0
        self.predictor = (
            LatencyPredictor(self.airframe, self.dt, *delays, rotor_tau_s=tau)
            if predict_latency
            else None
        )
        hz = float(outer_indi_hz)
        self.outer = OuterIndi(self.airframe, self.dt, hz) if hz else None
        if ff_lead_s is None:
            ff_lead_s = self.lag_ff_lead_s if self.context.rotor_tau_s > 0.0 else 0.0
        lead = float(ff_lead_s)
        self.lead = FeedforwardLead(lead, self.dt) if lead else None
        # behind sensor latency the estimators read the thrusts of the sensed motion's period
        steps = self.context.obs_delay_steps
        self.sensed_thrusts = SensedThrusts(steps) if steps else None

    def init_state(self, n: int) -> TrackerState:
        return TrackerState(
            last_a_cmd=np.zeros((n, 3)),
            last_residual=np.zeros((n, 3)),
            saturated=np.zeros(n, dtype=bool),
            last_thrust=np.full(n, self.airframe.hover_thrust),
            rotors=None if self.rotor_model is None else self.rotor_model.init_state(n),
            indi=None if self.indi is None else self.indi.init_state(n),
            latency=None if self.predictor is None else self.predictor.init_state(n),
            outer=None if self.outer is None else self.outer.init_state(n),
            last_model=None if self.outer is None else np.zeros((n, 3)),
            sensed=None if self.sensed_thrusts is None else self.sensed_thrusts.init_state(n),
            lead=None if self.lead is None else self.lead.init_state(n),
        )

    def forget(self, state: TrackerState, rows: np.ndarray) -> TrackerState:
        if self.sensed_thrusts is not None:
            state = state._replace(sensed=self.sensed_thrusts.forget(state.sensed, rows))
        if self.indi is not None:
            state = state._replace(indi=self.indi.forget(state.indi, rows))
        if self.predictor is not None:
            state = state._replace(latency=self.predictor.forget(state.latency, rows))
        if self.lead is not None:
            state = state._replace(lead=self.lead.forget(state.lead, rows))
        return state

    def forget_one(self, state: TrackerState) -> TrackerState:
        if self.sensed_thrusts is not None:
            state = state._replace(sensed=self.sensed_thrusts.forget_one(state.sensed))
        if self.indi is not None:
            state = state._replace(indi=self.indi.forget_one(state.indi))
        if self.predictor is not None:
            state = state._replace(latency=self.predictor.forget_one(state.latency))
        if self.lead is not None:
            state = state._replace(lead=self.lead.forget_one(state.lead))
        return state

    # -- hooks: N envs -------------------------------------------------------------------------
    def command(
        self, state: TrackerState, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        """Outer loop: desired accelerations (n, 3) (world, m/s²) from the errors
        ``ref − state`` (n, 3)."""
        return state, outer_accel(obs[:, L.ref_acc], e_p, e_v, self.kp, self.kd)

    def residual(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        """Estimated residual accelerations Δâ (n, 3) (world, m/s²) to cancel by feed-forward."""
        return state, np.zeros_like(a_cmd)

    def torque_feedforward(
        self, state: TrackerState, obs: np.ndarray
    ) -> tuple[TrackerState, np.ndarray | None]:
        """A torque (N·m, body; (3,) for one vehicle's ``obs`` (D,), (n, 3) for a batch) the
        attitude loop adds (``None``: none; INDI's increment with ``attitude_loop="indi"``);
        the first hook of the step, one method for both forms."""
        if self.indi is None:
            return state, None
        update = self.indi.update_one if obs.ndim == 1 else self.indi.update
        indi = update(state.indi, obs)
        return state._replace(indi=indi), indi.estimate

    def inner_command(
        self,
        state: TrackerState,
        obs: np.ndarray,
        R: np.ndarray,
        a_eff: np.ndarray,
        torque_ff: np.ndarray | None,
    ) -> tuple[TrackerState, np.ndarray, np.ndarray, np.ndarray]:
        """Inner stage: rotor thrusts (n, 4) (N) for the effective accelerations ``a_eff``
        (n, 3) (world, m/s²) with the torque feed-forward ``torque_ff``, whether it saturated
        (n,) and the collectives (n,) (N); the shared inner loop by default."""
        thrusts, saturated, collective = self.inner.command_batch(
            obs[:, L.rot], obs[:, L.omega_b], a_eff, obs[:, L.ref_yaw], obs[:, L.ref_yaw_rate],
            torque_ff,
        )  # fmt: skip
        return state, thrusts, saturated, collective

    # -- hooks: one vehicle --------------------------------------------------------------------
    def command_one(
        self, state: TrackerState, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        """:meth:`command` of one vehicle."""
        return state, outer_accel(obs[L.ref_acc], e_p, e_v, self.kp, self.kd)

    def residual_one(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        """:meth:`residual` of one vehicle."""
        return state, _ZERO3

    def inner_command_one(
        self,
        state: TrackerState,
        obs: np.ndarray,
        R: np.ndarray,
        a_eff: np.ndarray,
        torque_ff: np.ndarray | None,
    ) -> tuple[TrackerState, np.ndarray, bool, float]:
        """:meth:`inner_command` of one vehicle (``R`` (3, 3) body → world)."""
        thrusts, saturated, collective = self.inner.command(
            R, obs[L.omega_b], a_eff, obs[L.ref_yaw], obs[L.ref_yaw_rate], torque_ff
        )
        return state, thrusts, saturated, collective

    # -- the law -------------------------------------------------------------------------------
    def act(self, state: TrackerState, obs: np.ndarray) -> tuple[TrackerState, np.ndarray]:
        return self._step(state, obs[:, :OBS_DIM], one=False)  # a tracker reads no preview

    def act_one(self, state: TrackerState, obs: np.ndarray) -> tuple[TrackerState, np.ndarray]:
        return self._step(state, obs, one=True)

    def _step(
        self, state: TrackerState, obs: np.ndarray, one: bool
    ) -> tuple[TrackerState, np.ndarray]:
        """The trackers' step, written once: ``obs`` (D,) with the one-vehicle hooks (float
        code) or (n, D) with the batch hooks; the fields are read along the last axis."""
        if self.rotor_model is not None:
            observe = self.rotor_model.observe_one if one else self.rotor_model.observe
            rotors, obs = observe(state.rotors, obs)
            state = state._replace(rotors=rotors)
        if self.sensed_thrusts is not None:  # the thrusts of the sensed motion's period
            pair = self.sensed_thrusts.pair_one if one else self.sensed_thrusts.pair
            sensed, obs = pair(state.sensed, obs)
            state = state._replace(sensed=sensed)
        state, torque_ff = self.torque_feedforward(state, obs)
        R = obs[..., L.rot].reshape(obs.shape[:-1] + (3, 3))
        law_obs, law_R = obs, R  # what the control law acts on: the predicted state if any
        if self.predictor is not None:
            latency, law_obs = self.predictor.predict(state.latency, obs)
            state = state._replace(latency=latency)
            law_R = law_obs[..., L.rot].reshape(R.shape)
        if self.lead is not None:  # the feed-forward led over the lag by the reference's jerk
            lead, law_obs = self.lead.apply(state.lead, obs, law_obs)
            state = state._replace(lead=lead)
        e_p = law_obs[..., L.ref_pos] - law_obs[..., L.pos]
        e_v = law_obs[..., L.ref_vel] - law_obs[..., L.vel]
        state, a_cmd = (self.command_one if one else self.command)(state, law_obs, e_p, e_v)
        if state.excitation is not None:
            a_cmd = a_cmd + state.excitation
        state, residual = (self.residual_one if one else self.residual)(state, obs, R, a_cmd)
        if self.outer is not None:  # INDI on what the tracker's own estimate missed
            update = self.outer.update_one if one else self.outer.update
            outer = update(state.outer, obs, R, state.last_model)
            state = state._replace(outer=outer, last_model=residual)
            residual = residual + self.outer.applied(a_cmd - residual, outer.estimate, R)
        inner = self.inner_command_one if one else self.inner_command
        state, thrusts, saturated, collective = inner(
            state, law_obs, law_R, a_cmd - residual, torque_ff
        )
        if self.predictor is not None:
            latency = self.predictor.record(state.latency, np.asarray(thrusts, dtype=float))
            state = state._replace(latency=latency)
        state = state._replace(
            last_a_cmd=a_cmd,
            last_residual=residual,
            saturated=saturated,
            last_thrust=collective,
        )
        return state, to_rotor_action(thrusts, self.airframe)


class GeoTracker(Tracker):
    """``geo``: SE(3) geometric control with trajectory feed-forward, no integrator."""

    name = "geo"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="kp 20, kd 8 and the attitude gains of the source [RES]; no search here",
    )


class PIDTracker(Tracker):
    """``pid``: position PID with conditional-integration anti-windup.

    The integrator of an axis is frozen while the inner loop saturated (tilt or thrust clip) on
    the previous step and the error would grow the integral further; it is also bounded by
    ``i_max``.
    """

    name = "pid"
    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="position-error integral",
        tuning="kp 20, kd 8 of the source [RES]; ki 15 1/s³, i_max 1 m·s set by hand, "
        "no recorded search",
    )
    #: ``ki = 0`` is a PD (no integral action)
    OPTIONS: dict[str, Domain] = {**Tracker.OPTIONS, "ki": NON_NEGATIVE, "i_max": POSITIVE}
    TUNABLE: dict[str, Range] = {**GAIN_RANGES, "ki": Range(0.5, 40.0, log=True)}  # 1/s³

    def __init__(
        self,
        context: ControlContext | None = None,
        *,
        ki: float = DEFAULT_KI,  # 1/s³
        i_max: float = DEFAULT_I_MAX,  # m·s, integral bound per axis
        **kw: Any,
    ):
        self.ki = float(ki)
        self.i_max = float(i_max)
        super().__init__(context, **kw)

    def init_state(self, n: int) -> TrackerState:
        return super().init_state(n)._replace(integral=np.zeros((n, 3)))

    def command(
        self, state: TrackerState, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        state, a_cmd = super().command(state, obs, e_p, e_v)
        if not self.ki:  # a PD: geo's command exactly
            return state, a_cmd
        integral = pid_integral_step(
            state.integral, e_p, self.dt, state.saturated[:, None], self.i_max
        )
        return state._replace(integral=integral), a_cmd + self.ki * integral

    def command_one(
        self, state: TrackerState, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        state, a_cmd = super().command_one(state, obs, e_p, e_v)
        if not self.ki:  # a PD: geo's command exactly
            return state, a_cmd
        integral = pid_integral_step(state.integral, e_p, self.dt, state.saturated, self.i_max)
        return state._replace(integral=integral), a_cmd + self.ki * integral
