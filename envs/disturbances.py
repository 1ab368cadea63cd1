"""Unmodelled effects of the plant: body-frame drag, gusty wind, ground effect, payload levels.

Magnitudes follow [RES §3]: drag is ≈60 % of the nominal weight
at 10 m/s, gusts are a first-order Gauss–Markov (Ornstein–Uhlenbeck) process discretized exactly,
the ground effect is the Cheeseman–Bennett thrust gain. None of these is known to the controllers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from residual_quad.envs.checks import is_real, real
from residual_quad.envs.turbulence import DrydenGusts, DrydenTurbulence
from residual_quad.envs.xp import FLOATS, Namespace

#: Named payload levels, kg (``extra`` is never used for training).
PAYLOAD_LEVELS: dict[str, float] = {"none": 0.0, "light": 0.25, "heavy": 0.50, "extra": 0.75}

#: Named wind levels: (mean speed m/s, horizontal gust σ m/s).
WIND_LEVELS: dict[str, tuple[float, float]] = {
    "calm": (0.0, 0.0),
    "breezy": (1.5, 0.9),
    "windy": (3.2, 1.8),
}


MAX_WIND_TAU_S = 1e9
"""Longest gust correlation time accepted, s: the longest Dryden time constant ``L/V`` accepted
(1000 km swept past at 1 mm/s, :data:`~residual_quad.envs.turbulence.LENGTH_RANGE_M` and
``AIRSPEED_RANGE_MPS``). Over the longest episode (3600 s) such a gust decorrelates by
``1 − e^{−3600/1e9} ≈ 3.6e-6``: it is a constant offset already, so a longer τ changes nothing
physical — and it keeps the sampler's block length ``4τ/dt`` (physics steps ``dt`` of 1e-5 s to
3600 s) a finite integer, which a τ near the largest float overflowed at reset."""

MAX_PAYLOAD_KG = 1e9
"""Heaviest payload accepted, kg: far past any flight (1e6 kg already just falls), yet a mass at
which MuJoCo's composite inertia stays well conditioned."""


def _choice_error(
    kind: str, value: object, valid: Mapping[str, object], other: str = ""
) -> ValueError:
    """The error for an unknown level name: the names, and ``other`` (what else is accepted)."""
    extra = f", or {other}" if other else ""
    return ValueError(f"unknown {kind} {value!r}; valid choices: {', '.join(valid)}{extra}")


def resolve_payload(payload: str | float) -> float:
    """Payload mass in kg from a level name or a finite number in ``[0, MAX_PAYLOAD_KG]``."""
    if isinstance(payload, str):
        if payload not in PAYLOAD_LEVELS:
            raise _choice_error(
                "payload", payload, PAYLOAD_LEVELS, f"a mass in kg in [0, {MAX_PAYLOAD_KG:g}]"
            )
        return PAYLOAD_LEVELS[payload]
    # compared as given: float() of a huge int would overflow before the range check
    if not is_real(payload) or not 0.0 <= payload <= MAX_PAYLOAD_KG:
        raise ValueError(
            f"payload must be one of {', '.join(PAYLOAD_LEVELS)} or a finite mass in "
            f"[0, {MAX_PAYLOAD_KG:g}] kg, got {payload!r}"
        )
    return float(payload)


def check_wind_tau(value: object) -> float:
    """``wind_tau`` as a float in (0, :data:`MAX_WIND_TAU_S`] s, else a ``ValueError`` naming
    it."""
    return real("wind_tau", value, low=0.0, high=MAX_WIND_TAU_S, low_open=True, unit="s")


@dataclass(frozen=True)
class DragModel:
    """Body-frame anisotropic quadratic + linear drag on the air-relative velocity.

    ``F_b = -(k_h·|v_h|·v_x, k_h·|v_h|·v_y, k_v·|v_z|·v_z) - c_lin·v_b`` with ``v_h`` the body-frame
    horizontal speed. The vehicle is flat, so the vertical coefficient is larger.
    """

    k_h: float = 0.055  # N/(m/s)², horizontal quadratic
    k_v: float = 0.090  # N/(m/s)², vertical quadratic
    c_lin: float = 0.020  # N/(m/s), linear, dominant at low speed

    def __post_init__(self) -> None:
        real("drag k_h", self.k_h, low=0.0, unit="N/(m/s)²")
        real("drag k_v", self.k_v, low=0.0, unit="N/(m/s)²")
        real("drag c_lin", self.c_lin, low=0.0, unit="N/(m/s)")

    def body_force(self, v_b: np.ndarray) -> np.ndarray:
        """Drag force in the body frame (N) for an air-relative body-frame velocity (m/s)."""
        vx, vy, vz = (float(c) for c in v_b)
        s_h = math.hypot(vx, vy)
        return -np.array(
            [
                self.k_h * s_h * vx + self.c_lin * vx,
                self.k_h * s_h * vy + self.c_lin * vy,
                self.k_v * abs(vz) * vz + self.c_lin * vz,
            ]
        )


def drag_world_force(rot, ax, ay, az, k_h: float, k_v: float, c_lin: float, xp: Namespace = FLOATS):
    """Drag force (N, world) of :class:`DragModel` on the air-relative velocity ``(ax, ay, az)``
    (m/s, world) of a frame with the row-major body → world rotation ``rot`` (9 entries).

    The one implementation of the drag of the single and the vector environment: operators,
    ``abs`` and ``xp.sqrt`` only, so Python floats (``xp`` :class:`~residual_quad.envs.xp.
    FLOATS`) and equal-shaped float64 arrays (``xp=ARRAYS``) give the same bits per element.
    """
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rot
    bx = r00 * ax + r10 * ay + r20 * az  # air-relative velocity, body frame
    by = r01 * ax + r11 * ay + r21 * az
    bz = r02 * ax + r12 * ay + r22 * az
    kh = k_h * xp.sqrt(bx * bx + by * by) + c_lin
    gx, gy, gz = -kh * bx, -kh * by, -(k_v * abs(bz) + c_lin) * bz
    return (
        r00 * gx + r01 * gy + r02 * gz,
        r10 * gx + r11 * gy + r12 * gz,
        r20 * gx + r21 * gy + r22 * gz,
    )


@dataclass(frozen=True)
class WindModel:
    """Mean wind plus Ornstein–Uhlenbeck gusts, world frame.

    The mean blows along ``direction`` (rad from +x, in the horizontal plane). Each axis of the gust
    is an independent OU process with time constant ``tau`` and stationary standard deviation
    ``sigma`` (horizontal) and ``vertical_scale·sigma`` (vertical), discretized exactly:
    ``x ← e^{-dt/τ}·x + σ·√(1 − e^{-2dt/τ})·n`` — the stationary variance is σ² at any step size.
    Gusts start from their stationary distribution.

    With ``turbulence`` (a :class:`~residual_quad.envs.turbulence.DrydenTurbulence`) the gusts
    are Dryden turbulence [DRY] instead, in the axes of the mean wind's heading; ``sigma`` must
    then be 0 (``tau`` and ``vertical_scale`` are the OU gusts' and unused).
    """

    mean: float = 0.0  # m/s
    sigma: float = 0.0  # m/s, horizontal gust standard deviation
    tau: float = 2.0  # s, gust correlation time, in (0, MAX_WIND_TAU_S]
    direction: float = 0.0  # rad, heading the mean wind blows towards
    vertical_scale: float = 0.5  # vertical σ relative to horizontal
    turbulence: DrydenTurbulence | None = None  # Dryden gusts in place of the OU ones

    def __post_init__(self) -> None:
        real("wind mean", self.mean, low=0.0, unit="m/s")
        real("wind sigma", self.sigma, low=0.0, unit="m/s")
        check_wind_tau(self.tau)
        real("wind_direction", self.direction, unit="rad")
        real("wind vertical_scale", self.vertical_scale, low=0.0)
        if self.turbulence is not None:
            if not isinstance(self.turbulence, DrydenTurbulence):
                raise ValueError(
                    f"wind turbulence must be a DrydenTurbulence or None, got {self.turbulence!r}"
                )
            if self.sigma != 0.0:
                raise ValueError(
                    f"wind sigma must be 0 with Dryden turbulence (one gust model), got "
                    f"{self.sigma!r}"
                )
            self.turbulence.check_mean_wind(self.mean)

    @classmethod
    def from_spec(cls, wind: str | tuple[float, float] | WindModel, **overrides) -> WindModel:
        """Build from a level name, a ``(mean, sigma)`` pair (m/s) or a ``WindModel``.

        ``overrides`` replace fields (``None``: keep); ``turbulence`` (a level name of
        :data:`~residual_quad.envs.turbulence.DRYDEN_LEVELS` or a ``DrydenTurbulence``)
        replaces the OU gusts: the mean stays, ``sigma`` becomes 0."""
        if isinstance(wind, WindModel):
            base = wind
        elif isinstance(wind, str):
            if wind not in WIND_LEVELS:
                raise _choice_error(
                    "wind", wind, WIND_LEVELS, "a (mean, sigma) pair in m/s, or a WindModel"
                )
            mean, sigma = WIND_LEVELS[wind]
            base = cls(mean=mean, sigma=sigma)
        else:
            try:
                mean, sigma = wind
            except (TypeError, ValueError):
                mean = sigma = None
            if not (is_real(mean) and is_real(sigma)):
                raise ValueError(
                    f"wind must be one of {list(WIND_LEVELS)} or a (mean, sigma) pair in m/s, "
                    f"got {wind!r}"
                )
            try:
                mean, sigma = float(mean), float(sigma)
            except OverflowError:  # an integer beyond the float range: the model names it
                pass
            base = cls(mean=mean, sigma=sigma)
        if not overrides:
            return base
        fields = {**base.__dict__, **{k: v for k, v in overrides.items() if v is not None}}
        if overrides.get("turbulence") is not None:
            fields["turbulence"] = DrydenTurbulence.from_spec(overrides["turbulence"])
            fields["sigma"] = 0.0
        return cls(**fields)

    @property
    def mean_vector(self) -> np.ndarray:
        return np.array([math.cos(self.direction), math.sin(self.direction), 0.0]) * self.mean

    @property
    def sigma_vector(self) -> np.ndarray:
        return np.array([self.sigma, self.sigma, self.vertical_scale * self.sigma])


class WindProcess:
    """Seeded sampler of a :class:`WindModel` at a fixed step ``dt``, produced in blocks.

    The recursion is linear, so a block of ``n`` steps is one vectorized expression; the block
    length keeps ``n·dt/τ`` small enough that the closed form stays well conditioned. Dryden
    turbulence (``model.turbulence``) comes from a
    :class:`~residual_quad.envs.turbulence.DrydenGusts` on the same generator.
    """

    def __init__(
        self,
        model: WindModel,
        dt: float,
        rng: np.random.Generator,
        block: int = 500,
        chunk: int = 1,
    ):
        if dt <= 0:
            raise ValueError(f"dt must be > 0, got {dt}")
        self.model = model
        self.dt = dt
        self._rng = rng
        self._mean = model.mean_vector
        self._dryden = None
        if model.turbulence is not None:
            self._dryden = DrydenGusts(model.turbulence, model.mean, model.direction, dt, rng)
            tau = self._dryden.shortest_tau
        else:
            tau = model.tau
            self._a = math.exp(-dt / tau)
            self._b = math.sqrt(-math.expm1(-2.0 * dt / tau))  # √(1 − a²), accurate for small dt
            self._sigma = model.sigma_vector
            self._gust = self._sigma * rng.standard_normal(3)  # stationary start
        block = max(1, min(block, int(4.0 * tau / dt)))
        self._block = max(chunk, block // chunk * chunk)  # whole chunks: take(chunk) is a view
        self._buf = np.empty((0, 3))
        self._i = 0

    def _refill(self) -> None:
        refill_blocks((self,))

    @property
    def _ou_key(self) -> tuple[float, int] | None:
        """``(a, block)`` of a Gauss–Markov process whose block is one closed-form expression
        (shared by every process of the same key), else ``None`` (Dryden, or ``a^block``
        underflowing)."""
        if self._dryden is not None or not self._a**self._block > 1e-250:
            return None
        return (self._a, self._block)

    @property
    def block(self) -> np.ndarray:
        """The samples drawn so far for the current block (m/s, world), shape (n, 3); a new
        array object after each refill. Do not modify."""
        return self._buf

    @property
    def position(self) -> int:
        """Index in :attr:`block` of the next sample :meth:`sample`/:meth:`take` hand out; a
        reader that consumed the block elsewhere (the vector env's mirror) sets it back."""
        return self._i

    @position.setter
    def position(self, i: int) -> None:
        self._i = int(i)

    def sample(self) -> np.ndarray:
        """Wind velocity (m/s, world) for the next step; the returned row must not be modified."""
        if self._i >= len(self._buf):
            self._refill()
        w = self._buf[self._i]
        self._i += 1
        return w

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` wind samples (m/s, world), shape (n, 3); a view, do not modify."""
        i = self._i
        if i >= len(self._buf):  # the block is used up: refill now, as sample() would
            self._refill()
            i = 0
        if i + n <= len(self._buf):
            self._i = i + n
            return self._buf[i : i + n]
        return np.array([self.sample() for _ in range(n)])


@functools.lru_cache(maxsize=64)
def _decay_powers(a: float, n: int) -> np.ndarray:
    """``a^k`` for ``k = 1 … n``, shape ``(n, 1)``: the same for every block of the same
    ``(a, n)``, so computed once (read-only)."""
    powers = a ** np.arange(1, n + 1)[:, None]
    powers.flags.writeable = False
    return powers


def refill_blocks(processes: Sequence[WindProcess]) -> None:
    """Draw the next block of every process in ``processes`` (distinct objects), each from its
    own generator in its own order, as each one's refill alone would, bit for bit.

    The Gauss–Markov blocks of processes with the same decay and block length are one array
    expression (``x_k = a^k (x_0 + Σ_{j<k} a^{-(j+1)} w_j)``, the sums along each block); a
    batched reset of many envs refills them all at once."""
    groups: dict[tuple[float, int], list[tuple[WindProcess, np.ndarray]]] = {}
    for proc in processes:
        n = proc._block
        if proc._dryden is not None:
            proc._buf = proc._dryden.next_block(n) + proc._mean
            proc._i = 0
            continue
        noise = proc._rng.standard_normal((n, 3)) * (proc._b * proc._sigma)
        key = proc._ou_key
        if key is None:  # steps much longer than τ: a^k underflows, so run the recursion itself
            gust = np.empty((n, 3))
            x = proc._gust
            for i in range(n):
                x = proc._a * x + noise[i]
                gust[i] = x
            proc._gust = gust[-1].copy()
            proc._buf = gust + proc._mean
            proc._i = 0
            continue
        groups.setdefault(key, []).append((proc, noise))
    for (a, n), members in groups.items():
        pw = _decay_powers(a, n)
        noise = np.stack([w for _, w in members])
        start = np.stack([proc._gust for proc, _ in members])[:, None, :]
        gust = pw * (start + np.cumsum(noise / pw, axis=1))
        mean = np.stack([proc._mean for proc, _ in members])[:, None, :]
        buf = gust + mean
        for j, (proc, _) in enumerate(members):
            proc._gust = gust[j, -1].copy()
            proc._buf = buf[j]
            proc._i = 0


@dataclass(frozen=True)
class GroundEffect:
    """Cheeseman–Bennett thrust gain ``1 / (1 - (R / 4z)²)``, clipped to ``max_gain``.

    ``z`` is the rotor-plane height above the ground (m). Out of ground effect the gain is 1.
    """

    rotor_radius: float = 0.127  # m
    max_gain: float = 1.5

    def gain(self, z: float) -> float:
        """The gain at rotor-plane height ``z`` (m); an array of heights gives an array (the same
        formula and clipping, element by element)."""
        if isinstance(z, np.ndarray):
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                r = self.rotor_radius / (4.0 * z)
                r2 = r * r
                clipped = (z <= 0.0) | (r >= 1.0) | (r2 >= 1.0 - 1.0 / self.max_gain)
                return np.where(clipped, self.max_gain, 1.0 / (1.0 - r2))
        if z <= 0.0:
            return self.max_gain
        r = self.rotor_radius / (4.0 * z)
        if r >= 1.0:  # deep in ground effect (and no overflow of r² for a tiny z)
            return self.max_gain
        r2 = r * r
        if r2 >= 1.0 - 1.0 / self.max_gain:
            return self.max_gain
        return 1.0 / (1.0 - r2)
