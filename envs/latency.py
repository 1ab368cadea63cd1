"""Command and sensor latency: delay lines of whole control periods, one code path for a batch.

* **Command latency** (``action_delay_steps = k``): the plant flies the action given ``k`` steps
  earlier. Until ``k`` actions have been given the plant flies the *hover action* (every rotor at
  ``hover_thrust/4`` in ``rotor`` mode; hover collective and zero body rates in ``ctbr``): the
  vehicle starts in hover, so the command in flight at reset is the one that holds it there. The
  reward's smoothness term and ``prev_action`` stay those of the agent's own actions; the
  observation's ``thrusts`` are the thrusts the plant flew (the delayed command).
* **Sensor latency** (``obs_delay_steps = k``): the *sensed* fields of the observation
  (:data:`SENSED`: position, velocity, attitude, body rates, accelerometer; with their noise) are
  those measured ``k`` steps earlier; the reference and the thrusts, which the flight computer
  holds itself, are current. Until ``k`` steps have passed the sensed fields are the reset
  observation's, repeated. ``info`` and the reward stay on the true, current state.

:class:`Latency` holds both lines for ``n`` envs; the single env is a batch of one, the vector
env a batch of ``num_envs``, and both call the same :func:`delay_step`.
"""

from __future__ import annotations

import numpy as np

from residual_quad.envs.actions import CtbrActions, RotorActions
from residual_quad.envs.checks import integer
from residual_quad.envs.observation import ObsLayout as L

MAX_DELAY_STEPS = 1000
"""Longest delay accepted, control periods (10 s at 100 Hz)."""

#: observation entries that sensors measure (delayed by sensor latency), in ObsLayout order
SENSED = np.r_[L.pos, L.vel, L.rot, L.omega_b, L.imu]


def check_delay(name: str, value: object) -> int:
    """A delay in control periods: an integer in [0, :data:`MAX_DELAY_STEPS`], else
    ``ValueError`` naming ``name`` (a float, even ``1.0``, a bool, NaN or inf included)."""
    return integer(name, value, low=0, high=MAX_DELAY_STEPS)


def delay_step(line: np.ndarray, rows: np.ndarray | slice, value: np.ndarray) -> np.ndarray:
    """Push ``value`` (one row per env of ``rows``) into the delay ``line`` (``(n, k, d)``) and
    return what leaves it: the value pushed ``k`` calls earlier (``value`` itself for ``k = 0``)."""
    if line.shape[1] == 0:
        return value
    out = line[rows, 0].copy()
    line[rows, :-1] = line[rows, 1:]
    line[rows, -1] = value
    return out


def hover_action(mapping: RotorActions | CtbrActions, hover_thrust: float) -> np.ndarray:
    """The normalized action that commands ``hover_thrust`` (N, total) and no rotation."""
    if isinstance(mapping, CtbrActions):
        return np.array([hover_thrust / mapping.airframe.max_thrust * 2.0 - 1.0, 0.0, 0.0, 0.0])
    return np.full(4, hover_thrust / 4.0 / mapping.half_max_rotor_thrust - 1.0)


class Latency:
    """The command and sensor delay lines of ``n`` envs (see the module doc for the rules).

    Args:
        n: batch size.
        action_delay_steps: command latency, control periods.
        obs_delay_steps: sensor latency, control periods.
        hover: the action before ``action_delay_steps`` actions were given (4,).
    """

    def __init__(self, n: int, action_delay_steps: int, obs_delay_steps: int, hover: np.ndarray):
        self.action_delay_steps = check_delay("action_delay_steps", action_delay_steps)
        self.obs_delay_steps = check_delay("obs_delay_steps", obs_delay_steps)
        self.delays = bool(action_delay_steps or obs_delay_steps)
        self._hover = np.asarray(hover, dtype=float)
        self._actions = np.zeros((n, action_delay_steps, 4))
        self._sensed = np.zeros((n, obs_delay_steps, len(SENSED)))

    def batch(self, n: int) -> Latency:
        """Empty lines of the same delays for a batch of ``n`` envs."""
        return Latency(n, self.action_delay_steps, self.obs_delay_steps, self._hover)

    def reset(self, rows: np.ndarray | slice, obs: np.ndarray) -> None:
        """Start the lines of ``rows`` anew: the hover action, and the sensed fields of their
        reset observations ``obs`` (one row each) repeated."""
        self._actions[rows] = self._hover
        self._sensed[rows] = obs[..., None, SENSED]

    def action(self, rows: np.ndarray | slice, action: np.ndarray) -> np.ndarray:
        """The actions the plants of ``rows`` fly now, given the agents' ``action`` rows."""
        return delay_step(self._actions, rows, action)

    def observation(self, rows: np.ndarray | slice, obs: np.ndarray) -> np.ndarray:
        """The observations of ``rows`` as the agents get them: ``obs`` (one row each, as the
        sensors report them now) with the sensed fields delayed (a new array)."""
        out = np.array(obs, dtype=float)
        out[:, SENSED] = delay_step(self._sensed, rows, out[:, SENSED])
        return out
