"""Training off the evaluation matrix (``trajectory_draw: randomized``): random trajectories drawn
with ``rquad tune``'s draw, env seeds from 10 000 up; ``fixed`` (the default) is today's draw."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("stable_baselines3")

from residual_quad import configs  # noqa: E402
from residual_quad.controllers.policy_file import read_meta  # noqa: E402
from residual_quad.envs.disturbances import PAYLOAD_LEVELS, resolve_payload  # noqa: E402
from residual_quad.envs.trajectories import TRAJECTORIES  # noqa: E402
from residual_quad.envs.vector_env import ResidualQuadVectorEnv  # noqa: E402
from residual_quad.training.ppo import train  # noqa: E402
from residual_quad.training.ppo_config import (  # noqa: E402
    FocusDraw,
    PPOHyperparams,
    PPOTrainConfig,
)
from residual_quad.training.ppo_model import make_training_env, training_sampler  # noqa: E402
from residual_quad.training.ppo_vec import ScenarioSampler, _MaskedVectorEnv  # noqa: E402
from residual_quad.training.scenarios import (  # noqa: E402
    FIRST_OFF_MATRIX_SEED,
    TRAJECTORY_RANGES,
    OffMatrixSampler,
    draw_trajectory,
    trajectory_ranges,
)
from residual_quad.training.tune import TuneConfig, tuning_scenarios  # noqa: E402

#: the evaluation matrix: its trajectories fly with their default parameters from seeds 0–19
MATRIX_TRAJECTORIES = ("hover", "helix", "figure8")
MATRIX_SEEDS = range(20)
FAMILIES = ["hover", "helix", "figure8", "lissajous", "spline"]
#: the shipped training configs that train on the matrix's own trajectories (the first recipes,
#: kept for the ablation and the realistic plant; the shipped rows' configs train off it)
SHIPPED_TRAINING = (
    "ppo_memoryless",
    "ppo_realistic",
    "ppo_res_matrix",
    "sac",
)


def _config(**kw) -> PPOTrainConfig:
    base = {
        "seed": 3,
        "n_envs": 4,
        "env_threads": 1,
        "payloads": ["none", "light", "heavy", 0.6],
        "trajectories": FAMILIES,
        "trajectory_draw": "randomized",
        "ppo": PPOHyperparams(n_steps=64, batch_size=128, n_epochs=1),
        "total_steps": 256,
    }
    return PPOTrainConfig(**{**base, **kw})


def _is_default(trajectory) -> bool:
    """Every parameter of ``trajectory`` at its class default (the matrix's trajectory)."""
    return trajectory == type(trajectory)()


def test_tune_draws_its_scenarios_with_the_shared_draw():
    """The refactor kept ``rquad tune``'s scenarios: pinned values of seed 0 (drawn before the
    draw moved to training/scenarios.py), and each is the shared draw followed by the payload
    and the wind from the same generator."""
    scenarios = tuning_scenarios(TuneConfig(seed=0))
    first, second = scenarios[0], scenarios[1]
    assert (first.trajectory, first.params, first.payload_kg, first.wind, first.seed) == (
        "helix",
        (("radius", 1.228978), ("period", 7.290649)),
        0.277982,
        "windy",
        FIRST_OFF_MATRIX_SEED,
    )
    assert second.params == (("size", 2.580668), ("period", 18.673978), ("seed", 131498714))
    cfg = TuneConfig(scenarios=40, seed=5)
    rng = np.random.default_rng([cfg.seed, 0x7E])  # tune's generator
    for s in tuning_scenarios(cfg):
        drawn = draw_trajectory(rng, cfg.trajectories)
        assert (drawn.name, drawn.params, drawn.offset_m) == (s.trajectory, s.params, s.offset_m)
        assert round(float(rng.uniform(*cfg.payload_kg)), 6) == s.payload_kg
        assert cfg.winds[int(rng.integers(len(cfg.winds)))] == s.wind


def test_randomized_training_never_draws_a_matrix_scenario():
    """Over 3 000 sampled episodes: every family and condition comes up, no trajectory flies the
    matrix's default parameters (a hover starts off its point), every payload is lighter than
    the held-out extra; the same generator state gives the same episode."""
    cfg = _config()
    sampler = training_sampler(cfg)
    assert isinstance(sampler, OffMatrixSampler)
    rng = np.random.default_rng(0)
    names, payloads = set(), set()
    for _ in range(3000):
        scenario = sampler(rng)
        trajectory = scenario["trajectory"]
        assert type(trajectory) is TRAJECTORIES[trajectory.name]
        names.add(trajectory.name)
        payloads.add(scenario["payload"])
        assert resolve_payload(scenario["payload"]) < PAYLOAD_LEVELS["extra"]
        if trajectory.name == "hover":  # the matrix's hover point, never from its start
            assert np.any(scenario["options"]["position_offset"] != 0.0)
        else:  # every drawn parameter off its default
            assert not _is_default(trajectory)
            default = type(trajectory)()
            for key in TRAJECTORY_RANGES[trajectory.name]:
                assert getattr(trajectory, key) != getattr(default, key), (trajectory, key)
    assert names == set(FAMILIES) and payloads == {"none", "light", "heavy", 0.6}
    state = np.random.default_rng(11)
    a, b = sampler(state), sampler(np.random.default_rng(11))
    assert a["trajectory"] == b["trajectory"] and a["payload"] == b["payload"]


def test_randomized_training_envs_are_seeded_off_the_matrix():
    """Every env seed of a randomized run is >= 10 000 — after ``seed(s)`` (a new run, and a
    resume's ``seed + steps``) and on a first reset without one — and the envs fly the sampler's
    random trajectories through their autoresets (no env is reseeded there)."""
    cfg = _config(episode_s=0.3, max_position_error=0.3)
    for seed in (None, 0, cfg.seed, 123_456):
        venv = make_training_env(cfg)
        if seed is not None:
            venv.seed(seed)
        venv.reset()
        quad = venv.venv
        seeds = [env.np_random_seed for env in quad.vector_env.envs]
        assert min(seeds) >= FIRST_OFF_MATRIX_SEED and not set(seeds) & set(MATRIX_SEEDS)
        assert seeds == [FIRST_OFF_MATRIX_SEED + (seed or 0) + i for i in range(4)]
        if seed == cfg.seed:
            generators = [env.np_random for env in quad.vector_env.envs]  # seeded just now
            rng = np.random.default_rng(1)
            flown, ends = set(), 0
            for _ in range(150):  # 0.3 s episodes: many autoresets
                _, _, dones, infos = venv.step(rng.uniform(-0.2, 0.0, (4, 4)).astype(np.float32))
                ends += int(dones.sum())
                flown |= {info["scenario"][2] for info in infos}
                for i, env in enumerate(quad.vector_env.envs):
                    assert not _is_default(env.trajectory) or env.trajectory.name == "hover"
                    assert env.np_random is generators[i]  # continued, never reseeded
            assert flown == set(FAMILIES) and ends > 20
        venv.close()


def test_the_shipped_rl_rows_train_off_the_matrix():
    """The configs of the shipped RL rows (``ppo``, ``ppo_adapt``, ``ppo_acc``, ``ppo_res``) and
    ``ppo_res_realistic`` draw randomized trajectories of every family and seed their envs from
    10 000: no training episode is a scenario the matrix flies."""
    for name in ("ppo", "ppo_adapt", "ppo_acc", "ppo_res", "ppo_res_realistic"):
        cfg = configs.load(PPOTrainConfig, name)
        assert cfg.trajectory_draw == "randomized" and cfg.env_seed_offset() == 10_000
        assert set(cfg.trajectories) == {"hover", "helix", "figure8", "lissajous", "spline"}
        assert type(training_sampler(cfg)) is not ScenarioSampler


def test_fixed_is_todays_draw_for_every_shipped_config():
    """``trajectory_draw: fixed`` (the default, the shipped training configs of the first
    recipes) builds the old
    :class:`ScenarioSampler` over the same lists — its draws those of a fresh one — and seeds
    env ``i`` with ``seed + i`` as before."""
    for name in SHIPPED_TRAINING:
        cfg = configs.load(PPOTrainConfig, name)
        assert cfg.trajectory_draw == "fixed" and cfg.env_seed_offset() == 0
        sampler = training_sampler(cfg)
        assert type(sampler) is ScenarioSampler
        old = ScenarioSampler(cfg.payloads, cfg.winds, cfg.trajectories, cfg.start_pos_noise)
        ra, rb = np.random.default_rng(7), np.random.default_rng(7)
        for _ in range(300):
            a, b = sampler(ra), old(rb)
            assert a.keys() == b.keys() and all(
                np.array_equal(a[k], b[k]) if k == "options" else a[k] == b[k] for k in a
            )
            assert isinstance(a["trajectory"], str)
    cfg = _config(trajectory_draw="fixed", trajectories=["hover", "helix", "figure8"])
    venv = make_training_env(cfg)
    venv.seed(2)
    venv.reset()
    assert [env.np_random_seed for env in venv.venv.vector_env.envs] == [2, 3, 4, 5]
    assert all(isinstance(sc["trajectory"], str) for sc in venv.venv.vector_env.scenarios)
    venv.close()


def test_a_random_trajectory_per_episode_keeps_the_env_pool_bounded():
    """The adapter's env reuse takes a random trajectory per episode without building (or
    keeping) an env each time: one spare env per (payload, wind) after some 70 episodes, and
    the same observations as the vector env's own autoreset, which builds every env."""
    sampler = OffMatrixSampler(["light"], ["windy"], FAMILIES, 0.1)
    first = [sampler(np.random.default_rng(i)) for i in range(3)]
    kw = {
        "scenarios": first,
        "sampler": sampler,
        "nthread": 1,
        "episode_s": 0.2,
        "max_position_error": 0.25,
        "pos_noise": 0.01,
    }
    mine, theirs = _MaskedVectorEnv(3, **kw), ResidualQuadVectorEnv(3, **kw)
    a, _ = mine.reset(seed=5)
    b, _ = theirs.reset(seed=5)
    assert np.array_equal(a, b)
    rng = np.random.default_rng(2)
    episodes = 0
    built = {id(env) for env in mine.envs}
    for _ in range(400):
        actions = rng.uniform(-0.3, 0.0, (3, 4))
        a, ra, ta, ua, _ = mine.step(actions)
        b, rb, *_ = theirs.step(actions)
        assert np.array_equal(a, b) and np.array_equal(ra, rb)
        episodes += int(np.sum(ta | ua))
        built |= {id(env) for env in mine.envs}
    assert episodes > 60
    assert [sc["trajectory"] for sc in mine.scenarios] == [
        sc["trajectory"] for sc in theirs.scenarios
    ]
    assert sum(len(v) for v in mine._spare.values()) == 1 and len(built) == 4
    mine.close(), theirs.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trajectory_draw: random\n", "trajectory_draw must be one of ['fixed', 'randomized']"),
        ("trajectory_draw: randomized\ntrajectories: [hover, spiral]\n", "unknown trajectories"),
        ("trajectory_draw: [randomized]\n", "trajectory_draw: expected a string"),
    ],
)
def test_a_bad_trajectory_draw_names_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"mine\.yaml") as err:
        configs.load(PPOTrainConfig, path)
    assert message in str(err.value)


def test_families_without_ranges_are_refused():
    with pytest.raises(ValueError, match=r"trajectories: unknown \['spiral'\]; valid choices"):
        OffMatrixSampler(["none"], ["calm"], ["helix", "spiral"])
    with pytest.raises(ValueError, match="trajectories must list at least one of hover"):
        OffMatrixSampler(["none"], ["calm"], [])


def test_trajectory_ranges_replace_only_the_named_ranges():
    """No override draws today's trajectories bit for bit; an override moves only its own
    parameter into its range and keeps the draw order (the same generator state, the same
    family, the same other parameters)."""
    assert trajectory_ranges() == TRAJECTORY_RANGES
    faster = trajectory_ranges({"helix": {"period": [4.0, 5.0]}})
    assert faster["helix"] == {"radius": TRAJECTORY_RANGES["helix"]["radius"], "period": (4.0, 5.0)}
    assert list(faster["helix"]) == list(TRAJECTORY_RANGES["helix"])  # the draw order
    rng_a, rng_b, rng_c = (np.random.default_rng(11) for _ in range(3))
    helices = 0
    for _ in range(300):
        base = draw_trajectory(rng_a, FAMILIES)
        assert draw_trajectory(rng_b, FAMILIES, trajectory_ranges()) == base
        mine = draw_trajectory(rng_c, FAMILIES, faster)
        assert mine.name == base.name
        if mine.name != "helix":
            assert mine == base
            continue
        helices += 1
        params, theirs = dict(mine.params), dict(base.params)
        assert params["radius"] == theirs["radius"] and 4.0 <= params["period"] <= 5.0
    assert helices > 30


def test_a_training_config_draws_from_its_trajectory_ranges():
    sampler = training_sampler(_config(trajectory_ranges={"figure8": {"period": [6.0, 6.5]}}))
    rng = np.random.default_rng(2)
    periods = [
        s["trajectory"].period
        for s in (sampler(rng) for _ in range(200))
        if type(s["trajectory"]).__name__ == "Figure8"
    ]
    assert len(periods) > 20 and all(6.0 <= p <= 6.5 for p in periods)


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({"spiral": {"period": [1, 2]}}, "unknown family 'spiral'; valid choices: hover, helix"),
        ({"helix": {"perid": [1, 2]}}, "helix: unknown parameter 'perid'; valid: radius, period"),
        ({"hover": {"x": [1, 2]}}, "valid: none (a hover draws only its start offset)"),
        ({"helix": {"period": [3.0, 2.0]}}, "helix.period must have low < high"),
        ({"helix": {"period": [8.0, 8.0]}}, "helix.period must have low < high"),
        ({"helix": {"period": [0.0, 2.0]}}, "helix.period: helix period must be a finite real"),
        ({"helix": {"period": [1e-7, 2.0]}}, "helix.period: helix period must be a finite real"),
        ({"helix": {"period": [1.0]}}, "trajectory_ranges.helix.period"),
        ({"helix": {"period": [1.0, float("inf")]}}, "trajectory_ranges.helix.period"),
        ({"lissajous": {"period": [10.0, 12.0]}}, "['lissajous'] not drawn"),
    ],
)
def test_bad_trajectory_ranges_are_named(ranges, message):
    with pytest.raises(ValueError) as err:
        _config(trajectories=["hover", "helix"], trajectory_ranges=ranges)
    assert message in str(err.value)


def test_trajectory_ranges_need_the_randomized_draw():
    with pytest.raises(ValueError, match="needs trajectory_draw: randomized, not 'fixed'"):
        _config(trajectory_draw="fixed", trajectory_ranges={"helix": {"period": [4.0, 5.0]}})


#: a focus draw: heavy vehicles behind fast helices and figure-8s, calm air only
FOCUS = FocusDraw(
    fraction=0.25,
    payloads=[0.6, 0.65],
    winds=["calm"],
    trajectories=["helix", "figure8"],
    trajectory_ranges={"helix": {"period": [4.0, 5.0]}},
)


def _is_focus(scenario) -> bool:
    trajectory = scenario["trajectory"]
    return (
        scenario["payload"] in (0.6, 0.65)
        and scenario["wind"] == "calm"
        and (
            trajectory.name == "figure8"
            or (trajectory.name == "helix" and trajectory.period <= 5.0)
        )
    )


def test_a_focus_draws_its_share_from_its_own_lists():
    """A quarter of 4 000 episodes from the focus's lists and ranges (its helices fast, its
    figure-8s on the main ranges), the rest as the main lists draw them; the main helices keep
    the main periods. With no focus, no extra number is drawn: the same generator state gives
    the episode it gave before focus existed."""
    main = _config(trajectory_ranges={"figure8": {"period": [8.0, 9.0]}})
    sampler = training_sampler(dataclasses.replace(main, focus=FOCUS))
    [(_, focus_sampler)] = sampler.focus_bounds
    assert focus_sampler.ranges["figure8"]["period"] == (8.0, 9.0)  # the main's, kept
    rng = np.random.default_rng(4)
    scenarios = [sampler(rng) for _ in range(4000)]
    focus = [s for s in scenarios if _is_focus(s)]
    assert 0.22 < len(focus) / len(scenarios) < 0.30  # the focus's 25 % (+ main draws like it)
    fast = [s["trajectory"].period for s in focus if s["trajectory"].name == "helix"]
    assert len(fast) > 300 and all(4.0 <= p <= 5.0 for p in fast)
    slow = [s["trajectory"].period for s in scenarios if s["trajectory"].name == "helix"]
    assert sum(p > 6.0 for p in slow) > 300  # the main helices, on TRAJECTORY_RANGES's 6–12 s
    assert all(
        8.0 <= s["trajectory"].period <= 9.0 for s in scenarios if s["trajectory"].name == "figure8"
    )
    plain, zero = (
        training_sampler(main),
        OffMatrixSampler(main.payloads, main.winds, FAMILIES, 0.0, main.trajectory_ranges),
    )
    rng_a, rng_b = np.random.default_rng(9), np.random.default_rng(9)
    for _ in range(200):
        assert plain.draw(rng_a)[:3] == zero.draw(rng_b)[:3]


def test_a_focus_range_replaces_one_parameter_on_top_of_the_main_ranges():
    cfg = _config(
        trajectory_ranges={"helix": {"radius": [2.0, 2.5], "period": [6.0, 7.0]}},
        focus=dataclasses.replace(FOCUS, trajectory_ranges={"helix": {"period": [4.0, 5.0]}}),
    )
    [lists] = cfg.focus_lists()
    assert lists["ranges"]["helix"] == {"radius": [2.0, 2.5], "period": [4.0, 5.0]}
    assert lists["payloads"] == [0.6, 0.65] and lists["fraction"] == 0.25
    [unset] = _config(focus=FocusDraw(fraction=0.1)).focus_lists()  # every list the main one
    main = _config()
    assert unset["payloads"] == main.payloads and unset["winds"] == main.winds
    assert unset["families"] == main.trajectories
    assert main.focus_lists() == []


#: a second focus: light vehicles in windy air, every main family
LIGHT_GUSTS = FocusDraw(fraction=0.2, payloads=[0.0, 0.05], winds=["windy"])


def test_several_focus_draws_share_one_number_and_one_focus_draws_as_before():
    """A list of two focuses: each takes its share of 4 000 episodes (the first the lowest
    interval of ``u``), the rest the main lists. A list of one draws exactly what the single
    mapping draws, and a YAML list loads into FocusDraws."""
    two = training_sampler(_config(focus=[FOCUS, LIGHT_GUSTS]))
    assert [bound for bound, _ in two.focus_bounds] == [0.25, 0.45]
    rng = np.random.default_rng(5)
    scenarios = [two(rng) for _ in range(4000)]
    heavy = sum(_is_focus(s) for s in scenarios) / len(scenarios)
    light = sum(s["payload"] in (0.0, 0.05) and s["wind"] == "windy" for s in scenarios)
    assert 0.22 < heavy < 0.30 and 0.17 < light / len(scenarios) < 0.23  # 25 % and 20 %
    one, listed = training_sampler(_config(focus=FOCUS)), training_sampler(_config(focus=[FOCUS]))
    rng_a, rng_b = np.random.default_rng(6), np.random.default_rng(6)
    for _ in range(300):
        a, b = one.draw(rng_a), listed.draw(rng_b)
        assert a[:3] == b[:3] and np.array_equal(a[3], b[3])
    loaded = configs.load(
        PPOTrainConfig,
        {**configs.to_dict(_config()), "focus": [configs.to_dict(FOCUS), {"fraction": 0.2}]},
    )
    assert loaded.focus == [FOCUS, FocusDraw(fraction=0.2)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 2)),
        min_size=1,
        max_size=4,
    )
)
def test_any_focus_fractions_give_ordered_bounds_or_a_named_error(fractions):
    """Whatever the fractions, a sampler of several focuses is built with bounds that rise
    strictly and stay below 1 (each interval the focus's own share), or refused by name."""
    focus = OffMatrixSampler([0.0], ["calm"], ["hover"])
    try:
        sampler = OffMatrixSampler(
            [0.0], ["calm"], ["hover"], focus=[focus] * len(fractions), focus_fraction=fractions
        )
    except ValueError as err:
        assert "focus" in str(err)
        return
    bounds = [bound for bound, _ in sampler.focus_bounds]
    assert all(0 < f < 1 for f in fractions) and sum(fractions) == pytest.approx(bounds[-1])
    assert all(a < b for a, b in zip([0.0, *bounds], bounds, strict=False)) and bounds[-1] < 1


@pytest.mark.parametrize(
    ("focus", "message"),
    [
        (FocusDraw(fraction=1.0), "focus.fraction must be a finite real number in [0, 1)"),
        (FocusDraw(fraction=-0.1), "focus.fraction must be a finite real number in [0, 1)"),
        (FocusDraw(fraction=float("nan")), "focus.fraction must be a finite real number"),
        (FocusDraw(payloads=[0.6]), "focus.fraction is 0, so focus.payloads would draw nothing"),
        (FocusDraw(fraction=0.1, payloads=["extra"]), "focus.payloads ['extra'] are held out"),
        (FocusDraw(fraction=0.1, payloads=[0.75]), "focus.payloads: 0.75 (0.75 kg) reaches"),
        (FocusDraw(fraction=0.1, payloads=[]), "focus.payloads must not be empty"),
        (FocusDraw(fraction=0.1, payloads=[-1.0]), "focus.payloads: "),
        (FocusDraw(fraction=0.1, winds=[]), "focus.winds must not be empty"),
        (FocusDraw(fraction=0.1, winds=["gale"]), "focus.winds: unknown ['gale']; valid: calm"),
        (FocusDraw(fraction=0.1, trajectories=["spiral"]), "focus.trajectories: unknown"),
        (
            FocusDraw(fraction=0.1, trajectories=["helix"], trajectory_ranges={"figure8": {}}),
            "focus.trajectory_ranges: ['figure8'] not drawn (focus trajectories: helix)",
        ),
        (
            FocusDraw(fraction=0.1, trajectory_ranges={"helix": {"period": [0.0, 2.0]}}),
            "focus.trajectory_ranges.helix.period: helix period must be a finite real",
        ),
        ({"fraction": 0.1}, "focus must be a mapping of FocusDraw's fields"),
        ([], "or a non-empty list of them"),
        ([FOCUS, FocusDraw(fraction=0.1, winds=["gale"])], "focus[1].winds: unknown ['gale']"),
        ([FOCUS, FocusDraw()], "focus[1].fraction must be > 0 in a list of focus draws"),
        ([FOCUS, FocusDraw(fraction=0.1, payloads=[0.75])], "focus[1].payloads: 0.75 (0.75 kg)"),
        ([FOCUS, dataclasses.replace(FOCUS, fraction=0.75)], "the focus fractions sum to 1: "),
    ],
)
def test_bad_focus_draws_are_named(focus, message):
    with pytest.raises(ValueError) as err:
        _config(focus=focus)
    assert message in str(err.value)


def test_a_focus_needs_the_randomized_draw():
    with pytest.raises(ValueError, match="needs trajectory_draw: randomized, not 'fixed'"):
        _config(trajectory_draw="fixed", trajectories=["helix"], focus=FocusDraw(fraction=0.1))


def test_smoke_training_off_the_matrix(tmp_path):
    """256 policy steps with ``trajectory_draw: randomized`` train, and the run's config and
    policy file record the draw."""
    cfg = _config(
        n_envs=2,
        ppo=PPOHyperparams(n_steps=128, batch_size=128, n_epochs=1),
        episode_s=2.0,
        eval_freq=0,
        checkpoint_freq=0,
        eval_scenarios=[["light", "breezy", "hover"]],
    )
    summary = train(cfg, tmp_path, progress=False)
    assert summary["steps"] == 256 and summary["control_steps"] > 256
    assert configs.load(PPOTrainConfig, tmp_path / "config.yaml") == cfg
    record = read_meta(tmp_path / "final.zip")["config"]
    assert record["trajectory_draw"] == "randomized" and record["trajectories"] == FAMILIES
    assert dataclasses.asdict(cfg)["trajectory_draw"] == "randomized"


def test_rotor_efficiency_draws_weaker_motors_after_the_rest():
    """``efficiencies`` draws one value per episode after everything else (the first episode's
    payload, wind and trajectory are those of the sampler without it), every rotor alike from
    t = 0 (four rotor events; 1: no event), seeded: the same generator, the same episodes."""
    plain = OffMatrixSampler([0.0, 0.5], ["calm", "windy"], FAMILIES)
    weak = OffMatrixSampler([0.0, 0.5], ["calm", "windy"], FAMILIES, efficiencies=[1.0, 0.9, 0.8])
    first, first_weak = plain(np.random.default_rng(5)), weak(np.random.default_rng(5))
    for key in ("payload", "wind"):
        assert first[key] == first_weak[key]
    assert repr(first["trajectory"]) == repr(first_weak["trajectory"])
    rng, again = np.random.default_rng(9), np.random.default_rng(9)
    seen = set()
    for _ in range(60):
        sc = weak(rng)
        assert repr(sc) == repr(weak(again))
        events = sc.get("events", ())
        if not events:
            seen.add(1.0)
            continue
        assert [e.rotor for e in events] == [0, 1, 2, 3]
        assert {e.t_s for e in events} == {0.0} and len({e.efficiency for e in events}) == 1
        seen.add(events[0].efficiency)
    assert seen == {1.0, 0.9, 0.8}


def test_the_training_env_flies_the_drawn_efficiency():
    """A config's ``rotor_efficiency`` reaches the plant: every training env's rotors deliver the
    drawn fraction from its first period (the env's truth in ``info``)."""
    cfg = _config(payloads=["light"], trajectories=["hover"], rotor_efficiency=[0.8])
    venv = make_training_env(cfg)
    venv.reset()
    vec = venv.venv.vector_env
    _, _, _, _, info = vec.step(np.zeros((vec.num_envs, 4)))
    np.testing.assert_array_equal(info["rotor_efficiency"], np.full((vec.num_envs, 4), 0.8))
    venv.close()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"trajectory_draw": "fixed", "trajectories": ["helix"]},
            "needs trajectory_draw: randomized",
        ),
        (
            {"rotor_efficiency": [0.9, 1.1]},
            "rotor_efficiency[1] must be a finite real number in (0, 1]",
        ),
        ({"rotor_efficiency": [0.0]}, "rotor_efficiency[0] must be a finite real number in (0, 1]"),
        ({"rotor_efficiency": [float("nan")]}, "rotor_efficiency[0]"),
        ({"rotor_efficiency": 0.9}, "rotor_efficiency must be a list of rotor efficiencies"),
    ],
)
def test_bad_rotor_efficiencies_are_named(kw, message):
    with pytest.raises(ValueError) as err:
        _config(**{"rotor_efficiency": [0.9], **kw})
    assert message in str(err.value)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=5),
    st.integers(0, 2**32 - 1),
)
def test_any_efficiency_list_draws_its_own_values_or_names_the_bad_entry(effs, seed):
    """Any list: entries in (0, 1] draw only themselves (1 as no event); any other entry is a
    ``ValueError`` naming its index, before anything is drawn."""
    bad = [i for i, e in enumerate(effs) if not (np.isfinite(e) and 0.0 < e <= 1.0)]
    if bad:
        with pytest.raises(ValueError, match=rf"rotor_efficiency\[{bad[0]}\]"):
            OffMatrixSampler([0.0], ["calm"], ["hover"], efficiencies=effs)
        return
    sampler = OffMatrixSampler([0.0], ["calm"], ["hover"], efficiencies=effs)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        events = sampler(rng).get("events", ())
        drawn = events[0].efficiency if events else 1.0
        assert drawn in [*effs, 1.0] and (drawn < 1.0) == bool(events)
