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

:class:`AdaptEstimator` is the batched estimator of training (the vector env runs it every
control period) and of :class:`BatchedPPOAdaptController`; the single controller holds the
single :class:`ResidualEstimator`, as ``geo_rls`` does (batched = single: tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.base import ControlContext, InformationUse
from residual_quad.controllers.batch import NEUTRAL_OBS, check_n_envs, check_obs_batch
from residual_quad.controllers.policy_file import (
    ObsNormalizer,
    PolicyFileError,
    import_sb3,
    rl_purpose,
)
from residual_quad.controllers.policy_inputs import FeatureSpec
from residual_quad.controllers.ppo import (
    POLICY_OPTIONS,
    BatchedPPOController,
    PPOController,
)
from residual_quad.controllers.residual.config import ResidualConfig
from residual_quad.controllers.residual.estimator import (
    BatchedResidualEstimator,
    ResidualEstimator,
)
from residual_quad.controllers.residual.network import ResidualMLP
from residual_quad.controllers.residual.trackers import RLSGeoTracker
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.observation import ObsLayout as L


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


def estimator_settings(config: str | Path | ResidualConfig | None = None) -> ResidualConfig:
    """``geo_rls``'s residual settings (``configs/residual.yaml`` by default)."""
    return RLSGeoTracker.settings(config)


class AdaptEstimator:
    """``ppo_adapt``'s estimator for N envs: a :class:`BatchedResidualEstimator` with ``geo_rls``'s
    settings, asked for Δâ once per control period (:meth:`observe`) and told the command applied
    (:meth:`command`); see the module docstring.

    Args:
        n_envs: number of envs.
        context: nominal airframe and control period.
        config: residual settings (``None``: ``geo_rls``'s).
        network: a residual network instead of the config's weights.
    """

    def __init__(
        self,
        n_envs: int,
        context: ControlContext | None = None,
        config: str | Path | ResidualConfig | None = None,
        network: ResidualMLP | None = None,
    ):
        self.context = context or ControlContext()
        self.n_envs = check_n_envs(n_envs)
        self.estimator = BatchedResidualEstimator(
            self.context, estimator_settings(config), self.n_envs, network, learn=True
        )
        self._zeros = np.zeros((self.n_envs, 3))

    def reset(self, index: Any = slice(None)) -> None:
        """A new episode for the envs ``index``."""
        self.estimator.reset(index)

    def observe(self, obs: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Δâ (N, 3), world, m/s², of the new observations ``obs`` (N, ≥ 36); only the envs
        ``rows`` (N,) bool (default: all) advance — the others keep their state and estimate
        (their observation is replaced by a finite stand-in for the batch)."""
        o = np.asarray(obs, dtype=np.float64)[:, : NEUTRAL_OBS.size]
        if rows is None or rows.all():
            R = o[:, L.rot].reshape(-1, 3, 3)
            return self.estimator.estimate(o, R, self._zeros).copy()
        still = ~rows
        saved = [
            (h, a, np.array(getattr(h, a))[still].copy()) for h, a in self.estimator.row_state()
        ]
        o = np.where(still[:, None], NEUTRAL_OBS, o)
        self.estimator.estimate(o, o[:, L.rot].reshape(-1, 3, 3), self._zeros)
        for h, a, values in saved:
            getattr(h, a)[still] = values
        return self.estimator.last_estimate.copy()

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
            a = np.where(rows[:, None], a, self.estimator.last_a_eff)
        self.estimator.set_command(a)


class PPOAdaptController(PPOController):
    """``ppo``, whose policy also sees ``geo_rls``'s residual estimate Δâ (module docstring).

    Args: as :class:`~residual_quad.controllers.ppo.PPOController`: the shipped policy of
    ``training_seed`` (0, 1, 2: ``configs/ppo_adapt.yaml``) or a ``ppo_adapt`` policy file
    (``rquad train ppo_adapt``). The shipped policies see a 0.6 s reference preview, which
    :func:`~residual_quad.episode.run_episode` and the sweeps give them by themselves. The
    estimator's state is :attr:`estimator` (:attr:`last_estimate`: Δâ of the last call, world,
    m/s²).
    """

    INFORMATION = InformationUse(
        feedforward_accel=True,
        memory="RLS state of geo_rls's estimator (λ 0.99, ≈ 1 s)",
        residual_estimate="geo_rls's estimator (offline network, last layer by online RLS)",
        tuning="ppo's hyper-parameters at half its budget; the estimator as geo_rls ships it",
        learned="policy",
        action="rotor thrusts",
        tuning_trials=1,
    )
    OPTIONS = POLICY_OPTIONS
    kind = "ppo_adapt"

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
        self._start_estimator()

    @classmethod
    def from_model(
        cls,
        model: Any,
        action_mode: str,
        normalizer: ObsNormalizer | None = None,
        action_repeat: int = 1,
        spec: FeatureSpec | None = None,
    ) -> PPOAdaptController:
        """Wrap an in-memory SB3 model (the training's evaluation callback)."""
        self = super().from_model(model, action_mode, normalizer, action_repeat, spec)
        self._start_estimator()
        return self

    def _start_estimator(self) -> None:
        if self.action_mode != "rotor":
            raise PolicyFileError(f"{self.path}: a ppo_adapt policy acts in action_mode 'rotor'")
        self.estimator = ResidualEstimator(self.context, estimator_settings(), learn=True)

    @property
    def last_estimate(self) -> np.ndarray:
        """Δâ of the last control period (world, m/s²)."""
        return self.estimator.last_estimate

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.estimator.reset(seed)

    def forget_previous_sample(self) -> None:
        self.estimator.forget_previous_sample()

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Δâ of ``obs``, the policy's action (new every ``action_repeat`` calls, else held),
        then the commanded acceleration of that action recorded for the estimator."""
        R = L.rotation(obs)
        est = self.estimator.estimate(obs, R, np.zeros(3))
        if self._k % self.action_repeat == 0:
            self._held = self.decide(obs[None, :], est[None, :])[0]
        self._k += 1
        a = commanded_acceleration(self._held[None, :], R[None, :, :], self.context.airframe)
        self.estimator.set_command(a[0])
        return self._held.copy()


class BatchedPPOAdaptController(BatchedPPOController):
    """``ppo_adapt`` for N envs around a loaded :class:`PPOAdaptController`: one
    :class:`AdaptEstimator`, per-env features and hold, one forward for the envs due. Rows equal
    the single controller's (the estimator twins agree to rounding; the policy path is the
    same)."""

    def __init__(self, controller: PPOAdaptController, n_envs: int):
        super().__init__(controller, n_envs)
        self.adapt = AdaptEstimator(self.n_envs, controller.context)

    def _reset_rows(self, index: int | slice) -> None:
        super()._reset_rows(index)
        self.adapt.reset(index)

    @property
    def last_estimate(self) -> np.ndarray:
        """Δâ (N, 3) of the last control period (world, m/s²)."""
        return self.adapt.estimator.last_estimate

    def policy_batch(self, obs: np.ndarray) -> np.ndarray:
        obs, bad = check_obs_batch(obs, self.n_envs)
        good = ~bad
        est = self.adapt.observe(obs, good)
        if bad.any():  # as the single controller's guard: the next sample follows no period
            self.adapt.estimator.forget_previous_sample(bad)
        due = (self._k % self.action_repeat == 0) & good  # a bad sample is no call
        if due.any():
            self._held[due] = self.decide(obs[due], est[due], np.flatnonzero(due))
        self._k += good
        base = obs[:, : NEUTRAL_OBS.size]  # the base fields (a preview follows)
        self.adapt.command(np.where(bad[:, None], NEUTRAL_OBS, base), self._held, good)
        return self.guard.finish(self._held.copy(), bad)


PPOAdaptController.batched = BatchedPPOAdaptController
