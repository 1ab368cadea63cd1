"""``rquad ablate``: variants resolve strictly, runs resume and are never overwritten, the table
reads only the rows and gives known means, ranges and crash counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from residual_quad import configs
from residual_quad.evaluation.studies import ablation, ablation_report
from residual_quad.evaluation.sweep.rows import FolderLock
from residual_quad.training.ppo_config import PPOHyperparams, PPOTrainConfig

try:
    import stable_baselines3 as sb3
except ImportError:  # the rl extra is optional
    sb3 = None

needs_sb3 = pytest.mark.skipif(sb3 is None, reason="needs the rl extra (stable-baselines3)")


def test_the_shipped_ablation_resolves_every_variant_with_its_changes_only():
    cfg = ablation.load()
    assert [v.name for v in cfg.variants][:1] == ["ppo"] and cfg.seeds == [0, 1, 2]
    base = configs.to_dict(cfg.run_config(cfg.variant("ppo"), 1))
    assert base["seed"] == 1 and base["total_steps"] == cfg.steps
    adapt = configs.to_dict(cfg.run_config(cfg.variant("ppo_adapt"), 1))
    changed = sorted(k for k in base if base[k] != adapt[k])
    assert changed == ["controller", "env_kwargs", "features"]
    assert adapt["features"]["estimate"] and adapt["env_kwargs"] == {"preview": [10, 0.06]}
    smooth = cfg.run_config(cfg.variant("ppo_res_smooth"), 0)
    rate_res = configs.load(PPOTrainConfig, "ppo_res_rate")
    # a mapping merges key by key: the ppo section changes only the keys the override names
    assert smooth.ppo.use_sde and smooth.ppo.log_std_init == -3.5
    assert smooth.ppo.n_steps == rate_res.ppo.n_steps == 16
    assert smooth.action_smooth == 0.5 and smooth.correction_rate is None
    assert smooth.features.action_history == 4 and smooth.total_steps == cfg.steps
    assert smooth.tracker == "geo"
    # the rate mode on geo (shipped before) is its own config, unchanged
    rate = cfg.run_config(cfg.variant("ppo_res_rate"), 0)
    assert configs.to_dict(rate) == configs.to_dict(rate_res) and rate.tracker == "geo"
    # the shipped ppo_res is the pid variant with a third of the exploration scale, CAPS's
    # spatial term and the log-shaped position cost (ppo_res_pid_log) trained for a third of
    # the ablation's budget; ppo_res_pid_log, shipped before at the full budget, differs from
    # it only in the budget, the CAPS variant before it also in the log cost, the one before
    # that also in the term, the one before that also in the exploration scale, the
    # no-history one also in its inputs, and the grid variant from the costs one only in the
    # action costs
    # (before its preview and its trajectories off the matrix: ppo_res_matrix)
    shipped_res = configs.to_dict(configs.load(PPOTrainConfig, "ppo_res_matrix"))
    log = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_log"), 0))
    assert {**log, "total_steps": shipped_res["total_steps"]} == shipped_res  # a third of it
    assert log["tracker"] == "pid" and log["total_steps"] == 3 * shipped_res["total_steps"]
    assert log["position_log"] == 1.0 and log["position_log_scale"] == 0.01
    # the unloaded variant draws the same grid with the unloaded airframe listed four times
    unloaded = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_unloaded"), 0))
    assert sorted(k for k in unloaded if unloaded[k] != log[k]) == ["payloads"]
    assert unloaded["payloads"] == [0.0] * 3 + log["payloads"]
    caps = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_caps"), 0))
    assert sorted(k for k in caps if caps[k] != log[k]) == ["position_log"]
    assert caps["position_log"] == 0.0
    assert caps["ppo"]["spatial_smoothness"] == 1.0 and caps["ppo"]["smoothness_sigma"] == 0.1
    explore = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_explore"), 0))
    assert sorted(k for k in explore if explore[k] != caps[k]) == ["ppo"]
    changed_ppo = sorted(k for k in caps["ppo"] if caps["ppo"][k] != explore["ppo"][k])
    assert changed_ppo == ["spatial_smoothness"] and explore["ppo"]["spatial_smoothness"] == 0
    assert explore["ppo"]["log_std_init"] == -4.5
    costs = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_costs"), 0))
    assert sorted(k for k in costs if costs[k] != explore[k]) == ["ppo"]
    assert costs["ppo"]["log_std_init"] == -3.5 and costs["ppo"]["n_steps"] == 16
    assert costs["ppo"]["spatial_smoothness"] == 0
    # the estimate variant is the shipped config with geo_rls's Δâ as one more input
    est = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_caps_estimate"), 0))
    assert sorted(k for k in est if est[k] != caps[k]) == ["features"]
    assert est["features"] == {**caps["features"], "estimate": True}
    lean = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_no_history"), 0))
    assert sorted(k for k in lean if lean[k] != explore[k]) == ["features"]
    assert lean["features"]["action_history"] == 0
    grid = configs.to_dict(cfg.run_config(cfg.variant("ppo_res_pid_grid"), 0))
    assert sorted(k for k in grid if grid[k] != costs[k]) == ["action_magnitude", "action_smooth"]
    # the rotor-level variants build on the first shipped ppo's recipe (the training defaults),
    # not on today's configs/ppo.yaml; the payload-grid variant differs from the ppo_adapt one
    # only in the payloads
    first = configs.to_dict(configs.load(PPOTrainConfig, "ppo_memoryless"))
    assert first == configs.to_dict(PPOTrainConfig())
    assert {**base, "seed": 0, "total_steps": first["total_steps"]} == first  # at 3 M steps
    grid = configs.to_dict(cfg.run_config(cfg.variant("ppo_adapt_payload_grid"), 0))
    assert max(grid["payloads"]) == 0.6
    named = configs.to_dict(cfg.run_config(cfg.variant("ppo_adapt"), 0))
    assert sorted(k for k in named if named[k] != grid[k]) == ["payloads"]


def test_merge_keeps_the_base_keys_of_a_mapping_and_replaces_the_rest():
    base = {"a": 1, "ppo": {"n_steps": 32, "gamma": 0.99}, "l": [1, 2]}
    out = ablation.merged(base, {"ppo": {"n_steps": 64}, "l": [3], "b": {"x": 1}})
    assert out == {"a": 1, "ppo": {"n_steps": 64, "gamma": 0.99}, "l": [3], "b": {"x": 1}}
    assert base["ppo"]["n_steps"] == 32  # the base is not modified


@pytest.mark.parametrize(
    ("variants", "needle"),
    [
        ([{"name": "a", "overrides": {"no_such_key": 1}}], "unknown key(s) ['no_such_key']"),
        ([{"name": "a", "overrides": {"seed": 3}}], "may not set 'seed'"),
        ([{"name": "a", "overrides": {"total_steps": 3}}], "may not set 'total_steps'"),
        ([{"name": "a"}, {"name": "a"}], "repeated: ['a']"),
        ([{"name": "A b"}], "folder name"),
        ([{"name": "a", "base": "no_such_config"}], "no config file 'no_such_config'"),
        ([{"name": "a", "overrides": {"features": {"estimate": True}}}], "ppo_adapt"),
    ],
)
def test_bad_ablation_configs_are_errors_naming_the_problem(variants, needle):
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        ablation.load({"variants": variants})
    assert needle in str(err.value)


def test_an_ablation_without_variants_trains_nothing_and_says_why(tmp_path):
    with pytest.raises(ValueError, match="no variants"):
        ablation.run_ablation(ablation.load({}), tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("seeds", [[], [1, 1], [-1]])
def test_bad_seeds_are_errors(seeds):
    with pytest.raises(ValueError, match="seeds must be distinct"):
        ablation.load({"variants": [{"name": "a"}], "seeds": seeds})
    with pytest.raises(ValueError, match="variant 'a': seeds must be distinct"):
        ablation.load({"variants": [{"name": "a", "seeds": seeds}]})


def test_a_variant_may_have_more_seeds_and_the_plan_is_seed_major(tmp_path):
    cfg = ablation.load(
        {"seeds": [0, 1], "variants": [{"name": "a", "seeds": [0, 1, 2]}, {"name": "b"}]}
    )
    order = [(v.name, seed, status) for v, seed, status in ablation.plan(cfg, tmp_path)]
    assert order == [
        ("a", 0, "new"),
        ("b", 0, "new"),
        ("a", 1, "new"),
        ("b", 1, "new"),
        ("a", 2, "new"),
    ]


def test_an_unknown_variant_name_lists_the_variants():
    cfg = ablation.load()
    with pytest.raises(ValueError, match="variants: ppo, ppo_preview_history"):
        cfg.variant("nope")


def _fake_run(cfg, out, name, seed, evals, best=None):
    """A finished run as the trainer leaves it: its config and its summary's evaluations."""
    folder = ablation.run_dir(out, name, seed)
    run_cfg = cfg.run_config(cfg.variant(name), seed)
    configs.dump(run_cfg, folder / "config.yaml")
    summary = {"evals": [{"steps": s, "crashes": c, "rmse_mean": r} for s, c, r in evals]}
    summary.update(best_steps=best, train_wall_s=10.0, steps=evals[-1][0])
    (folder / "summary.json").write_text(json.dumps(summary))


def _two_variants(tmp_path: Path) -> ablation.AblationConfig:
    return ablation.load(
        {
            "steps": 2_000_000,
            "seeds": [0, 1],
            "variants": [
                {"name": "base", "label": "the base"},
                {"name": "hist", "overrides": {"features": {"action_history": 4}}},
            ],
        }
    )


def test_the_table_gives_known_means_ranges_crashes_and_changes(tmp_path):
    cfg = _two_variants(tmp_path)
    m = 1_000_000
    _fake_run(
        cfg, tmp_path, "base", 0, [(m + 64, 1, 0.4), (2 * m + 64, 0, 0.2), (2 * m + 99, 0, 0.2)]
    )
    _fake_run(
        cfg, tmp_path, "base", 1, [(m + 64, 0, 0.2), (2 * m + 64, 0, 0.4), (2 * m + 99, 0, 0.4)]
    )
    _fake_run(
        cfg, tmp_path, "hist", 0, [(m + 64, 2, 0.5), (2 * m + 64, 0, 0.15), (2 * m + 99, 1, 0.15)]
    )
    rows = ablation.write_rows(cfg, tmp_path)
    assert ablation.read_rows(tmp_path) == rows and len(rows) == 9
    final = [r for r in rows if r["final"]]
    assert [r["checkpoint"] for r in final] == [None] * 3
    assert {r["checkpoint"] for r in rows if not r["final"]} == {1, 2}
    text = ablation_report.write_report(rows, tmp_path, eval_flights=6)
    lines = text.splitlines()
    assert lines[0] == "| variant | seeds | 1 M | 2 M | final | final vs base |"
    assert lines[2] == (
        "| the base | 2 | 0.300 [0.200–0.400], 1 crash | 0.300 [0.200–0.400] "
        "| 0.300 [0.200–0.400] | +0 % |"
    )
    assert lines[3] == "| hist | 1 | 0.500, 2 crashes | 0.150 | 0.150, 1 crash | -50 % |"
    assert "| hist | 0.150 (1 crash) | — |" in text  # the seed not run is shown as missing
    assert (tmp_path / "ablation.md").read_text() == text
    assert (tmp_path / "ablation.png").stat().st_size > 10_000


def test_run_status_keeps_finished_runs_and_refuses_another_config(tmp_path):
    cfg = _two_variants(tmp_path)
    v = cfg.variant("base")
    folder = ablation.run_dir(tmp_path, v, 0)
    assert ablation.run_status(folder, cfg.run_config(v, 0)) == "new"
    _fake_run(cfg, tmp_path, "base", 0, [(10, 0, 0.3)])
    assert ablation.run_status(folder, cfg.run_config(v, 0)) == "done"
    other = cfg.run_config(v, 0)
    other.env_threads = 7  # a speed setting: the same run
    assert ablation.run_status(folder, other) == "done"
    other.action_smooth = 0.25
    with pytest.raises(ValueError, match="action_smooth: 0.0 there, 0.25 in the ablation"):
        ablation.run_status(folder, other)
    (folder / "summary.json").unlink()
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "ppo_1000.zip").write_bytes(b"")
    assert ablation.run_status(folder, cfg.run_config(v, 0)) == "resume"


def test_missing_rows_and_corrupt_summaries_are_readable_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `rquad ablate` first"):
        ablation.read_rows(tmp_path)
    cfg = _two_variants(tmp_path)
    _fake_run(cfg, tmp_path, "base", 0, [(10, 0, 0.3)])
    (ablation.run_dir(tmp_path, "base", 0) / "summary.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a training summary"):
        ablation.write_rows(cfg, tmp_path)
    for bad in ("[{", '{"a": 1}', "[1, 2]"):
        (tmp_path / ablation.ROWS_FILE).write_text(bad)
        with pytest.raises(ValueError, match="not ablation rows"):
            ablation.read_rows(tmp_path)


def _tiny_base(tmp_path: Path) -> Path:
    cfg = PPOTrainConfig(
        n_envs=2,
        episode_s=2.0,
        eval_freq=256,
        checkpoint_freq=256,
        eval_scenarios=[["light", "breezy", "hover"]],
        ppo=PPOHyperparams(n_steps=128, batch_size=128, n_epochs=1),
    )
    return configs.dump(cfg, tmp_path / "tiny.yaml")


@needs_sb3
def test_cli_trains_what_is_missing_skips_held_runs_and_resumes(tmp_path, capsys):
    from residual_quad.cli import main

    base = _tiny_base(tmp_path)
    spec = {
        "steps": 512,
        "seeds": [0, 1],
        "variants": [
            {"name": "base", "base": str(base)},
            {"name": "hist", "base": str(base), "overrides": {"features": {"action_history": 2}}},
        ],
    }
    yaml_path = tmp_path / "abl.yaml"
    yaml_path.write_text(json.dumps(spec))  # JSON is YAML
    out = tmp_path / "out"
    held = FolderLock(ablation.run_dir(out, "hist", 1))
    ablation.run_dir(out, "hist", 1).mkdir(parents=True)
    held.acquire()  # another process trains hist seed 1
    try:
        argv = ["ablate", str(yaml_path), "--out", str(out), "--no-progress"]
        assert main([*argv, "--variants", "hist"]) == 0
        err = capsys.readouterr().err
        assert "[2/2] hist seed 1: being trained by another process, skipped" in err
        assert "[1/2] hist seed 0: training (512 steps)" in err
    finally:
        held.release()
    assert not (ablation.run_dir(out, "base", 0) / "summary.json").exists()  # not chosen
    first = (ablation.run_dir(out, "hist", 0) / "summary.json").read_bytes()
    # interrupt hist seed 1 after its first checkpoint: it resumes from it
    from residual_quad.training.ppo import train

    cfg = ablation.load(yaml_path)
    run = ablation.run_dir(out, "hist", 1)
    train(cfg.run_config(cfg.variant("hist"), 1), run, progress=False)
    for name in ("summary.json", "final.zip", "best.zip"):
        (run / name).unlink()
    newest = max((run / "checkpoints").glob("ppo_*.zip"), key=lambda p: int(p.stem[4:]))
    for p in (run / "checkpoints").glob(f"{newest.stem}*"):
        p.unlink()  # killed before its last checkpoint
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "hist seed 0: done" in captured.err and "hist seed 1: resuming" in captured.err
    assert (ablation.run_dir(out, "hist", 0) / "summary.json").read_bytes() == first
    rows = ablation.read_rows(out)
    assert {(r["variant"], r["seed"]) for r in rows} == {
        ("base", 0),
        ("base", 1),
        ("hist", 0),
        ("hist", 1),
    }
    assert "| hist | 2 |" in captured.out and (out / "ablation_config.yaml").is_file()
    assert main([*argv, "--table-only"]) == 0
    assert capsys.readouterr().out == captured.out


def test_the_cli_rejects_an_unknown_variant_listing_the_valid_ones(tmp_path, capsys):
    from residual_quad.cli import main

    code = main(["ablate", "--out", str(tmp_path), "--variants", "ppo,nope"])
    assert code != 0
    assert "no variant 'nope'; variants: ppo, ppo_preview_history" in capsys.readouterr().err


def test_cli_seeds_train_those_seeds_of_every_variant_and_the_table_keeps_all(tmp_path, capsys):
    from residual_quad.cli import main

    spec = {"seeds": [0, 1], "variants": [{"name": "a", "seeds": [0, 1, 2, 3]}, {"name": "b"}]}
    cfg = ablation.load(spec)
    for name in ("a", "b"):
        for seed in (0, 1, 2, 3, 5) if name == "a" else (0, 1, 5):
            _fake_run(cfg, tmp_path, name, seed, [(10, 0, 0.1 * (seed + 1))])
    yaml_path = tmp_path / "abl.yaml"
    yaml_path.write_text(json.dumps(spec))
    argv = ["ablate", str(yaml_path), "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--seeds", "1,5"]) == 0  # every run finished: nothing trains
    err = capsys.readouterr().err
    assert "[1/4] a seed 1: done" in err and "[2/4] b seed 1: done" in err
    assert "[3/4] a seed 5: done" in err and "[4/4] b seed 5: done" in err
    assert "seed 0" not in err and "seed 2" not in err
    # the table keeps every finished run: the config's seeds and seed 5 trained beside them
    got = {(r["variant"], r["seed"]) for r in ablation.read_rows(tmp_path)}
    assert got == {("a", s) for s in (0, 1, 2, 3, 5)} | {("b", s) for s in (0, 1, 5)}
    assert main([*argv, "--table-only"]) == 0
    assert len(ablation.read_rows(tmp_path)) == 8


def test_rows_of_runs_without_folders_are_kept_and_a_folder_replaces_them(tmp_path):
    """The committed rows carry no run folders: tabulating them again loses nothing."""
    cfg = _two_variants(tmp_path)
    _fake_run(cfg, tmp_path, "base", 0, [(10, 0, 0.3)])
    _fake_run(cfg, tmp_path, "hist", 1, [(10, 1, 0.5)])
    first = ablation.write_rows(cfg, tmp_path)
    committed = tmp_path / "committed"
    committed.mkdir()
    (committed / ablation.ROWS_FILE).write_text((tmp_path / ablation.ROWS_FILE).read_text())
    assert ablation.write_rows(cfg, committed) == first
    _fake_run(cfg, committed, "base", 0, [(10, 0, 0.25)])  # a new run of base seed 0
    again = ablation.write_rows(cfg, committed)
    assert [(r["variant"], r["seed"], r["rmse_mean"]) for r in again] == [
        ("base", 0, 0.25),
        ("hist", 1, 0.5),
    ]
