"""``ppo_acc``: a learned outer loop — a PPO policy sets the desired acceleration the trackers'
shared attitude loop flies.

``pid`` and ``geo`` turn the position and velocity errors into a desired acceleration with a PD
(plus an integral) and hand it to one attitude loop; ``ppo_acc`` replaces that PD by a policy:

``a_cmd = a_ref + R_z(ψ)·δa_h``,  ``δa_h = accel_scale · u``,  ``u ∈ [-1, 1]³``,

with ``a_ref`` (m/s²) the reference's feed-forward acceleration (what ``geo`` adds too) and
``δa_h`` (m/s²) in the vehicle's heading frame. The attitude loop (gains, tilt bound, thrust
mapping) is ``geo``'s, so ``ppo_acc`` acts at the trackers' action level and, with an action
repeat of 1, at their decision rate (100 Hz). The policy sees ``ppo``'s features plus what its
file's ``features`` add (reference preview, the error integral, the last actions).

It is ``ppo_res``'s law (:class:`~residual_quad.controllers.ppo_res.ResidualPPOController`)
on the ``feedforward`` tracker — no feedback gain at all — so one vehicle, a batch and
training's :class:`~residual_quad.controllers.ppo_res.ResidualPilot` share one implementation.
The policy's acceleration is part of the command (``last_a_cmd``), not a residual: ``ppo_acc``
has no residual model, so its ``last_residual`` is zero, as ``pid``'s and ``geo``'s are (the
report's residual-estimate figure and bias table read it so).
Policy files are ``ppo_res``'s format with ``controller: ppo_acc``; train one with
``rquad train ppo_acc`` (``configs/ppo_acc.yaml``: the precision reward, randomized training
trajectories, docs/rl.md).
"""

from __future__ import annotations

import numpy as np

from residual_quad.controllers.base import InformationUse
from residual_quad.controllers.policy_file import FEEDFORWARD_TRACKER
from residual_quad.controllers.ppo import POLICY_OPTIONS
from residual_quad.controllers.ppo_res import ResidualPPOController
from residual_quad.controllers.trackers import TrackerState
from residual_quad.envs.observation import ObsLayout as L

_ZERO3 = np.zeros(3)


class AccelerationPPOController(ResidualPPOController):
    """A PPO policy's desired acceleration (heading frame, ±``accel_scale`` m/s² per axis) plus
    the reference's feed-forward, flown by ``geo``'s attitude loop.

    Args: those of :class:`~residual_quad.controllers.ppo_res.ResidualPPOController` (``path``,
    ``device``, ``training_seed``, ``plant``); the default is the shipped
    ``controllers/weights/ppo_acc_default.zip``.
    """

    name = "ppo_acc"
    kind = "ppo_acc"
    default_tracker = FEEDFORWARD_TRACKER
    OPTIONS = POLICY_OPTIONS
    INFORMATION = InformationUse(
        feedforward_accel=True,
        tuning="ppo_res's PPO settings; exploration, decision rate, reward tolerances, "
        "smoothness and the learning rate's end: 20 tries of 1–6 M steps; the zero-error "
        "anchor: 3 trained, 8 at evaluation only (an integral, anchors); the calm floor: 26 "
        "trained (the bound per axis, width, budget, smoothness, a finer kernel, a linear "
        "path, a 1 M and a 2 M low-rate polish), 1 at evaluation only (a five-file mean) "
        "(docs/ppo.md)",
        learned="policy",
        action="desired acceleration → the shared attitude loop (no PD)",
        tuning_trials=58,
    )

    # -- the policy's acceleration is the command; there is no residual -----------------------
    def command(
        self, state: TrackerState, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        state, a_ref = super().command(state, obs, e_p, e_v)  # no gain: the feed-forward
        R = obs[:, L.rot].reshape(-1, 3, 3)
        state, negated = ResidualPPOController.residual(self, state, obs, R, a_ref)
        return state, a_ref - negated

    def command_one(
        self, state: TrackerState, obs: np.ndarray, e_p: np.ndarray, e_v: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        state, a_ref = super().command_one(state, obs, e_p, e_v)
        R = obs[L.rot].reshape(3, 3)
        state, negated = ResidualPPOController.residual_one(self, state, obs, R, a_ref)
        return state, a_ref - negated

    def residual(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        return state, np.zeros_like(a_cmd)

    def residual_one(
        self, state: TrackerState, obs: np.ndarray, R: np.ndarray, a_cmd: np.ndarray
    ) -> tuple[TrackerState, np.ndarray]:
        return state, _ZERO3
