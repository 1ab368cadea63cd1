"""Dryden turbulence: the gust model of MIL-F-8785C / MIL-HDBK-1797 [DRY], an alternative to the
Ornstein–Uhlenbeck gusts of :class:`~residual_quad.envs.disturbances.WindModel`.

Frozen turbulence (Taylor's hypothesis): a spatial velocity field with the Dryden spectra is swept
past the vehicle at a reference airspeed ``V``, so the temporal spectra follow from the spatial
ones with ``ω = V·Ω``. Each component is white noise through a rational shaping filter: the
longitudinal one first order (the OU process with ``τ_u = L_u/V``), the lateral and vertical ones
second order, ``H(s) ∝ (1 + √3·τ·s)/(1 + τ·s)²`` with ``τ = L/V``. The filters are discretized
exactly for white-noise input (transition ``e^{A·dt}`` and the noise covariance
``Q = ∫₀^dt e^{As}BBᵀe^{Aᵀs} ds`` in closed form), so the samples are those of the continuous
process at the sample times: the variance is σ² and the autocorrelation the Dryden one at any
step size, with no discretization error beyond rounding.

Axes: longitudinal along the mean wind's heading (``WindModel.direction``), lateral horizontal
and to its left, vertical up (the ENU world's z).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from residual_quad.envs.checks import real

KNOT = 0.514444  # m/s per knot
FOOT = 0.3048  # m per foot

#: Named turbulence levels: the wind speed at 20 ft, W20 (m/s), of MIL-HDBK-1797's light,
#: moderate and severe low-altitude turbulence (15, 30 and 45 knots) [DRY].
DRYDEN_LEVELS: dict[str, float] = {
    "light": 15.0 * KNOT,
    "moderate": 30.0 * KNOT,
    "severe": 45.0 * KNOT,
}

LOW_ALTITUDE_RANGE = (10.0 * FOOT, 1000.0 * FOOT)
"""Altitudes (m) of the low-altitude model; a lower altitude takes the values at 10 ft."""

#: Scale lengths accepted, m: from a millimetre (the viscous end of atmospheric turbulence) to
#: 1000 km (beyond any eddy of the atmospheric boundary layer; MIL-F-8785C's largest is 533 m).
LENGTH_RANGE_M = (1e-3, 1e6)
#: Reference airspeeds accepted, m/s (``airspeed``, ``airspeed_floor`` and the mean wind that
#: sweeps the field): from 1 mm/s to 1000 m/s (about Mach 3; the Dryden forms are subsonic).
AIRSPEED_RANGE_MPS = (1e-3, 1e3)
# Why these bounds keep every filter coefficient finite: the discretized filters are functions
# of h = dt/τ only, τ = L/V. Within the ranges τ ∈ [1e-6, 1e9] s, and the env's physics step
# dt lies in [1e-5, 3600] s (MAX_PHYSICS_HZ; one control period of the longest episode), so
# h ∈ [1e-14, 3.6e9]: e^{-h} and √(1 − e^{-2h}) are finite, Q's entries (which raise 2h to the
# power 2) stay far below overflow (2h)² < 1.8e308 ⇔ h < 6.7e153, and the block length 4τ/dt is a
# finite integer. Outside them τ itself can round to 0 (L = 1e-300 m: dt/τ divides by zero) or
# overflow (L = 1e300 m, V = 1e-300 m/s), or h overflows Q (V = 1e300 m/s): refused at
# construction, naming the argument, instead of an OverflowError at reset.

_SQRT3 = math.sqrt(3.0)
_SECOND_ORDER_OUT = (_SQRT3, 1.0 - _SQRT3)  # output weights of the two filter states


@dataclass(frozen=True)
class DrydenTurbulence:
    """Intensities and scale lengths of Dryden turbulence, and the airspeed that sweeps it past.

    The spectra are MIL-F-8785C's forms [DRY]; MIL-HDBK-1797 writes the lateral and vertical ones
    with half the scale lengths (``2·L``), the same spectra. The reference airspeed is
    ``airspeed`` when given, else ``max(mean wind speed, airspeed_floor)``: a hovering multirotor
    in a mean wind sees the eddies carried past it at the mean wind speed; in calm air the floor
    keeps the time constants ``L/V`` finite (2 m/s is about the helix reference's speed).
    Lengths lie in :data:`LENGTH_RANGE_M`, airspeeds in :data:`AIRSPEED_RANGE_MPS` (where every
    filter coefficient is finite; see there), else a ``ValueError`` naming the field.
    """

    sigma_u: float  # m/s, longitudinal intensity (along the mean wind)
    sigma_v: float  # m/s, lateral intensity (horizontal, across the mean wind)
    sigma_w: float  # m/s, vertical intensity
    length_u: float  # m, longitudinal scale length L_u
    length_v: float  # m, lateral scale length L_v (MIL-F-8785C form)
    length_w: float  # m, vertical scale length L_w
    airspeed: float | None = None  # m/s, reference airspeed; None: max(mean wind, floor)
    airspeed_floor: float = 2.0  # m/s, least reference airspeed when ``airspeed`` is None

    def __post_init__(self) -> None:
        for name in ("sigma_u", "sigma_v", "sigma_w"):
            real(f"turbulence {name}", getattr(self, name), low=0.0, high=1e3, unit="m/s")
        low, high = LENGTH_RANGE_M
        for name in ("length_u", "length_v", "length_w"):
            real(f"turbulence {name}", getattr(self, name), low=low, high=high, unit="m")
        low, high = AIRSPEED_RANGE_MPS
        if self.airspeed is not None:
            real("turbulence airspeed", self.airspeed, low=low, high=high, unit="m/s")
        real("turbulence airspeed_floor", self.airspeed_floor, low=low, high=high, unit="m/s")

    def check_mean_wind(self, mean: float) -> None:
        """``ValueError`` naming the wind mean if a mean wind of ``mean`` m/s would sweep the
        field past faster than :data:`AIRSPEED_RANGE_MPS` allows (it is the reference airspeed
        when ``airspeed`` is ``None``)."""
        if self.airspeed is None and mean > AIRSPEED_RANGE_MPS[1]:
            raise ValueError(
                f"wind mean must be at most {AIRSPEED_RANGE_MPS[1]:g} m/s with Dryden turbulence "
                f"(it is the turbulence airspeed that sweeps the field past), got {mean!r}"
            )

    @classmethod
    def low_altitude(
        cls,
        w20: float,
        altitude: float = LOW_ALTITUDE_RANGE[0],
        airspeed: float | None = None,
        airspeed_floor: float = 2.0,
    ) -> DrydenTurbulence:
        """MIL-F-8785C's low-altitude model [DRY] at ``altitude`` (m above ground) for the wind
        speed ``w20`` (m/s) at 20 ft: ``σ_w = 0.1·W20``, ``σ_u = σ_v = σ_w/(0.177 +
        0.000823·h)^0.4``, ``L_w = h``, ``L_u = L_v = h/(0.177 + 0.000823·h)^1.2`` (h in ft).

        The model holds for 10–1000 ft; below 10 ft (our flights at 1.5–3.5 m) the 10 ft values
        are used, above 1000 ft is refused."""
        w20 = real("turbulence w20", w20, low=0.0, high=1e3, unit="m/s")
        altitude = real("turbulence altitude", altitude, low=0.0, high=LOW_ALTITUDE_RANGE[1])
        h = max(altitude, LOW_ALTITUDE_RANGE[0]) / FOOT  # ft
        base = 0.177 + 0.000823 * h
        sigma_w = 0.1 * w20
        sigma_uv = sigma_w / base**0.4
        length_uv = h / base**1.2 * FOOT  # m
        return cls(
            sigma_u=sigma_uv,
            sigma_v=sigma_uv,
            sigma_w=sigma_w,
            length_u=length_uv,
            length_v=length_uv,
            length_w=h * FOOT,
            airspeed=airspeed,
            airspeed_floor=airspeed_floor,
        )

    @classmethod
    def from_spec(cls, spec: str | DrydenTurbulence) -> DrydenTurbulence:
        """From a level name of :data:`DRYDEN_LEVELS` (the low-altitude model at 10 ft) or a
        ``DrydenTurbulence``."""
        if isinstance(spec, DrydenTurbulence):
            return spec
        if isinstance(spec, str) and spec in DRYDEN_LEVELS:
            return cls.low_altitude(DRYDEN_LEVELS[spec])
        raise ValueError(
            f"unknown turbulence {spec!r}; valid choices: {', '.join(DRYDEN_LEVELS)}, "
            "or a DrydenTurbulence"
        )

    def reference_airspeed(self, mean_wind: float) -> float:
        """The airspeed (m/s) that sweeps the field past the vehicle in a mean wind of
        ``mean_wind`` m/s."""
        if self.airspeed is not None:
            return self.airspeed
        return max(float(mean_wind), self.airspeed_floor)

    def time_constants(self, mean_wind: float) -> tuple[float, float, float]:
        """``(τ_u, τ_v, τ_w) = (L_u, L_v, L_w)/V`` in s."""
        v = self.reference_airspeed(mean_wind)
        return self.length_u / v, self.length_v / v, self.length_w / v


def dryden_psd(f: np.ndarray, sigma: float, tau: float, order: int) -> np.ndarray:
    """One-sided power spectral density, (m/s)²/Hz, at frequencies ``f`` (Hz) of a Dryden
    component of intensity ``sigma`` (m/s) and time constant ``tau = L/V`` (s): ``order`` 1 is
    the longitudinal form, 2 the lateral/vertical one [DRY]. Integrates to ``sigma²`` over
    ``[0, ∞)``."""
    x = (2.0 * np.pi * np.asarray(f, dtype=float) * tau) ** 2
    if order == 1:
        return 4.0 * tau * sigma**2 / (1.0 + x)
    if order == 2:
        return 2.0 * tau * sigma**2 * (1.0 + 3.0 * x) / (1.0 + x) ** 2
    raise ValueError(f"order must be 1 (longitudinal) or 2 (lateral, vertical), got {order!r}")


def _gamma_p(s: int, x: float) -> float:
    """Regularized lower incomplete gamma ``P(s, x) = 1 − e^{−x}·Σ_{k<s} x^k/k!`` (integer s),
    by its power series for small ``x`` (where the difference would cancel)."""
    if x < 1.0:
        term = math.exp(-x) * x**s / math.factorial(s)
        total, k = 0.0, s
        while term > 1e-17 * total or total == 0.0:
            total += term
            k += 1
            term *= x / k
            if term == 0.0:
                break
        return total
    return 1.0 - math.exp(-x) * sum(x**k / math.factorial(k) for k in range(s))


def second_order_step(h: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact discretization of the lateral/vertical shaping filter over ``h = dt/τ``.

    In time units of τ the filter is the cascade ``z₁' = −z₁ + n``, ``z₂' = −z₂ + z₁`` driven by
    unit white noise ``n``; the output ``√3·z₁ + (1 − √3)·z₂`` has the Dryden lateral spectrum
    and unit stationary variance. Returns the transition ``Φ = e^{−h}·[[1, 0], [h, 1]]`` and the
    noise covariance ``Q = ∫₀^h e^{−2u}·[[1, u], [u, u²]] du`` (entries ``m!/2^{m+1}·P(m+1, 2h)``).
    """
    a = math.exp(-h)
    phi = np.array([[a, 0.0], [a * h, a]])
    q = [math.factorial(m) / 2.0 ** (m + 1) * _gamma_p(m + 1, 2.0 * h) for m in range(3)]
    return phi, np.array([[q[0], q[1]], [q[1], q[2]]])


#: stationary covariance of the two filter states (``Q`` at ``h → ∞``)
SECOND_ORDER_STATIONARY = np.array([[0.5, 0.25], [0.25, 0.25]])


def _chol2(m: np.ndarray) -> tuple[float, float, float]:
    """``(l11, l21, l22)`` of the Cholesky factor of a 2×2 covariance."""
    l11 = math.sqrt(m[0, 0])
    l21 = m[1, 0] / l11 if l11 > 0.0 else 0.0
    return l11, l21, math.sqrt(max(m[1, 1] - l21 * l21, 0.0))


def first_order_run(a: np.ndarray, x0: np.ndarray, drive: np.ndarray) -> np.ndarray:
    """``x_k = a·x_{k−1} + d_{k−1}`` for ``k = 1 … n``, column by column (``a``, ``x0`` of shape
    ``(m,)``, ``drive`` ``(n, m)``): the closed form ``x_k = a^k·(x₀ + Σ_{j<k} a^{−(j+1)}·d_j)``
    in one vectorized expression while ``a^n`` stays representable, else the recursion."""
    n = len(drive)
    if float(np.min(a)) ** n > 1e-250:
        pw = a ** np.arange(1, n + 1)[:, None]
        return pw * (x0 + np.cumsum(drive / pw, axis=0))
    out = np.empty_like(drive)
    x = x0
    for i in range(n):
        x = a * x + drive[i]
        out[i] = x
    return out


class DrydenGusts:
    """Seeded sampler of Dryden gusts (m/s, world) at a fixed step ``dt``, produced in blocks.

    Five filter states (longitudinal 1, lateral 2, vertical 2) start from their stationary
    distribution; every sample takes five standard normal draws from ``rng``.

    Args:
        turbulence: intensities, scale lengths and airspeed.
        mean: mean wind speed, m/s (sets the reference airspeed).
        direction: heading of the longitudinal axis, rad from +x.
        dt: sample step, s.
        rng: the environment's seeded generator.
    """

    def __init__(
        self,
        turbulence: DrydenTurbulence,
        mean: float,
        direction: float,
        dt: float,
        rng: np.random.Generator,
    ):
        self.turbulence = turbulence
        self.taus = turbulence.time_constants(mean)  # s
        self._rng = rng
        tu, tv, tw = self.taus
        self._a = np.array([math.exp(-dt / t) for t in (tu, tv, tv, tw, tw)])
        self._b_u = math.sqrt(-math.expm1(-2.0 * dt / tu))  # √(1 − a²)
        self._phi_h = []  # per second-order component: (a·h, Cholesky factor of Q)
        for t in (tv, tw):
            phi, q = second_order_step(dt / t)
            self._phi_h.append((phi[1, 0], _chol2(q)))
        self._c, self._s = math.cos(direction), math.sin(direction)
        z = rng.standard_normal(5)  # stationary start
        l11, l21, l22 = _chol2(SECOND_ORDER_STATIONARY)
        self._state = np.array(
            [z[0], l11 * z[1], l21 * z[1] + l22 * z[2], l11 * z[3], l21 * z[3] + l22 * z[4]]
        )

    @property
    def shortest_tau(self) -> float:
        """The shortest filter time constant, s."""
        return min(self.taus)

    def next_block(self, n: int) -> np.ndarray:
        """The next ``n`` gust samples, shape ``(n, 3)``, m/s, world."""
        noise = self._rng.standard_normal((n, 5))
        drive = np.empty((n, 5))
        drive[:, 0] = self._b_u * noise[:, 0]
        for k, (_, (l11, l21, l22)) in zip((1, 3), self._phi_h, strict=True):
            drive[:, k] = l11 * noise[:, k]
            drive[:, k + 1] = l21 * noise[:, k] + l22 * noise[:, k + 1]
        a, x0 = self._a, self._state
        # first states (z₁ of each filter, and the longitudinal OU): independent first order
        first = [0, 1, 3]
        x = np.empty((n, 5))
        x[:, first] = first_order_run(a[first], x0[first], drive[:, first])
        # second states: z₂ ← a·z₂ + a·h·z₁(previous) + w₂
        for k, (ah, _) in zip((1, 3), self._phi_h, strict=True):
            prev = np.concatenate(([x0[k]], x[:-1, k]))
            drive[:, k + 1] += ah * prev
        second = [2, 4]
        x[:, second] = first_order_run(a[second], x0[second], drive[:, second])
        self._state = x[-1].copy()
        t = self.turbulence
        c1, c2 = _SECOND_ORDER_OUT
        u = t.sigma_u * x[:, 0]
        v = t.sigma_v * (c1 * x[:, 1] + c2 * x[:, 2])
        w = t.sigma_w * (c1 * x[:, 3] + c2 * x[:, 4])
        return np.stack((self._c * u - self._s * v, self._s * u + self._c * v, w), axis=1)
