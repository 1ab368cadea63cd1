"""The trackers' defaults follow the rotors they are told about (``ControlContext.rotor_tau_s``):
the source's gains for ideal rotors (every committed row of the ideal plant), the lag-tuned set and
the rotor model behind lag — so ``make_controller(name, env)`` flies the realistic plant with no
option, where the ideal plant's gains crash."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import pytest

import residual_quad  # noqa: F401  (registers ResidualQuad-v0)
from residual_quad.controllers import make_controller
from residual_quad.controllers.attitude import (
    LAG_BANDWIDTH,
    LAG_TUNED_GAINS,
    AttitudeGains,
    default_attitude_gains,
)
from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.batch import make_batch_controller
from residual_quad.controllers.feedforward import LAG_FF_LEAD_S
from residual_quad.controllers.residual.trackers import LAG_ESTIMATE_TAU_S
from residual_quad.episode import build_controller, control_context, run_episode

TRACKERS = ["pid", "geo", "geo_res", "geo_rls", "geo_rls_dob", "hnewton", "hnewton_rls"]
LAGGED = ControlContext(rotor_tau_s=0.06)
#: the scheduled gains behind 60 ms rotors: no latency, and the realistic preset's period each way
LAGGED_GAINS = default_attitude_gains(0.06)
REALISTIC_GAINS = default_attitude_gains(0.06, 0.02)


@pytest.mark.parametrize("name", TRACKERS)
def test_ideal_rotors_keep_the_source_gains_and_lag_brings_the_lag_tuned_set(name):
    ideal = make_controller(name)
    assert ideal.inner.gains == AttitudeGains() and ideal.rotor_model is None
    lagged = make_controller(name, LAGGED)
    assert lagged.inner.gains == LAGGED_GAINS
    assert (ideal.attitude_loop, ideal.indi) == ("pd", None)
    assert lagged.attitude_loop == "indi" and lagged.indi.adapt == 0.02
    assert (ideal.inner.mixer, lagged.inner.mixer) == ("squeeze", "desaturate")
    # the feed-forward's lead: behind lag for the trackers with a residual estimate only
    assert ideal.lead is None
    if name in ("geo_res", "geo_rls", "geo_rls_dob", "hnewton_rls"):
        assert lagged.lead.lead_s == LAG_FF_LEAD_S == 0.15
        assert make_controller(name, LAGGED, ff_lead_s=0.0).lead is None
    else:
        assert lagged.lead is None
    if name in ("geo_res", "geo_rls", "geo_rls_dob", "hnewton_rls"):  # along the commanded axis
        assert ideal.config.thrust_axis == "achieved"
        assert lagged.config.thrust_axis == "commanded"
        # and low-passed at 0.2 s (geo_res's own filter on both plants)
        assert ideal.config.output_filter.tau == (0.2 if name == "geo_res" else 0.0)
        assert lagged.config.output_filter.tau == LAG_ESTIMATE_TAU_S == 0.2
    assert lagged.rotor_model is not None and lagged.rotor_model.tau_s == 0.06
    batch = make_batch_controller(name, 2, LAGGED)
    assert batch.inner.gains == LAGGED_GAINS and batch.rotor_model.tau_s == 0.06
    if name.startswith("hnewton"):  # its own tilt bound (rad) follows too
        assert ideal.params.max_tilt == pytest.approx(math.radians(40.0))
        assert lagged.params.max_tilt == LAG_TUNED_GAINS.budget_tilt == math.radians(35.0)


def test_the_roll_pitch_bandwidth_is_scheduled_on_the_lag():
    """``ω_n = LAG_BANDWIDTH / (τ + dead/2)`` between the hand-tuned 10 rad/s and the source's
    18; every other gain the lag-tuned set's; ideal rotors keep the source's set."""
    assert default_attitude_gains(0.0) == default_attitude_gains(0.0, 0.04) == AttitudeGains()
    assert REALISTIC_GAINS.wn_rp == pytest.approx(LAG_BANDWIDTH / 0.07)
    assert dataclasses.replace(REALISTIC_GAINS, wn_rp=LAG_TUNED_GAINS.wn_rp) == LAG_TUNED_GAINS
    assert default_attitude_gains(0.08, 0.04) == LAG_TUNED_GAINS  # the floor: the slowest plants
    assert default_attitude_gains(0.02).wn_rp == AttitudeGains().wn_rp  # the cap: the source's
    taus = [0.01, 0.02, 0.04, 0.06, 0.08, 0.12]
    for dead in (0.0, 0.02, 0.04):  # stiffer for less lag, never stiffer for more
        wn = [default_attitude_gains(tau, dead).wn_rp for tau in taus]
        assert wn == sorted(wn, reverse=True) and wn[0] > wn[-1]


@pytest.mark.parametrize("name", ["pid", "geo_rls", "hnewton", "hnewton_rls"])
def test_an_explicit_option_wins_over_the_plants_default(name):
    own = AttitudeGains(wn_rp=12.0)
    ctl = make_controller(name, LAGGED, attitude=own, rotor_tau_s=0.0)
    assert ctl.inner.gains == own and ctl.rotor_model is None
    ctl = make_controller(name, ControlContext(), rotor_tau_s=0.03)  # a model, ideal gains
    assert ctl.inner.gains == AttitudeGains() and ctl.rotor_model.tau_s == 0.03
    if name == "hnewton":
        assert make_controller(name, LAGGED, max_tilt=0.6).params.max_tilt == 0.6
    if not name.startswith("hnewton"):  # hnewton allocates with its prioritized allocator
        assert make_controller(name, LAGGED, mixer="squeeze").inner.mixer == "squeeze"
    if name in ("geo_rls", "hnewton_rls"):  # the estimate's low-pass: a flat tau or its section
        assert make_controller(name, LAGGED, tau=0.0).config.output_filter.tau == 0.0
        section = make_controller(name, LAGGED, output_filter={"tau": 0.05})
        assert section.config.output_filter.tau == 0.05


def test_behind_slow_rotors_the_loaded_take_off_needs_the_desaturating_mixer():
    """80 ms rotors behind two periods each way, the held-out 0.75 kg payload, gusts: the
    default build (the desaturating mixer) flies the take-off; the same tracker with the
    squeeze, all four rotors at their limit and no torque left, tips over."""
    plant = dict(preset="realistic", rotor_tau_s=0.08, action_delay_steps=2, obs_delay_steps=2)
    scenario = dict(payload="extra", wind="windy", trajectory="figure8", seed=0, episode_s=4.0)
    flown = run_episode("geo_rls", **scenario, **plant)
    assert flown.termination is None and flown.rmse < 0.1
    squeezed = run_episode("geo_rls:mixer=squeeze", **scenario, **plant)
    assert squeezed.termination == "tilt"


def test_every_way_to_build_a_controller_tells_it_the_plants_rotors():
    """The env, the env settings (sweeps, ``build_controller``) and a spec flown by
    ``run_episode`` all carry the preset's and the explicit rotor time constant and latencies."""
    assert control_context({}).rotor_tau_s == 0.0
    real = control_context({"preset": "realistic"})
    assert (real.rotor_tau_s, real.obs_delay_steps, real.action_delay_steps) == (0.06, 1, 1)
    assert control_context({"preset": "realistic", "action_delay_steps": 2}).action_delay_steps == 2
    assert control_context({"preset": "realistic", "rotor_tau_s": 0.02}).rotor_tau_s == 0.02
    assert control_context({"preset": "realistic", "rotor_tau_s": 0.0}).rotor_tau_s == 0.0
    with pytest.raises(ValueError, match="unknown preset 'real'; valid choices"):
        control_context({"preset": "real"})
    env = gym.make("ResidualQuad-v0", preset="realistic")
    assert ControlContext.from_env(env).rotor_tau_s == 0.06
    assert ControlContext.from_env(env).obs_delay_steps == 1
    assert make_controller("geo", env).inner.gains == REALISTIC_GAINS
    env.close()
    built = build_controller("pid", {"preset": "realistic"})
    assert built.inner.gains == REALISTIC_GAINS and built.rotor_model.tau_s == 0.06


def test_the_residual_pilot_keeps_the_gains_it_trains_with():
    """``ppo_res``'s core is part of its training: a policy file's gains (``None``: the
    source's), never the plant's defaults: no rotor model, the PD loop, no latency predictor."""
    from residual_quad.controllers.ppo_res import ResidualPPOController

    pilot = ResidualPPOController.corrected(accel_scale=4.0, context=LAGGED, tracker="pid")
    assert pilot.inner.gains == AttitudeGains() and pilot.rotor_model is None
    assert pilot.attitude_loop == "pd" and pilot.indi is None and pilot.predictor is None
    own = ResidualPPOController.corrected(4.0, LAGGED, tracker="pid", attitude=LAG_TUNED_GAINS)
    assert own.inner.gains == LAG_TUNED_GAINS and own.rotor_model is None


@pytest.mark.parametrize("name", ["pid", "geo_rls"])
def test_the_defaults_fly_the_realistic_plant_where_the_ideal_gains_crash(name):
    """Extra payload, gusts, helix on the realistic plant: the default build flies the episode;
    the same controller with the ideal plant's defaults (the source's gains, the PD loop, no
    rotor model: what it got before) does not."""
    scenario = dict(payload="extra", wind="windy", trajectory="helix", episode_s=6.0)
    flown = run_episode(name, seed=0, preset="realistic", **scenario)
    assert not flown.diverged and flown.termination is None and flown.rmse < 0.5
    ideal_gains = make_controller(
        name, LAGGED, attitude=AttitudeGains(), rotor_tau_s=0.0, attitude_loop="pd"
    )
    crashed = run_episode(ideal_gains, seed=0, preset="realistic", **scenario)
    assert crashed.diverged or crashed.termination is not None


def test_an_env_that_reports_no_plant_options_gets_the_ideal_defaults():
    """A remote env (``ResidualQuadRemote-v0``) knows its nominal airframe and control period but
    not the server's plant options: its controllers are built for ideal rotors, as before."""
    from types import SimpleNamespace

    from residual_quad.envs.airframe import Airframe

    remote_like = SimpleNamespace(nominal=Airframe(), control_dt=0.02)
    context = ControlContext.from_env(remote_like)
    assert (context.rotor_tau_s, context.obs_delay_steps, context.action_delay_steps) == (0, 0, 0)
    assert context.control_dt == 0.02
    assert make_controller("pid", remote_like).inner.gains == AttitudeGains()
    with pytest.raises(ValueError, match="is not a ResidualQuad environment"):
        ControlContext.from_env(SimpleNamespace(control_dt=0.01))
    lagged = ControlContext(rotor_tau_s=0.06, obs_delay_steps=1, action_delay_steps=2)
    assert lagged.ideal() == ControlContext(airframe=lagged.airframe)
