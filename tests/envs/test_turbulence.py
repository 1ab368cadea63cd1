"""Dryden turbulence: the low-altitude model's numbers, the exact discretization, the sample
spectra and variances against the analytic ones, determinism and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, signal

from residual_quad.envs.disturbances import WindModel, WindProcess
from residual_quad.envs.residual_quad_env import ResidualQuadEnv
from residual_quad.envs.turbulence import (
    AIRSPEED_RANGE_MPS,
    DRYDEN_LEVELS,
    FOOT,
    KNOT,
    LENGTH_RANGE_M,
    SECOND_ORDER_STATIONARY,
    DrydenGusts,
    DrydenTurbulence,
    dryden_psd,
    first_order_run,
    second_order_step,
)

C = np.array([math.sqrt(3.0), 1.0 - math.sqrt(3.0)])  # output weights of the two filter states


# ---------------------------------------------------------------- the low-altitude model


def test_low_altitude_model_at_1000_ft_is_isotropic():
    """At 1000 ft ``0.177 + 0.000823·h = 1``: σ_u = σ_v = σ_w and L_u = L_v = L_w = h."""
    t = DrydenTurbulence.low_altitude(10.0, altitude=1000 * FOOT)
    assert t.sigma_w == pytest.approx(1.0, rel=1e-15)
    assert t.sigma_u == t.sigma_v == pytest.approx(1.0, rel=1e-12)
    assert t.length_w == pytest.approx(304.8, rel=1e-15)
    assert t.length_u == t.length_v == pytest.approx(304.8, rel=1e-12)


def test_levels_are_the_standard_20_ft_winds_at_10_ft():
    """Moderate: W20 = 30 kt, σ_w = 3 kt; at 10 ft σ_u = σ_w/0.18523^0.4 and
    L_u = 10 ft/0.18523^1.2."""
    t = DrydenTurbulence.from_spec("moderate")
    assert DRYDEN_LEVELS == pytest.approx(
        {"light": 7.71666, "moderate": 15.43332, "severe": 23.14998}
    )
    assert t.sigma_w == pytest.approx(3.0 * KNOT, rel=1e-12)
    assert t.sigma_u == pytest.approx(3.0 * KNOT / 0.18523**0.4, rel=1e-12)
    assert t.length_w == pytest.approx(3.048, rel=1e-12)
    assert t.length_u == pytest.approx(3.048 / 0.18523**1.2, rel=1e-12)
    assert t.sigma_u / t.sigma_w == pytest.approx(1.963, abs=1e-3)  # the model's ratio at 10 ft
    # below 10 ft the model's lower limit is used
    assert DrydenTurbulence.low_altitude(15.0, altitude=1.5) == DrydenTurbulence.low_altitude(15.0)


def test_reference_airspeed_is_the_mean_wind_above_the_floor():
    t = DrydenTurbulence.from_spec("light")
    assert t.reference_airspeed(3.2) == 3.2 and t.reference_airspeed(0.5) == 2.0
    fixed = DrydenTurbulence.low_altitude(7.7, airspeed=8.0)
    assert fixed.reference_airspeed(20.0) == 8.0
    assert fixed.time_constants(0.0) == (fixed.length_u / 8, fixed.length_v / 8, 3.048 / 8)


# ---------------------------------------------------------------- exact discretization


@pytest.mark.parametrize("h", [1e-5, 2e-3, 0.1, 1.0, 7.0, 60.0])
def test_second_order_noise_covariance_equals_the_integral(h):
    """Q = ∫₀^h e^{−2u}[[1, u], [u, u²]] du, against numerical quadrature."""
    _, q = second_order_step(h)
    for (i, j), m in {(0, 0): 0, (0, 1): 1, (1, 1): 2}.items():
        expected = integrate.quad(lambda u, m=m: u**m * math.exp(-2 * u), 0, h, epsabs=0)[0]
        assert q[i, j] == pytest.approx(expected, rel=1e-12)
    assert q[0, 1] == q[1, 0]


@pytest.mark.parametrize("h", [1e-4, 2e-3, 0.05, 1.0, 5.0])
def test_second_order_step_keeps_the_stationary_covariance(h):
    """P = Φ·P·Φᵀ + Q: the stationary start stays stationary at every step size."""
    phi, q = second_order_step(h)
    p = SECOND_ORDER_STATIONARY
    np.testing.assert_allclose(phi @ p @ phi.T + q, p, rtol=0, atol=1e-15)
    assert C @ p @ C == pytest.approx(1.0, rel=1e-15)  # unit output variance


@pytest.mark.parametrize("h", [2e-3, 0.1, 0.7])
def test_discrete_autocorrelation_is_the_dryden_one(h):
    """c·Φ^k·P·cᵀ = e^{−kh}(1 − kh/2): MIL-F-8785C's lateral autocorrelation at lag k·dt."""
    phi, _ = second_order_step(h)
    p = SECOND_ORDER_STATIONARY
    m = np.eye(2)
    for k in range(0, 200, 7):
        if k:
            m = np.linalg.matrix_power(phi, k)
        assert C @ m @ p @ C == pytest.approx(math.exp(-k * h) * (1 - k * h / 2), abs=1e-14)


def test_first_order_run_closed_form_equals_the_recursion():
    """The vectorized closed form against the plain recursion; a pole so fast that ``a^n``
    underflows takes the recursion itself (bit for bit)."""
    rng = np.random.default_rng(0)
    drive, x0 = rng.standard_normal((300, 3)), rng.standard_normal(3)

    def loop(a):
        out, x = [], x0
        for d in drive:
            x = a * x + d
            out.append(x)
        return np.array(out)

    a = np.array([0.999, 0.99, 0.985])  # a^300 ≥ e^{-4.6}: the closed form
    np.testing.assert_allclose(first_order_run(a, x0, drive), loop(a), rtol=1e-11, atol=1e-12)
    fast = np.array([0.5, 1e-3, 0.9])
    assert np.array_equal(first_order_run(fast, x0, drive), loop(fast))


def test_blocks_continue_one_process():
    """Samples drawn in blocks of 300 + 700 equal one block of 1000: the state carries over and
    the draws are the same stream."""
    one = DrydenGusts(SPEC, 3.0, 0.4, 0.002, np.random.default_rng(5)).next_block(1000)
    gusts = DrydenGusts(SPEC, 3.0, 0.4, 0.002, np.random.default_rng(5))
    two = np.concatenate([gusts.next_block(300), gusts.next_block(700)])
    np.testing.assert_allclose(two, one, rtol=0, atol=1e-12)


def test_psd_integrates_to_the_variance():
    for order in (1, 2):
        total = integrate.quad(dryden_psd, 0, np.inf, args=(1.7, 0.8, order))[0]
        assert total == pytest.approx(1.7**2, rel=1e-8)
    with pytest.raises(ValueError, match="order"):
        dryden_psd(1.0, 1.0, 1.0, 3)


# ---------------------------------------------------------------- sample statistics

SPEC = DrydenTurbulence(
    sigma_u=1.5, sigma_v=1.2, sigma_w=0.8, length_u=20.0, length_v=12.0, length_w=5.0, airspeed=10.0
)


def _aliased_psd(f, sigma, tau, order, fs):
    """The one-sided PSD of the process sampled at ``fs``: the continuous one folded."""
    return sum(dryden_psd(np.abs(f + k * fs), sigma, tau, order) for k in range(-60, 61))


def test_sample_spectra_match_the_analytic_dryden_spectra():
    """Welch estimates over a long seeded run against the (aliased) analytic spectra, averaged
    over log-spaced bands.

    Tolerance: a Hann-windowed, 50 %-overlapped Welch estimate from K segments has relative
    variance ≈ 1.06/K per bin (Welch 1967); adjacent bins are correlated (ρ² ≈ 4/9, then 1/36),
    so the mean of B bins has relative variance ≈ 1.06·1.94/(K·B). We allow 4 such standard
    deviations plus 1 % for the window's smoothing bias; the run is seeded, so the test is
    deterministic, and a wrong filter (a first-order lateral form, a σ off by 5 %, a time
    constant off by 10 %) misses by more."""
    dt, nperseg, k_seg = 0.01, 8192, 400
    n = nperseg * (k_seg + 1) // 2
    gusts = DrydenGusts(SPEC, 0.0, 0.0, dt, np.random.default_rng(2024))
    x = np.concatenate([gusts.next_block(4096) for _ in range(n // 4096 + 1)])[:n]
    f, pxx = signal.welch(x, fs=1 / dt, window="hann", nperseg=nperseg, axis=0)
    taus = SPEC.time_constants(0.0)
    edges = np.geomspace(0.05, 40.0, 10)
    for axis, (sigma, order) in enumerate(((1.5, 1), (1.2, 2), (0.8, 2))):
        model = _aliased_psd(f, sigma, taus[axis], order, 1 / dt)
        ratio = pxx[:, axis] / model
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            band = (f >= lo) & (f < hi)
            b = int(band.sum())
            tol = 4 * math.sqrt(1.06 * 1.94 / (k_seg * b)) + 0.01
            assert abs(ratio[band].mean() - 1) < tol, (axis, lo, hi, ratio[band].mean(), tol)
        # variance: the sample variance of the long run (std ≈ σ²·√(2·τ_c/T), τ_c ≤ τ)
        rel_std = math.sqrt(2 * taus[axis] / (n * dt))
        assert x[:, axis].var() / sigma**2 == pytest.approx(1.0, abs=4 * rel_std)


def test_wind_process_variance_at_the_physics_step_and_mean():
    """Through :class:`WindProcess` (the plant's path, blocks and refills) at 500 Hz: the mean
    wind plus gusts of variance σ² along the mean wind's axes (heading 90°: u along +y)."""
    spec = DrydenTurbulence(
        sigma_u=1.0, sigma_v=0.7, sigma_w=0.4, length_u=4.0, length_v=4.0, length_w=2.0
    )
    model = WindModel(mean=4.0, direction=math.pi / 2, turbulence=spec)  # V = 4 m/s: τ ≤ 1 s
    proc = WindProcess(model, 0.002, np.random.default_rng(7), chunk=5)
    n = 1_000_000  # 2000 s
    w = np.concatenate([proc.take(5).copy() for _ in range(n // 5)])
    gust = w - model.mean_vector
    for axis, (sigma, tau) in enumerate(((0.7, 1.0), (1.0, 1.0), (0.4, 0.5))):
        rel_std = math.sqrt(2 * tau / (n * 0.002))
        assert gust[:, axis].var() / sigma**2 == pytest.approx(1.0, abs=4 * rel_std)
        assert abs(gust[:, axis].mean()) < 4 * sigma * math.sqrt(2 * tau / (n * 0.002))


# ---------------------------------------------------------------- the environment


def _winds(seed, **kwargs):
    env = ResidualQuadEnv(wind="windy", trajectory="helix", turbulence="moderate", **kwargs)
    env.reset(seed=seed)
    return np.array([env.step(np.full(4, -0.2))[4]["wind"] for _ in range(40)])


def test_same_seed_same_turbulence_and_it_replaces_the_ou_gusts():
    a, b, c = _winds(3), _winds(3), _winds(4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    env = ResidualQuadEnv(wind="windy", turbulence="moderate")
    assert env.wind_model.sigma == 0.0 and env.wind_model.mean == 3.2
    assert env.wind_model.turbulence == DrydenTurbulence.from_spec("moderate")
    # same as giving the WindModel itself
    model = WindModel(mean=3.2, turbulence=DrydenTurbulence.from_spec("moderate"))
    env2 = ResidualQuadEnv(wind=model, trajectory="helix")
    env2.reset(seed=3)
    assert np.array_equal(a, [env2.step(np.full(4, -0.2))[4]["wind"] for _ in range(40)])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"turbulence": "stormy"}, "light, moderate, severe"),
        ({"turbulence": 3.0}, "turbulence"),
        ({"turbulence": {"sigma_u": 1.0}}, "turbulence"),
    ],
)
def test_bad_turbulence_arguments_are_value_errors_listing_choices(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ResidualQuadEnv(**kwargs)


def test_one_gust_model_at_a_time():
    with pytest.raises(ValueError, match="sigma must be 0"):
        WindModel(sigma=1.0, turbulence=DrydenTurbulence.from_spec("light"))
    with pytest.raises(ValueError, match="DrydenTurbulence"):
        WindModel(turbulence="light")
    with pytest.raises(ValueError, match="altitude"):
        DrydenTurbulence.low_altitude(10.0, altitude=400.0)


@settings(max_examples=40, deadline=None)
@given(
    sigma=st.floats(0.0, 1e3),
    length=st.floats(1e-3, 1e4),
    airspeed=st.floats(1e-3, 1e3),
    mean=st.floats(0.0, 1e3),
)
def test_any_valid_turbulence_gives_finite_wind_and_flies_or_ends_flagged(
    sigma, length, airspeed, mean
):
    """Extreme time constants (1e-6 s to 1e7 s against the 2 ms step): finite samples, and the
    env flies or ends flagged."""
    spec = DrydenTurbulence(sigma, sigma, sigma, length, length, length, airspeed=airspeed)
    proc = WindProcess(WindModel(mean=mean, turbulence=spec), 0.002, np.random.default_rng(0))
    assert np.all(np.isfinite(proc.take(600)))
    env = ResidualQuadEnv(wind=(mean, 0.0), turbulence=spec, episode_s=0.05)
    env.reset(seed=0)
    for _ in range(5):
        *_, terminated, truncated, info = env.step(np.full(4, -0.22))
        assert np.all(np.isfinite(info["wind"]))
        if terminated or truncated:
            assert not terminated or info["diverged"]
            break


FIELDS = ["sigma_u", "sigma_v", "sigma_w", "length_u", "length_v", "length_w", "airspeed_floor"]
FIELDS += ["airspeed"]


@given(
    field=st.sampled_from(FIELDS),
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([-1.0, 0.0, 5e-324, 1e-300, 1e-3, 1e3, 1e6, 1e300]),
        st.text(),
    ),
)
def test_turbulence_fields_are_finite_and_in_range_or_refused(field, value):
    base = dict(SPEC.__dict__)
    base[field] = value
    low, high = (
        (0.0, 1e3)
        if field.startswith("sigma")
        else LENGTH_RANGE_M
        if field.startswith("length")
        else AIRSPEED_RANGE_MPS
    )
    ok = isinstance(value, float) and math.isfinite(value) and low <= value <= high
    ok = ok and (value > 0 or field.startswith("sigma"))
    if ok:
        assert getattr(DrydenTurbulence(**base), field) == value
    else:
        with pytest.raises(ValueError, match=field):
            DrydenTurbulence(**base)


@pytest.mark.parametrize(
    ("fields", "mean", "named"),
    [
        ({"length_u": 1e-300, "length_v": 1e-300, "length_w": 1e-300}, 3.2, "length_u"),
        ({"length_v": 1e-300}, 3.2, "length_v"),
        ({"length_w": 1e300}, 3.2, "length_w"),
        ({"airspeed": 1e300}, 3.2, "airspeed"),
        ({"airspeed": 1e-300}, 3.2, "airspeed"),
        ({"airspeed_floor": 1e300}, 0.0, "airspeed_floor"),
        ({}, 1e300, "wind mean"),
    ],
)
def test_scales_whose_filter_would_overflow_are_refused_at_construction(fields, mean, named):
    """Lengths of 1e-300 m (τ = L/V rounds to 0: a division by zero), an airspeed of 1e300 m/s
    (dt/τ overflows Q) or a mean wind sweeping the field at 1e300 m/s: a ValueError naming the
    argument when the turbulence, the wind or the env is built, not an OverflowError or a
    ZeroDivisionError at reset."""
    base = {**SPEC.__dict__, "airspeed": None, **fields}
    with pytest.raises(ValueError, match=named):
        WindModel(mean=mean, turbulence=DrydenTurbulence(**base))
    if not fields:  # the turbulence is valid: the env refuses the wind that sweeps it
        with pytest.raises(ValueError, match=named):
            ResidualQuadEnv(wind=(mean, 0.0), turbulence=DrydenTurbulence(**base))


@pytest.mark.parametrize("dt", [1e-5, 3600.0])  # the env's shortest and longest physics step
@pytest.mark.parametrize(
    ("length", "airspeed"),
    [(LENGTH_RANGE_M[0], AIRSPEED_RANGE_MPS[1]), (LENGTH_RANGE_M[1], AIRSPEED_RANGE_MPS[0])],
    ids=["shortest-tau", "longest-tau"],
)
def test_the_corners_of_the_accepted_scales_give_finite_stationary_gusts(length, airspeed, dt):
    """τ = L/V from 1e-6 s to 1e9 s against steps of 1e-5 s to 3600 s: finite coefficients and
    finite samples of the stationary variance's order."""
    spec = DrydenTurbulence(1.0, 1.0, 1.0, length, length, length, airspeed=airspeed)
    gusts = DrydenGusts(spec, 0.0, 0.0, dt, np.random.default_rng(0))
    phi, q = second_order_step(dt * airspeed / length)
    assert np.all(np.isfinite(phi)) and np.all(np.isfinite(q))
    x = gusts.next_block(2000)
    assert np.all(np.isfinite(x)) and np.abs(x).max() < 10.0
