"""``controller_defaults`` of a sweep config: one option set given once reaches every controller
that declares it, and loses to what an entry sets itself."""

from __future__ import annotations

import pytest

from residual_quad import configs
from residual_quad.evaluation.sweep.config import SweepConfig

LAG_TUNED = {
    "attitude": {"wn_rp": 10.0, "zeta_rp": 1.2, "wn_yaw": 2.0, "zeta_yaw": 1.0, "max_tilt": 0.44},
    "rotor_tau_s": 0.06,
}


@pytest.mark.parametrize("name", ["sweep_realistic", "sweep_realistic_20"])
def test_the_realistic_configs_need_no_gain_block(name):
    """The trackers' lag-tuned set comes from the plant they are told (their defaults), so the
    realistic configs give options only to the policies (which policy file to fly)."""
    cfg = configs.load(SweepConfig, name)
    assert cfg.controller_defaults == {}
    assert cfg.controller_options == {
        "ppo": {"plant": "realistic"},
        "ppo_res": {"plant": "realistic"},
    }


def test_an_entrys_own_options_win_over_the_defaults():
    cfg = SweepConfig(
        controllers=["geo", "geo:kp=15,rotor_tau_s=0.03", "pid"],
        payloads=["none"],
        winds=["calm"],
        trajectories=["hover"],
        seeds=[0],
        episode_s=1.0,
        controller_defaults={"rotor_tau_s": 0.06, "kp": 18.0},
        controller_options={"pid": {"kp": 25.0}},
        series=[],
    )
    opts = cfg.controller_options
    assert opts["geo"] == {"rotor_tau_s": 0.06, "kp": 18.0}
    assert opts["pid"] == {"rotor_tau_s": 0.06, "kp": 25.0}  # controller_options win
    assert opts.get("geo:kp=15,rotor_tau_s=0.03", {}) == {}  # the spec's own options win


def test_a_default_no_controller_takes_is_named():
    with pytest.raises(ValueError, match="controller_defaults: no controller takes rotor_tau"):
        SweepConfig(
            controllers=["geo"],
            payloads=["none"],
            winds=["calm"],
            trajectories=["hover"],
            seeds=[0],
            episode_s=1.0,
            controller_defaults={"rotor_tau": 0.06},
            series=[],
        )


def test_a_narrowed_matrix_keeps_a_default_only_left_out_controllers_take():
    """``sweep_realistic`` narrowed to ``pid`` (``--controllers``): hnewton's ``max_tilt``
    default reaches nobody and is no error; ``pid`` gets the rest."""
    from residual_quad.controllers.specs import parse_spec
    from residual_quad.evaluation.sweep.config import with_defaults

    defaults = {**LAG_TUNED, "max_tilt": 0.44}
    out = with_defaults(defaults, {}, {"pid": parse_spec("pid")})
    assert out == {"pid": LAG_TUNED}
