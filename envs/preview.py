"""Reference preview: the future reference points an observation carries [DATT] [SIMPLEFLIGHT].

With ``preview=(K, dt)`` the observation at step ``n`` (time ``t = n·control_dt``, the time of its
``ref_pos``) ends with the reference positions, then velocities, at ``t + dt, …, t + K·dt``
(:meth:`~residual_quad.envs.observation.ObsLayout.preview_pos` / ``preview_vel``). One
:class:`Preview` serves both environments, so the single env (a batch of one) and the vector env
read the same times and get the same bits:

* ``dt`` a whole number ``m`` of control periods (to 1e-9 relative): point ``i`` is the reference
  at step ``n + i·m``, time ``(n + i·m)·control_dt`` — the control-time grid the vector env's
  reference tables (:class:`~residual_quad.envs.reference_table.BatchReferences`) hold, so a
  batch is ``K`` table lookups;
* any other ``dt``: point ``i`` is the reference at ``t + i·dt`` (one trajectory call per distinct
  trajectory object and time).

Padding: a time past the episode's end — its last step, ``max_steps·control_dt`` (``episode_s``
in whole control periods) — reads the reference at the end (the last point repeats), so a preview
never reads a reference the episode never flies.

Horizon: ``K·dt`` is at most :data:`MAX_PREVIEW_HORIZON_S`, the longest episode: a longer window
could only repeat the end of every episode, and its step offsets (``dt`` in control periods,
times ``K``) would leave the integers the lookups index with (``preview=(10, 1e17)``).
:func:`check_preview_horizon` refuses it when an env is built (the single and the vector env).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from residual_quad.envs.observation import PreviewSpec
from residual_quad.envs.reference_table import BatchReferences
from residual_quad.envs.trajectories import reference_fields

#: longest preview window ``K·dt``, s: the longest episode (``MAX_EPISODE_S`` of the env)
MAX_PREVIEW_HORIZON_S = 3600.0
_GRID_RTOL = 1e-9  # relative tolerance of "dt is a whole number of control periods"
_MAX_RING = 1024  # rows of the single env's ring of grid references (48 B each)


def check_preview_horizon(spec: PreviewSpec) -> PreviewSpec:
    """``spec`` if its window ``K·dt`` is at most :data:`MAX_PREVIEW_HORIZON_S`, else a
    ``ValueError`` naming ``preview`` with both values."""
    horizon = spec.k * spec.dt_s
    if not horizon <= MAX_PREVIEW_HORIZON_S:
        raise ValueError(
            f"preview window K·dt must be at most {MAX_PREVIEW_HORIZON_S:g} s (the longest "
            f"episode), got K = {spec.k} points × dt = {spec.dt_s!r} s = {horizon:g} s"
        )
    return spec


def grid_steps(spec: PreviewSpec, control_dt: float) -> int:
    """Control periods per preview interval ``m`` if ``spec.dt_s`` is a whole number of them
    (to 1e-9 relative), else 0 (the preview evaluates the trajectory at ``t + i·dt``)."""
    m = round(spec.dt_s / control_dt)
    return m if m >= 1 and abs(m * control_dt - spec.dt_s) <= _GRID_RTOL * spec.dt_s else 0


class Preview:
    """The reference preview of a batch of envs sharing ``spec``, ``control_dt`` and the episode
    length (see the module doc).

    Args:
        spec: the preview's points and spacing.
        control_dt: control period, s.
        max_steps: the episode's last step (control steps): previewed times are clamped there.
    """

    def __init__(
        self,
        spec: PreviewSpec,
        control_dt: float,  # s
        max_steps: int,  # control steps
    ):
        self.spec = check_preview_horizon(spec)
        self.control_dt = control_dt  # s
        self.max_steps = int(max_steps)
        self.grid = grid_steps(spec, control_dt)  # control periods per point, 0: off the grid
        self._offsets = np.arange(1, spec.k + 1, dtype=np.int64)  # i = 1 … K
        # the single env's grid rows of the window ahead, by step mod span (each step's
        # reference is computed once, not once per point that reads it; a window longer than
        # the ring only recomputes)
        span = min(spec.k * self.grid, self.max_steps, _MAX_RING - 1) + 1
        self._ring = np.empty((span, 6))
        self._tag = np.full(span, -1, dtype=np.int64)  # the step each ring row holds
        self._owner: Any = None  # the trajectory the ring holds rows of

    @property
    def end_s(self) -> float:
        """The episode's end, s: the last step's time (previewed times are clamped to it)."""
        return self.max_steps * self.control_dt

    def steps(self, steps: np.ndarray) -> np.ndarray:
        """Grid previews: the step of each point, ``min(n + i·m, max_steps)``, ``(n, K)``."""
        return np.minimum(steps[:, None] + self.grid * self._offsets, self.max_steps)

    def times(self, steps: np.ndarray) -> np.ndarray:
        """Off-grid previews: the time of each point, ``min(n·control_dt + i·dt, end_s)`` s,
        ``(n, K)``."""
        t = steps * self.control_dt
        return np.minimum(t[:, None] + self._offsets * self.spec.dt_s, self.end_s)

    def single(self, trajectory: Any, step: int) -> np.ndarray:
        """The preview entries (``6K``: positions then velocities) of one env at ``step``."""
        rows = np.empty((self.spec.k, 6))
        if self.grid:
            if trajectory is not self._owner:
                self._tag[:], self._owner = -1, trajectory
            span, ring, tag = len(self._tag), self._ring, self._tag
            for i, k in enumerate(self.steps(np.array([step]))[0].tolist()):
                j = k % span
                if tag[j] != k:
                    ring[j] = reference_fields(trajectory, k * self.control_dt)[0:6]
                    tag[j] = k
                rows[i] = ring[j]
        else:
            for i, tk in enumerate(self.times(np.array([step]))[0].tolist()):
                rows[i] = reference_fields(trajectory, tk)[0:6]
        return _entries(rows[None])[0]

    def batch(
        self,
        references: BatchReferences,
        active: np.ndarray,
        steps: np.ndarray,
        failed: np.ndarray,
    ) -> np.ndarray:
        """The preview entries ``(len(active), 6K)`` of the envs ``active`` at their ``steps``,
        each env's trajectory as ``references`` holds it (the same bits as :meth:`single`).

        On the grid: ``K`` lookups of ``references`` (its tables, or its per-env calls for a
        user trajectory; a reference that cannot be read marks its envs in ``failed`` and
        raises, as for the current reference). Off the grid: one trajectory call per distinct
        (trajectory object, time)."""
        k = self.spec.k
        rows = np.empty((len(active), k, 6))
        if self.grid:
            ahead = self.steps(steps)
            if (references.slot[active] >= 0).all():  # all tabulated: one lookup, K per env
                flat = references.rows(np.repeat(active, k), ahead.ravel(), failed)
                rows[:] = flat.reshape(len(active), k, -1)[:, :, 0:6]
            else:  # the per-env path reads each env once per call
                for i in range(k):
                    rows[:, i] = references.rows(active, ahead[:, i], failed)[:, 0:6]
        else:
            times = self.times(steps)
            calls: dict[tuple[int, float], list[float]] = {}
            for row, env in enumerate(active.tolist()):
                trajectory = references.trajectories[env]
                for i, tk in enumerate(times[row].tolist()):
                    key = (id(trajectory), tk)
                    if key not in calls:
                        try:
                            calls[key] = reference_fields(trajectory, tk)[0:6]
                        except (ArithmeticError, AttributeError, TypeError, ValueError) as err:
                            failed[env] = True
                            raise type(err)(f"env {env}: {err}") from None
                    rows[row, i] = calls[key]
        return _entries(rows)


def make_preview(spec: PreviewSpec | None, control_dt: float, max_steps: int) -> Preview | None:
    """The :class:`Preview` of ``spec`` for an env of ``control_dt`` (s) and ``max_steps`` steps,
    or ``None`` without a preview (``spec`` ``None``)."""
    return None if spec is None else Preview(spec, control_dt, max_steps)


def _entries(rows: np.ndarray) -> np.ndarray:
    """``(n, K, 6)`` reference rows (pos, vel) → ``(n, 6K)`` observation entries: the positions
    point-major (``p1x p1y p1z p2x …``), then the velocities in the same order."""
    n = len(rows)
    return np.concatenate((rows[:, :, 0:3].reshape(n, -1), rows[:, :, 3:6].reshape(n, -1)), axis=1)
