"""The MuJoCo model: the payload body keeps mass and inertia consistent (Steiner, [RES §3.3])."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from residual_quad.envs.disturbances import PAYLOAD_LEVELS
from residual_quad.envs.model import BODY, PAYLOAD_BODY, build_model


# ------------------------------------------------------------------------------------ payload
@pytest.mark.parametrize("level", list(PAYLOAD_LEVELS))
def test_payload_subtree_mass(level):
    model = build_model(payload_kg=PAYLOAD_LEVELS[level])
    quad = model.body(BODY).id
    assert model.body_subtreemass[quad] == pytest.approx(0.95 + PAYLOAD_LEVELS[level], abs=1e-12)


def test_payload_inertia_consistent_with_parallel_axis():
    """Composite inertia about the joint COM equals frame + point-ish sphere by Steiner's rule."""
    m_f, m_p, d, r = 0.95, 0.75, 0.10, 0.03
    model = build_model(payload_kg=m_p)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    quad = model.body(BODY).id
    load = model.body(PAYLOAD_BODY).id
    # MuJoCo's view: each body's inertia about its own COM, and its COM position
    assert model.body_mass[load] == pytest.approx(m_p)
    assert model.body_inertia[load] == pytest.approx([0.4 * m_p * r * r] * 3)
    assert model.body_inertia[quad] == pytest.approx([7.5e-3, 7.5e-3, 1.3e-2])
    # composite about the combined COM, by hand
    z_c = -m_p * d / (m_f + m_p)
    ixx = 7.5e-3 + 0.4 * m_p * r * r + m_f * z_c**2 + m_p * (d + z_c) ** 2
    assert data.subtree_com[quad][2] - data.xpos[quad][2] == pytest.approx(z_c)
    # composite from MuJoCo's mass matrix: rotational block of the free joint about the body origin
    M = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, M)
    ixx_origin = M[3, 3]  # about the frame origin, body x axis
    assert ixx_origin == pytest.approx(ixx + (m_f + m_p) * z_c**2, rel=1e-9)
    ratio = ixx / 7.5e-3
    assert 1.5 < ratio < 1.7  # [RES §3.3]: "about 1.6x" for +0.75 kg


# ------------------------------------------------------------------------------------ the cache
def test_a_model_built_again_is_a_fresh_compile_and_its_own():
    """Built models are compiled once per arguments and copied: every array of a second build
    equals a fresh compile's, and no build shares memory with another or with the cache."""
    from residual_quad.envs.model import build_spec

    first = build_model(payload_kg=0.35, rotor_tau_s=0.03)
    second = build_model(payload_kg=0.35, rotor_tau_s=0.03)
    fresh = build_spec(payload_kg=0.35, rotor_tau_s=0.03).compile()
    arrays = [n for n in dir(fresh) if isinstance(getattr(fresh, n, None), np.ndarray)]
    assert len(arrays) > 100
    for name in arrays:
        np.testing.assert_array_equal(getattr(second, name), getattr(fresh, name), err_msg=name)
    assert second.opt.timestep == fresh.opt.timestep and second.na == fresh.na == 4
    second.body_mass[:] = 7.0
    second.opt.timestep = 0.1
    assert first.body_mass[1] == pytest.approx(0.95) and first.opt.timestep == fresh.opt.timestep
    third = build_model(payload_kg=0.35, rotor_tau_s=0.03)
    np.testing.assert_array_equal(third.body_mass, fresh.body_mass)
    assert build_model(payload_kg=0.4).body_mass.sum() != third.body_mass.sum()  # its own key


def test_bad_build_arguments_are_refused_every_time():
    for _ in range(2):  # not cached: the second call refuses as the first did
        with pytest.raises(ValueError, match="payload must be >= 0 kg"):
            build_model(payload_kg=-0.1)
