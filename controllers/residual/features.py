"""The network's 14 body-frame features and the residual acceleration measured from observables.

The nominal model of every tracker is ``a = R·e_z·T/m − g·e_z`` [RES §2]. What it misses (payload,
drag, wind, ground effect) is the *residual acceleration* ``Δa``, which the residual trackers
predict and cancel by feed-forward (``a_eff = a_cmd − Δâ``). This module holds what both the
online estimator and the offline data collection need:

* :func:`features_from_obs` — the 14 body-frame features [RES §4.1];
* :func:`measured_residual` — Δa over one control period from velocities (see its docstring for
  the choice between velocity differences and the accelerometer, and the effect of sensor noise);
* :func:`imu_residual` — Δa sampled by the accelerometer.
"""

from __future__ import annotations

import math

import numpy as np

from residual_quad.envs.dynamics import period_residual
from residual_quad.envs.observation import ObsLayout as L

N_FEATURES = 14
N_OUTPUTS = 3
FEATURE_NAMES: tuple[str, ...] = (
    "v_bx",  # m/s, body-frame velocity
    "v_by",
    "v_bz",
    "vx_abs_vh",  # m²/s², v_x·|v_h|   quadratic drag basis
    "vy_abs_vh",  # m²/s², v_y·|v_h|
    "vz_abs_vz",  # m²/s², v_z·|v_z|
    "a_cmd_bx",  # m/s², previous step's commanded acceleration, body frame
    "a_cmd_by",
    "a_cmd_bz",
    "omega_x",  # rad/s, body rates
    "omega_y",
    "omega_z",
    "z",  # m, height
    "thrust_per_mass",  # m/s², Σ rotor thrust / nominal mass
)
OUTPUT_NAMES: tuple[str, ...] = ("x", "y", "z")  # body-frame residual axes


def total_thrust(obs: np.ndarray) -> float:
    """Σ rotor thrust applied over the last control period (N), summed in rotor order."""
    t0, t1, t2, t3 = obs[L.thrusts]
    return float(t0 + t1 + t2 + t3)


def build_features(
    v_b: np.ndarray,
    a_cmd_b: np.ndarray,
    omega_b: np.ndarray,
    z: float,
    thrust_per_mass: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The 14 features from body-frame quantities (m/s, m/s², rad/s, m, m/s²).

    The quadratic drag basis ``v_x|v_h|, v_y|v_h|, v_z|v_z|`` is given explicitly so the network
    does not have to build squares from tanh units; height feeds the ground effect and the
    normalized thrust encodes the payload (in hover ``T/m_nom = g·m_true/m_nom``).
    """
    f = np.empty(N_FEATURES) if out is None else out
    vx, vy, vz = float(v_b[0]), float(v_b[1]), float(v_b[2])
    s_h = math.sqrt(vx * vx + vy * vy)
    f[0], f[1], f[2] = vx, vy, vz
    f[3], f[4], f[5] = vx * s_h, vy * s_h, vz * abs(vz)
    f[6:9] = a_cmd_b
    f[9:12] = omega_b
    f[12] = z
    f[13] = thrust_per_mass
    return f


def features_from_obs(
    obs: np.ndarray,
    R: np.ndarray,
    last_a_cmd: np.ndarray,
    mass: float,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Features of one observation.

    Args:
        obs: ``ResidualQuad-v0`` observation.
        R: its body → world rotation (3×3).
        last_a_cmd: the tracker's previous commanded acceleration (world, m/s²). The previous
            one, not the current: the current command depends on the prediction (no loop).
        mass: nominal mass (kg) normalizing the applied collective thrust.
    """
    v_b = obs[L.vel] @ R  # Rᵀ v
    a_b = last_a_cmd @ R
    z = float(obs[L.pos][2])  # m, height
    return build_features(v_b, a_b, obs[L.omega_b], z, total_thrust(obs) / mass, out)


def measured_residual(
    prev_obs: np.ndarray, obs: np.ndarray, dt: float, mass: float, gravity: float
) -> np.ndarray:
    """Residual acceleration over the last control period, world frame (m/s²), from observables.

    ``Δa = (v₁ − v₀)/Δt − (R₀·e_z·ΣT/m_nom − g·e_z)`` with ``v₀, R₀`` from ``prev_obs``, ``v₁``
    from ``obs`` and ``ΣT`` the rotor thrusts ``obs`` reports as applied over the period.

    This is the *period-averaged* residual, exactly the quantity a zero-order-hold feed-forward
    has to cancel, and without sensor noise it equals the env's ground truth
    ``info["residual_accel"]`` to rounding — so the offline training data use it. With sensor
    noise the difference amplifies white velocity noise σ_v into residual noise ``√2·σ_v/Δt``
    (141·σ_v at 100 Hz: 1.4 m/s² for σ_v = 1 cm/s), negatively correlated between consecutive
    periods.

    Online, ``geo_rls`` uses :func:`imu_residual` by default: the accelerometer sample at the end
    of the period carries the newest information and its noise is not amplified. Measured
    (seed 0, ``extra`` payload): hover/calm 0.007 m vs 0.010 m, helix/windy 0.028 m vs 0.032 m;
    with σ_v = 2 cm/s, σ_imu = 0.3 m/s² the IMU variant stays at 0.011/0.031 m while the velocity
    variant degrades to 0.039/0.052 m (0.012/0.034 m with ``lowpass_tau = 0.05`` s, which filters
    RLS target and regressor alike and so keeps the regression consistent).
    """
    return period_residual(prev_obs, obs, dt, mass, gravity)  # the env's truth, same bits


def imu_residual(obs: np.ndarray, mass: float) -> np.ndarray:
    """Instantaneous residual in the *body* frame from the accelerometer, m/s².

    The specific force is ``f = Rᵀ(a + g·e_z)``, so ``Δa_b = f − e_z·ΣT/m_nom``. White IMU noise
    enters unamplified (σ_imu), but the value is a sample at the end of the period.
    """
    out = np.array(obs[L.imu], dtype=float)
    out[2] -= total_thrust(obs) / mass
    return out


# ----------------------------------------------------------------------------- batches (N envs)
def total_thrust_batch(obs: np.ndarray) -> np.ndarray:
    """Σ rotor thrust (N) of each row of ``obs`` (N, 36), summed in rotor order like
    :func:`total_thrust`."""
    return ((obs[:, L.thrust0] + obs[:, L.thrust1]) + obs[:, L.thrust2]) + obs[:, L.thrust3]


def features_from_obs_batch(
    obs: np.ndarray, R: np.ndarray, last_a_cmd: np.ndarray, mass: float
) -> np.ndarray:
    """:func:`features_from_obs` of each row: ``obs`` (N, 36), ``R`` (N, 3, 3) body → world,
    ``last_a_cmd`` (N, 3) world m/s²; returns (N, 14)."""
    n = obs.shape[0]
    f = np.empty((n, N_FEATURES))
    v_b = np.einsum("ni,nij->nj", obs[:, L.vel], R)  # Rᵀ v per env
    vx, vy, vz = v_b[:, 0], v_b[:, 1], v_b[:, 2]
    s_h = np.sqrt(vx * vx + vy * vy)
    f[:, 0:3] = v_b
    f[:, 3], f[:, 4], f[:, 5] = vx * s_h, vy * s_h, vz * np.abs(vz)
    f[:, 6:9] = np.einsum("ni,nij->nj", last_a_cmd, R)
    f[:, 9:12] = obs[:, L.omega_b]
    f[:, 12] = obs[:, L.z]
    f[:, 13] = total_thrust_batch(obs) / mass
    return f


def measured_residual_batch(
    prev_obs: np.ndarray, obs: np.ndarray, dt: float, mass: float, gravity: float
) -> np.ndarray:
    """:func:`measured_residual` of each row (N, 36) → (N, 3): the env's own formula applied to
    the transposed batch (every entry a row of N values), so the bits are the same."""
    return period_residual(prev_obs.T, obs.T, dt, mass, gravity).T


def imu_residual_batch(obs: np.ndarray, mass: float) -> np.ndarray:
    """:func:`imu_residual` of each row (N, 36) → (N, 3), body frame, m/s²."""
    out = np.array(obs[:, L.imu], dtype=float)
    out[:, 2] -= total_thrust_batch(obs) / mass
    return out
