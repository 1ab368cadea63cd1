"""``ppo_adapt``: a PPO policy that also sees the residual estimate Δâ of ``geo_rls`` [DATT].

DATT feeds a model-based (L1) disturbance estimate to an RL tracker; here the estimate is the
shipped residual estimator with online RLS on the network's last layer
(:class:`~residual_quad.controllers.residual.estimator.ResidualEstimator`, ``learn=True``): the
same network, RLS settings and measurement as ``geo_rls``
(:meth:`RLSGeoTracker.settings() <residual_quad.controllers.residual.trackers.RLSGeoTracker>`:
``configs/residual.yaml``). The policy acts on the env's ``rotor`` actions and sees
:class:`~residual_quad.controllers.policy_inputs.PolicyInputs` of its
:class:`~residual_quad.controllers.policy_inputs.FeatureSpec` (``estimate`` on: Δâ in the
heading frame, scaled).

**The estimator's command.** ``geo_rls`` hands the estimator its outer-loop command ``a_cmd`` and
records ``a_eff = a_cmd − Δâ`` — the acceleration the nominal model ``a = R·e_z·T/m − g·e_z``
expects from the thrust it then commands — as the next step's ``a_cmd`` regressor feature. A
policy has no outer loop, and decides its command *after* seeing the estimate. So every control
period ``ppo_adapt`` (1) asks for Δâ of the new observation (the regressor carries the previous
period's command), (2) lets the policy act (or holds its action, with action repeat), then (3)
records, through :meth:`ResidualEstimator.set_command`, the nominal acceleration of the rotor
thrusts it commands, :func:`commanded_acceleration` — the quantity ``a_eff`` is for ``geo_rls``.
The estimator runs every control period, also between held actions, as in ``geo_rls``.

**The estimate as feed-forward (an option, not shipped).** A policy file recording
``estimate_feedforward: true`` (trained with ``estimate_feedforward: true`` in its config) also
flies the estimate's thrust-axis part as feed-forward: the rotors get the policy's action plus
:func:`thrust_feedforward` (``ΔT = −m·b3·Δâ``, a quarter each), clipped, and that sum is the
command the estimator records; the action history keeps the policy's own action. Measured
(docs/ppo.md, "The estimate as thrust feed-forward"): worse than the input alone.

``ppo_adapt`` is one law (:class:`PPOAdaptController`): the estimator's state is the policy
state's ``estimator``, stepped by the estimator's one-vehicle kernel for one vehicle (as
``geo_rls``) and by its batch form for N envs. :class:`AdaptEstimator` is training's: the same
estimator over the state of the vector env's envs, run every control period.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.driver import NEUTRAL_OBS, check_n_envs
from residual_quad.controllers.law import put_rows, replace, take_rows, tree_map
from residual_quad.controllers.policy_file import (
    PolicyFileError,
    import_sb3,
    rl_purpose,
)
from residual_quad.controllers.ppo import (
    POLICY_OPTIONS,
    PolicyState,
    PPOController,
    due_rows,
    observation_actions,
)
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.controllers.residual.estimator import ResidualEstimator
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import RLSGeoTracker
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L

_ZERO3 = np.zeros(3)


def commanded_acceleration(actions: np.ndarray, R: np.ndarray, airframe: Airframe) -> np.ndarray:
    """The nominal model's acceleration ``R·e_z·T/m − g·e_z`` (world, m/s², (n, 3)) of ``rotor``
    actions (n, 4) in [-1, 1] (``f_i = (a_i + 1)·f_max/2``, ``T = Σ f_i``) at rotations ``R``
    (n, 3, 3); nominal mass and gravity of ``airframe``. Element-wise: a batch equals its rows."""
    u = np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0)
    f = (u + 1.0) * (0.5 * airframe.max_rotor_thrust)  # N
    per_mass = (f[:, 0] + f[:, 1] + f[:, 2] + f[:, 3]) / airframe.mass  # m/s²
    a = R[:, :, 2] * per_mass[:, None]
    a[:, 2] -= airframe.gravity
    return a


def thrust_feedforward(estimate: np.ndarray, R: np.ndarray, airframe: Airframe) -> np.ndarray:
    """The rotor-action offsets (n, 4) that cancel the thrust-axis part of the residual
    ``estimate`` Δâ (n, 3) (world, m/s²) at rotations ``R`` (n, 3, 3): a collective thrust
    ``ΔT = −m·(R·e_z)·Δâ`` (nominal mass), a quarter per rotor, in action units
    (``Δu = 2·Δf/f_max``). A rotor-level policy has no attitude loop to tilt for the other
    components; they stay the policy's (it sees Δâ). Element-wise: a batch equals its rows."""
    e = np.asarray(estimate, dtype=np.float64)
    along = R[:, 0, 2] * e[:, 0] + R[:, 1, 2] * e[:, 1] + R[:, 2, 2] * e[:, 2]  # m/s²
    du = along * (-airframe.mass / (2.0 * airframe.max_rotor_thrust))
    return np.repeat(du[:, None], 4, axis=1)


def applied_actions(
    actions: np.ndarray, estimate: np.ndarray, R: np.ndarray, airframe: Airframe
) -> np.ndarray:
    """The rotor actions (n, 4) a feed-forward ``ppo_adapt`` applies: the policy's ``actions``
    plus :func:`thrust_feedforward` of ``estimate``, clipped to [-1, 1]."""
    return np.clip(actions + thrust_feedforward(estimate, R, airframe), -1.0, 1.0)


def adapt_record(feedforward: bool) -> dict[str, Any]:
    """The policy record's entries of ``ppo_adapt``'s loop, as :class:`PPOAdaptController`
    reads them: ``estimate_feedforward`` where the feed-forward is on (files without it fly
    the estimate as an input only)."""
    return {"estimate_feedforward": True} if feedforward else {}


def estimator_settings(config: str | Path | ResidualConfig | None = None) -> ResidualConfig:
    """``geo_rls``'s residual settings (``configs/residual.yaml`` by default)."""
    return RLSGeoTracker.settings(config)


class AdaptEstimator:
    """``ppo_adapt``'s estimator for training's N envs: a :class:`ResidualEstimator` with
    ``geo_rls``'s settings over the state of the N envs (held here), asked for Δâ once per
    control period (:meth:`observe`) and told the command applied (:meth:`command`); see the
    module docstring.

    Args:
        n_envs: number of envs.
        context: nominal airframe and control period.
        config: residual settings (``None``: ``geo_rls``'s).
        network: a residual network instead of the config's weights.
        feedforward: the estimate also as collective-thrust feed-forward
            (:meth:`applied`, :func:`thrust_feedforward`).
    """

    def __init__(
        self,
        n_envs: int,
        context: ControlContext | None = None,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
        feedforward: bool = False,
    ):
        self.context = context or ControlContext()
        self.feedforward = bool(feedforward)
        self.n_envs = check_n_envs(n_envs)
        self.estimator = ResidualEstimator(
            self.context, estimator_settings(config), network, learn=True
        )
        self.state = self.estimator.init_state(self.n_envs)
        self._zeros = np.zeros((self.n_envs, 3))

    def reset(self, index: Any = slice(None)) -> None:
        """A new episode for the envs ``index``."""
        if isinstance(index, slice) and index == slice(None):
            self.state = self.estimator.init_state(self.n_envs)
            return
        put_rows(self.state, index, tree_map(lambda x: x[0], self.estimator.init_state(1)))

    @property
    def last_estimate(self) -> np.ndarray:
        """Δâ (N, 3) of the last control period (world, m/s²)."""
        return self.state.last_estimate

    def observe(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Δâ (N, 3), world, m/s², of the new observations ``obs`` (N, ≥ 36); only the envs
        ``rows`` (N,) bool (default: all) advance — the others keep their state and estimate
        (their observation is replaced by a finite stand-in for the batch)."""
        o = np.asarray(obs, dtype=np.float64)[:, :OBS_DIM]
        if rows is None or rows.all():
            R = o[:, L.rot].reshape(-1, 3, 3)
            self.state, est = self.estimator.estimate(self.state, o, R, self._zeros)
            return est.copy()
        still = ~rows
        saved = take_rows(self.state, still)
        o = np.where(still[:, None], NEUTRAL_OBS, o)
        self.state, _ = self.estimator.estimate(
            self.state, o, o[:, L.rot].reshape(-1, 3, 3), self._zeros
        )
        put_rows(self.state, still, saved)
        return self.state.last_estimate.copy()

    def applied(self, obs: np.ndarray, actions: np.ndarray, estimate: np.ndarray) -> np.ndarray:
        """The rotor actions (N, 4) the envs receive for the policy's ``actions`` at
        observations ``obs`` with the estimates ``estimate`` (N, 3): with ``feedforward``
        :func:`applied_actions`, else the actions themselves."""
        if not self.feedforward:
            return actions
        R = np.asarray(obs, dtype=np.float64)[:, L.rot].reshape(-1, 3, 3)
        return applied_actions(actions, estimate, R, self.context.airframe)

    def command(self, obs: np.ndarray, actions: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Record the rotor ``actions`` (N, 4) commanded at observations ``obs`` for the envs
        ``rows`` (default: all): their :func:`commanded_acceleration` becomes the regressor's
        command at the next :meth:`observe`."""
        o = np.asarray(obs, dtype=np.float64)
        a = commanded_acceleration(actions, o[:, L.rot].reshape(-1, 3, 3), self.context.airframe)
        self.set_command(a, rows)

    def set_command(self, a_eff: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Record the accelerations ``a_eff`` (N, 3) (world, m/s²) the inner loops of the envs
        ``rows`` (default: all) were given — a tracker's command (``ppo_res``) — as the
        regressor's command at the next :meth:`observe`."""
        a = np.asarray(a_eff, dtype=np.float64)
        if rows is not None:
            a = np.where(rows[:, None], a, self.state.last_a_eff)
        self.state = self.estimator.set_command(self.state, a)


class PPOAdaptController(PPOController):
    """``ppo``, whose policy also sees ``geo_rls``'s residual estimate Δâ (module docstring).

    Args: as :class:`~residual_quad.controllers.ppo.PPOController`: the shipped policy of
    ``training_seed`` (0–4: ``configs/ppo_adapt.yaml``) or a ``ppo_adapt`` policy file
    (``rquad train ppo_adapt``). The shipped policies see a 0.6 s reference preview, which
    :func:`~residual_quad.episode.run_episode` and the sweeps give them by themselves. The
    estimator's state is the state's ``estimator`` (its ``last_estimate``: Δâ of the last
    call, world, m/s²); one vehicle steps it with the estimator's float kernel.
    """

    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="RLS state of geo_rls's estimator (λ 0.99, ≈ 1 s)",
        residual_estimate="geo_rls's estimator (offline network, last layer by online RLS)",
        tuning="ppo's shipped recipe (its 75 tries) with the estimate added, five seeds: 1 try; "
        "the estimator as geo_rls ships it; before it, on ppo's first recipe: the estimate added "
        "(1 try) and ppo's smoothness weight and rate's end on two seeds (1 try, not shipped); "
        "after it, not shipped: the estimate as thrust feed-forward (under ppo's five files: "
        "1 try; trained, three seeds: 1 try), zeroed in training (the control, three seeds: "
        "1 try), low-passed (three seeds: 1 try)",
        learned="policy",
        action="rotor thrusts",
        tuning_trials=82,
    )
    OPTIONS = POLICY_OPTIONS
    kind = "ppo_adapt"
    name = "ppo_adapt"

    def __init__(
        self,
        context: ControlContext | None = None,
        path: str | Path | None = None,
        device: str = "cpu",
        training_seed: int | None = None,
        plant: str | None = None,
    ):
        import_sb3(rl_purpose(self.kind))  # first: without SB3 the install hint is the answer
        super().__init__(context, path, device, training_seed, plant)

    def loaded(self) -> None:
        """The estimator, for a policy on rotor actions."""
        if self.action_mode != "rotor":
            raise PolicyFileError(f"{self.path}: a ppo_adapt policy acts in action_mode 'rotor'")
        self.estimator = ResidualEstimator(self.context, estimator_settings(), learn=True)
        feedforward = self.meta.get("estimate_feedforward", False)
        if not isinstance(feedforward, bool):
            raise PolicyFileError(
                f"{self.path}: estimate_feedforward must be true or false, got {feedforward!r}"
            )
        self.feedforward = feedforward

    def init_state(self, n: int) -> PolicyState:
        return replace(super().init_state(n), estimator=self.estimator.init_state(n))

    def init_one(self) -> PolicyState:
        # ppo's one-vehicle state with the estimator's (its float kernel's layout)
        return replace(super().init_one(), estimator=self.estimator.init_one())

    def forget(self, state: PolicyState, rows: np.ndarray) -> PolicyState:
        return replace(state, estimator=self.estimator.forget(state.estimator, rows))

    def forget_one(self, state: PolicyState) -> PolicyState:
        return replace(state, estimator=self.estimator.forget_one(state.estimator))

    def act(self, state: PolicyState, obs: np.ndarray) -> tuple[PolicyState, np.ndarray]:
        """Δâ of ``obs``, the policies' actions (new for the envs due, else held), then the
        commanded acceleration of those actions recorded for the estimator."""
        base = obs[:, :OBS_DIM]  # the base fields (a preview follows)
        R = base[:, L.rot].reshape(-1, 3, 3)
        est_state, est = self.estimator.estimate(state.estimator, base, R, np.zeros((len(obs), 3)))
        state = state._replace(estimator=est_state)
        est = est.copy()
        rows = due_rows(state.k, self.action_repeat)
        if rows is not None:
            state.held[rows] = self.decide(state, obs[rows], est[rows], rows)
        state.k[...] += 1
        airframe = self.context.airframe
        applied = state.held.copy()
        if self.feedforward:
            applied = applied_actions(applied, est, R, airframe)
        a = commanded_acceleration(applied, R, airframe)
        state = state._replace(estimator=self.estimator.set_command(state.estimator, a))
        return state, applied

    def act_one(self, state: PolicyState, obs: np.ndarray) -> tuple[PolicyState, np.ndarray]:
        """:meth:`act` of one vehicle: the estimator's float kernel, the policy's batch of one."""
        R = L.rotation(obs)
        est_state, est = self.estimator.estimate_one(state.estimator, obs, R, _ZERO3)
        held = state.held
        if state.k % self.action_repeat == 0:
            held = observation_actions(
                self, obs[None, :], state.inputs, held[None, :], est[None, :]
            )
            held = held[0]
        airframe = self.context.airframe
        applied = held[None, :]
        if self.feedforward:
            applied = applied_actions(applied, np.asarray(est)[None, :], R[None, :, :], airframe)
        a = commanded_acceleration(applied, R[None, :, :], airframe)
        est_state = self.estimator.set_command_one(est_state, a[0])
        return PolicyState(state.k + 1, held, state.inputs, est_state), applied[0].copy()
