"""The feed-forward's lead over the lag: the reference's acceleration advanced by its jerk.

Behind rotors of time constant τ (and the attitude loop behind them) the acceleration a tracker
commands arrives late, so a feed-forward of the reference's acceleration ``a_ref(t)`` is met
by the vehicle around ``t + lead``. The lead hands the outer loop ``a_ref + lead·j_ref``, the
first-order prediction of ``a_ref(t + lead)`` (the differential-flatness feed-forward of
[INDI21] leads the same lag with the jerk and snap). The observation carries the reference's
position, velocity and acceleration, not its jerk: ``j_ref`` is the backward difference of the
observation's ``ref_acc`` over one control period (exact for a reference whose acceleration is
linear over the period; zero on the first step after a reset). The latency predictor
(:mod:`~residual_quad.controllers.latency`) shifts the reference's position and velocity by the
command latency; the lead is the rotors' and the attitude loop's part.

Written once for one vehicle (fields along the last axis, no leading axis) and a batch (a
leading env axis), so a row of a batch has the one-vehicle bits.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from residual_quad.envs.observation import ObsLayout as L

#: s, the lead of the trackers with a residual estimate behind lagging rotors: measured on
#: selection flights (windy, helix and figure-8, 0 and 0.6 kg) it takes 3–10 % off their
#: error at τ 20–80 ms, flat from 0.15 to 0.2 s; without an estimate (``pid``, ``geo``) it
#: costs, so theirs stays 0 (docs/controllers.md, "Lag-aware feed-forward")
LAG_FF_LEAD_S = 0.15


class LeadState(NamedTuple):
    """The lead's memory, one row per env (one vehicle: no leading axis)."""

    prev_acc: np.ndarray  # m/s², world, (n, 3): the previous observation's ref_acc
    have_prev: np.ndarray  # (n,) bool: the previous observation precedes this one


class FeedforwardLead:
    """The lead of ``lead_s`` (s, > 0) for a tracker of control period ``dt`` (s)."""

    def __init__(self, lead_s: float, dt: float):
        if not (lead_s > 0.0 and np.isfinite(lead_s)):
            raise ValueError(f"ff_lead_s must be a finite number > 0, got {lead_s!r}")
        self.lead_s = float(lead_s)
        self.dt = float(dt)

    def init_state(self, n: int) -> LeadState:
        return LeadState(prev_acc=np.zeros((n, 3)), have_prev=np.zeros(n, dtype=bool))

    def forget(self, state: LeadState, rows: np.ndarray) -> LeadState:
        """The state with ``rows`` (reset envs) as after :meth:`init_state`."""
        have = state.have_prev.copy()
        have[rows] = False
        return state._replace(have_prev=have)

    def forget_one(self, state: LeadState) -> LeadState:
        """One vehicle's state as after a reset."""
        return state._replace(have_prev=np.bool_(False))

    def apply(
        self, state: LeadState, obs: np.ndarray, law_obs: np.ndarray
    ) -> tuple[LeadState, np.ndarray]:
        """The jerk from ``obs``'s ``ref_acc`` against the state's, and ``law_obs`` (what the
        law acts on: ``obs`` or the latency predictor's) with its ``ref_acc`` led by it: a copy
        of ``obs`` (which the estimators read too), or the predictor's own array in place."""
        acc = obs[..., L.ref_acc]
        jerk = (acc - state.prev_acc) / self.dt  # m/s³
        have = np.asarray(state.have_prev)
        jerk = np.where(have[..., None], jerk, 0.0)
        out = np.array(law_obs, dtype=float) if law_obs is obs else law_obs
        out[..., L.ref_acc] = law_obs[..., L.ref_acc] + self.lead_s * jerk
        return LeadState(prev_acc=np.array(acc, dtype=float), have_prev=np.ones_like(have)), out
