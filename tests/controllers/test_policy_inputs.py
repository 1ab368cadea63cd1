"""The policy input spec and its stateful builder: the empty spec is today's features bit for bit,
the history and the error integral follow hand-computed sequences, the estimate is rotated into
the heading frame, a batch equals its rows, and bad specs are ``ValueError``s."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residual_quad import configs
from residual_quad.controllers.features import FEATURE_DIM, ppo_features, ppo_features_batch
from residual_quad.controllers.policy_inputs import (
    INTEGRAL_CLIP_M,
    INTEGRAL_TAU_S,
    MAX_ACTION_HISTORY,
    MAX_PREVIEW_K,
    FeatureSpec,
    LayoutError,
    PolicyInputs,
)
from residual_quad.envs.observation import OBS_DIM
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.training.ppo_config import FeatureConfig, PPOTrainConfig


def _obs(n: int, seed: int = 0) -> np.ndarray:
    """Plausible raw observations (n, OBS_DIM): random yaw, errors, rates, thrusts."""
    rng = np.random.default_rng(seed)
    o = rng.normal(0.0, 1.0, (n, OBS_DIM))
    for i in range(n):
        psi = rng.uniform(-math.pi, math.pi)
        c, s = math.cos(psi), math.sin(psi)
        o[i, L.rot] = np.array(((c, -s, 0.0), (s, c, 0.0), (0.0, 0.0, 1.0))).ravel()
    o[:, L.thrusts] = rng.uniform(0.0, 6.0, (n, 4))
    return o


def _yawed(psi: float, pos: tuple[float, float, float]) -> np.ndarray:
    """One observation at yaw ``psi`` (rad, level), position ``pos`` (m), reference at 0."""
    o = np.zeros(OBS_DIM)
    c, s = math.cos(psi), math.sin(psi)
    o[L.rot] = np.array(((c, -s, 0.0), (s, c, 0.0), (0.0, 0.0, 1.0))).ravel()
    o[L.pos] = pos
    o[L.thrusts] = 1.5
    return o


def test_the_empty_spec_is_todays_features_bit_for_bit():
    obs = _obs(7)
    spec = FeatureSpec()
    assert spec.empty and spec.dim() == FEATURE_DIM and spec.names(3) == spec.names()
    batch = PolicyInputs(spec, 7).features(obs, np.ones((7, 4)), np.ones((7, 3)))
    assert np.array_equal(batch, ppo_features_batch(obs)) and batch.dtype == np.float32
    rows = PolicyInputs(spec, 7, rowwise=True).features(obs)
    assert np.array_equal(rows, np.stack([ppo_features(o) for o in obs]))
    assert spec.layout_name() == f"base ({FEATURE_DIM})"


def test_names_and_layout_name_follow_the_spec():
    spec = FeatureSpec(action_history=2, error_integral=True, estimate=True)
    names = spec.names(4)
    assert len(names) == spec.dim(4) == FEATURE_DIM + 8 + 3 + 3
    assert names[FEATURE_DIM : FEATURE_DIM + 4] == (
        "action_0_0",
        "action_0_1",
        "action_0_2",
        "action_0_3",
    )
    assert names[-6:] == ("int_e_p_x", "int_e_p_y", "int_e_p_z", "est_a_x", "est_a_y", "est_a_z")
    assert spec.layout_name(3) == f"base + history 2 + integral + estimate ({FEATURE_DIM + 12})"
    assert FeatureSpec(preview_k=3).dim() == FEATURE_DIM + 18
    assert FeatureSpec.from_record(spec.to_record(), spec.preview_k) == spec
    assert FeatureSpec.from_record(None) == FeatureSpec()


def test_a_record_holds_the_preview_width_once():
    """The ``features`` record leaves the preview width to ``env_kwargs.preview`` (the file
    stores it once); a record written before (with ``preview_k``) loads when it agrees and is
    refused, naming both, when it does not."""
    spec = FeatureSpec(preview_k=4, action_history=2)
    record = spec.to_record()
    assert "preview_k" not in record
    assert FeatureSpec.from_record(record, 4) == spec
    assert FeatureSpec.from_record({**record, "preview_k": 4}, 4) == spec
    with pytest.raises(ValueError, match="preview_k 4 disagrees with the preview of 3 points"):
        FeatureSpec.from_record({**record, "preview_k": 4}, 3)
    assert FeatureSpec.from_record(None, 2) == FeatureSpec(preview_k=2)


def test_the_history_holds_the_last_actions_newest_first():
    inputs = PolicyInputs(FeatureSpec(action_history=3), 1, action_dim=2)
    obs = _obs(1)
    a = [np.array([[0.1, -0.1]]), np.array([[0.2, -0.2]]), np.array([[0.3, -0.3]])]
    seen = [inputs.features(obs, x)[0, FEATURE_DIM:] for x in (np.zeros((1, 2)), *a)]
    f32 = np.float32
    assert np.array_equal(seen[0], np.zeros(6, dtype=f32))
    assert np.array_equal(seen[1], np.array([0.1, -0.1, 0, 0, 0, 0], dtype=f32))
    assert np.array_equal(seen[2], np.array([0.2, -0.2, 0.1, -0.1, 0, 0], dtype=f32))
    assert np.array_equal(seen[3], np.array([0.3, -0.3, 0.2, -0.2, 0.1, -0.1], dtype=f32))
    inputs.reset_rows()
    assert np.array_equal(inputs.features(obs, a[0])[0, FEATURE_DIM + 2 :], np.zeros(4, f32))


def test_the_error_integral_is_a_leaky_clipped_heading_frame_average():
    period = 0.05  # s
    inputs = PolicyInputs(FeatureSpec(error_integral=True), 1, period_s=period)
    lam = math.exp(-period / INTEGRAL_TAU_S)
    # yaw 90°: a world error +x is -y in the heading frame
    obs = _yawed(math.pi / 2, (0.4, 0.0, -0.2))[None, :]
    for k in range(1, 6):
        z = inputs.features(obs)[0, FEATURE_DIM:]
        expected = (1.0 - lam**k) * np.array([0.0, -0.4, -0.2])
        assert np.allclose(z, expected, atol=1e-6), (k, z, expected)
    far = _yawed(0.0, (50.0, 0.0, 0.0))[None, :]
    for _ in range(2000):
        z = inputs.features(far)[0, FEATURE_DIM:]
    assert z[0] == np.float32(INTEGRAL_CLIP_M)  # clipped
    inputs.reset_rows(0)
    assert np.allclose(inputs.features(obs)[0, FEATURE_DIM:], (1 - lam) * np.array([0, -0.4, -0.2]))


def test_the_estimate_is_rotated_into_the_heading_frame_and_scaled():
    inputs = PolicyInputs(FeatureSpec(estimate=True), 1)
    obs = _yawed(math.pi / 2, (0.0, 0.0, 0.0))[None, :]
    est = inputs.features(obs, estimate=np.array([[5.0, 0.0, -2.5]]))[0, FEATURE_DIM:]
    assert np.allclose(est, [0.0, -1.0, -0.5], atol=1e-7)
    with pytest.raises(ValueError, match="needs the residual estimate"):
        inputs.features(obs)


def test_a_batch_equals_its_rows_with_subsets_and_resets():
    spec = FeatureSpec(action_history=2, error_integral=True, estimate=True)
    n = 4
    batch = PolicyInputs(spec, n)
    singles = [PolicyInputs(spec, 1) for _ in range(n)]
    rng = np.random.default_rng(3)
    for step in range(12):
        obs = _obs(n, seed=step)
        act = rng.uniform(-1, 1, (n, 4))
        est = rng.normal(0, 2, (n, 3))
        rows = np.flatnonzero(rng.random(n) < 0.7) if step % 3 else np.arange(n)
        if step == 6:
            batch.reset_rows(np.array([1, 2]))
            singles[1].reset_rows(), singles[2].reset_rows()
        got = batch.features(obs[rows], act[rows], est[rows], rows=rows)
        for k, i in enumerate(rows):
            want = singles[i].features(obs[i : i + 1], act[i : i + 1], est[i : i + 1])
            assert np.array_equal(got[k], want[0]), (step, i)


def test_observations_of_another_width_name_both_layouts():
    inputs = PolicyInputs(FeatureSpec(preview_k=2), 1)
    with pytest.raises(
        LayoutError,
        match=r"trained on base \+ preview 2 \(47\).*48 values.*flown on .*36 values \(base\)",
    ):
        inputs.features(np.zeros((1, OBS_DIM)))


BAD_SPECS = [
    ({"preview_k": -1}, "preview_k must be an integer"),
    ({"preview_k": MAX_PREVIEW_K + 1}, "preview_k must be an integer"),
    ({"action_history": 1.5}, "action_history must be an integer"),
    ({"action_history": True}, "action_history must be an integer"),
    ({"action_history": MAX_ACTION_HISTORY + 1}, "action_history must be an integer"),
    ({"error_integral": 1}, "error_integral must be true or false"),
    ({"estimate": "yes"}, "estimate must be true or false"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_SPECS)
def test_bad_spec_values_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FeatureSpec(**kwargs)
    with pytest.raises(ValueError, match=message):
        FeatureSpec.from_record(kwargs)
    with pytest.raises(ValueError, match=message):
        FeatureConfig(**kwargs)


@settings(max_examples=40, deadline=None)
@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))
def test_integer_spec_values_are_checked_for_any_value(k, h):
    ok = 0 <= k <= MAX_PREVIEW_K and 0 <= h <= MAX_ACTION_HISTORY
    if ok:
        assert FeatureSpec(k, h).dim() == FEATURE_DIM + 6 * k + 4 * h
    else:
        with pytest.raises(ValueError, match="must be an integer in"):
            FeatureSpec(k, h)


def test_bad_records_and_configs_are_value_errors():
    with pytest.raises(ValueError, match="features must be an object"):
        FeatureSpec.from_record([1])
    with pytest.raises(ValueError, match=r"features keys \['history'\] unknown"):
        FeatureSpec.from_record({"history": 2})
    with pytest.raises(
        ValueError, match="features.estimate needs controller 'ppo_adapt', 'ppo_res' or 'ppo_acc'"
    ):
        PPOTrainConfig(features=FeatureConfig(estimate=True))
    with pytest.raises(ValueError, match="ppo_adapt .* features.estimate true"):
        PPOTrainConfig(controller="ppo_adapt")
    with pytest.raises(ValueError, match="ppo_adapt .* action_mode 'rotor'"):
        PPOTrainConfig(
            controller="ppo_adapt", action_mode="ctbr", features=FeatureConfig(estimate=True)
        )
    with pytest.raises(ValueError, match="estimate_feedforward needs controller 'ppo_adapt'"):
        PPOTrainConfig(estimate_feedforward=True)
    adapt = {"controller": "ppo_adapt", "features": FeatureConfig(estimate=True)}
    with pytest.raises(ValueError, match="estimate_feedforward must be true or false, got 1"):
        PPOTrainConfig(estimate_feedforward=1, **adapt)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="0 preview points but features.preview_k is 2"):
        PPOTrainConfig(features=FeatureConfig(preview_k=2))
    with pytest.raises(ValueError, match=r"features: unknown key\(s\) \['history'\]"):
        configs.load(PPOTrainConfig, {"features": {"history": 2}})
    written = {"preview_k": 10, "action_history": 4, "error_integral": True, "estimate": True}
    loaded = configs.load(
        PPOTrainConfig,
        {"controller": "ppo_adapt", "env_kwargs": {"preview": [10, 0.06]}, "features": written},
    )
    assert loaded.features.spec() == FeatureSpec(10, 4, True, True) == FeatureSpec(**written)
    with pytest.raises(ValueError, match="period_s"):
        PolicyInputs(FeatureSpec(), 1, period_s=0.0)
