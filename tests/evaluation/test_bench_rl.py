"""``rquad bench --sections rl``: learner, env and end to end beside SB3's ceiling."""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")

from residual_quad.cli import main  # noqa: E402
from residual_quad.evaluation.bench import rl as bench_rl  # noqa: E402
from residual_quad.evaluation.bench.rl import KINDS, Split  # noqa: E402
from residual_quad.evaluation.bench.sections import SECTIONS  # noqa: E402


def test_rows_split_learner_and_env_with_ratios_to_the_ceiling():
    split = {
        "ceiling": Split(rollout_us=5.0, update_us=35.0),
        "ceiling, SB3's default Adam": Split(rollout_us=5.0, update_us=37.0),
        "untrained policy": Split(rollout_us=125.0, update_us=36.0),
        "from the shipped policy": Split(rollout_us=80.0, update_us=35.0),
    }
    rows = {r.name.split(" (")[0]: r for r in bench_rl._rows(256, split)}
    ceiling = rows["SB3 ceiling = learner, N=256"]
    assert ceiling.median_us == 40.0 and ceiling.ratio == 1.0
    assert rows["  learner: update, N=256"].median_us == 35.0
    assert rows["  ceiling with SB3's default Adam, N=256"].ratio == pytest.approx(42 / 40)
    flying = rows["PPO end to end, vector env, N=256, from the shipped policy"]
    assert flying.median_us == 115.0 and flying.ratio == pytest.approx(115 / 40)
    assert rows["  env per policy step, N=256, from the shipped policy"].median_us == 75.0
    assert rows["  env per policy step, N=256, untrained policy"].median_us == 120.0
    assert rows["  learner: update, N=256, untrained policy"].median_us == 36.0


def test_bench_rl_runs_every_kind_through_the_cli(monkeypatch, capsys):
    assert SECTIONS["rl"]() is bench_rl.run
    monkeypatch.setattr(bench_rl, "ROLLOUT_STEPS", 512)  # 8 steps of 64 envs: seconds
    seen: dict[str, Split] = {}
    splits = bench_rl._splits

    def keep(n: int, iterations: int) -> dict[str, Split]:
        seen.update(splits(n, iterations))
        return dict(seen)

    monkeypatch.setattr(bench_rl, "_splits", keep)
    assert main(["bench", "--sections", "rl", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "SB3 ceiling = learner, N=64" in out and "PPO end to end, vector env, N=64" in out
    assert "from the shipped policy" in out and "env per policy step" in out
    assert sorted(seen) == sorted(KINDS)
    assert all(s.rollout_us > 0 and s.update_us > 0 for s in seen.values())


def test_the_ceiling_learns_the_same_network_as_end_to_end(monkeypatch):
    """The ceiling's learner must be the recipe's own: its inputs (preview, memory) widen the
    first layer, and a ceiling on the base features would understate what the learner costs."""
    from residual_quad.controllers.features import FEATURE_DIM

    monkeypatch.setattr(bench_rl, "ROLLOUT_STEPS", 64)  # one step of 64 envs
    shapes: dict[str, list[tuple[int, ...]]] = {}
    inputs: dict[str, int] = {}

    def record(models, iterations):
        for kind, model in models.items():
            shapes[kind] = [tuple(p.shape) for p in model.policy.parameters()]
            inputs[kind] = model.policy.mlp_extractor.policy_net[0].in_features
        return {kind: Split(1.0, 1.0) for kind in models}

    monkeypatch.setattr(bench_rl, "_interleaved_splits", record)
    bench_rl._splits(64, 1)
    assert sorted(shapes) == sorted(KINDS)
    assert len({tuple(s) for s in shapes.values()}) == 1, shapes
    assert len(set(inputs.values())) == 1 and inputs["ceiling"] > FEATURE_DIM, inputs


@pytest.mark.parametrize(("obs_dim", "action_dim"), [(0, 4), (35, 0), (-1, -1)])
def test_a_null_env_without_inputs_or_outputs_is_refused(obs_dim, action_dim):
    from residual_quad.training.ppo_vec import NullVecEnv

    with pytest.raises(ValueError, match="obs_dim and action_dim must be >= 1"):
        NullVecEnv(1, obs_dim=obs_dim, action_dim=action_dim)
