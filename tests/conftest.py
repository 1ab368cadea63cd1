"""Shared fixtures: headless rendering and a fresh env factory."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# property-based tests draw their examples deterministically, so a CI run is reproducible; the
# long profile (HYPOTHESIS_PROFILE=long) scales the example counts where a suite supports it, and
# HYPOTHESIS_PROFILE=explore draws fresh random examples on every run to hunt for new bugs
settings.register_profile("default", derandomize=True)
settings.register_profile("long", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

import residual_quad  # noqa: E402,F401  (registers ResidualQuad-v0)


@pytest.fixture
def make_env():
    """Factory for unwrapped-checker envs, closed after the test."""
    envs = []

    def _make(**kwargs):
        env = gym.make("ResidualQuad-v0", **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()


@pytest.fixture
def random_net():
    """Factory of a randomly initialized, standardized residual network (seeded)."""
    import numpy as np

    from residual_quad.controllers.residual.network import ResidualMLP

    def _make(seed: int = 0, scale: float = 0.4) -> ResidualMLP:
        rng = np.random.default_rng(seed)
        net = ResidualMLP(seed=seed)
        net.flat[...] = scale * rng.standard_normal(net.n_params)
        X = rng.standard_normal((50, 14)) * 2.0 + 1.0
        net.set_standardization(X.mean(0), X.std(0), np.array([0.3, -0.2, -4.0]))
        return net

    return _make


def damaged(data: bytes, cut: int | None, flips: list[tuple[int, int]]) -> bytes:
    """``data`` with the bytes at ``offset % len`` XOR-ed by ``mask`` for each ``(offset, mask)``
    in ``flips``, then truncated at ``cut % len`` (if given): a file damaged on disk."""
    out = bytearray(data)
    for offset, mask in flips:
        out[offset % len(out)] ^= mask
    if cut is not None:
        out = out[: cut % len(out)]
    return bytes(out)


@pytest.fixture(scope="session")
def damage():
    """The :func:`damaged` function, for the file-mutation property tests."""
    return damaged


def with_record(src, dest, **changes):
    """A copy of the policy file ``src`` at ``dest`` whose ``residual_quad.json`` record has
    ``changes``, written as it is (no check: the loader's checks are under test)."""
    import json
    import shutil
    import zipfile

    from residual_quad.controllers.policy_file import META_ENTRY, write_entry

    shutil.copyfile(src, dest)
    with zipfile.ZipFile(src) as archive:
        record = json.loads(archive.read(META_ENTRY))
    write_entry(dest, {**record, **changes})
    return dest


def fly_batch_and_singles(batch, singles, envs, steps, atol, each=None):
    """Fly ``envs`` (reset with seeds 0, 1, ...) ``steps`` periods on the single controllers'
    actions, asserting the batch's actions equal them (to ``atol``); ``each(i)`` is called
    after each env's step (a further per-env check). Returns the last observations."""
    import numpy as np

    obs = np.array([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    for _ in range(steps):
        actions = batch.policy_batch(obs)
        for i, env in enumerate(envs):
            a = singles[i].policy(obs[i])
            np.testing.assert_allclose(actions[i], a, rtol=0, atol=atol)
            if each is not None:
                each(i)
            obs[i] = env.step(a)[0]
    return obs


@pytest.fixture(scope="session")
def batch_flight():
    """The :func:`fly_batch_and_singles` function: batch = single over a flight."""
    return fly_batch_and_singles


@pytest.fixture(scope="session")
def edited_policy():
    """The :func:`with_record` function: a policy file with its record edited."""
    return with_record


@pytest.fixture(scope="session")
def offpolicy_policy(tmp_path_factory):
    """Factory ``(algo) -> path`` of an untrained, seeded ``sac``/``tqc`` policy file (the
    record ``rquad train`` writes, no normalization): the controllers' tests fly it without a
    training run. Skips without the rl extra (sb3-contrib for ``tqc``)."""
    import importlib.util

    made = {}

    def _make(algo: str = "sac"):
        need = "sb3_contrib" if algo == "tqc" else "stable_baselines3"
        if importlib.util.find_spec(need) is None:
            pytest.skip(f"needs the rl extra ({need})")
        if algo not in made:
            from residual_quad.controllers.policy_file import algo_module, save_model
            from residual_quad.training.ppo_vec import NullVecEnv

            kwargs = {"n_quantiles": 5} if algo == "tqc" else {}
            model = algo_module(algo)(
                "MlpPolicy",
                NullVecEnv(1),
                seed=0,
                device="cpu",
                buffer_size=10,
                policy_kwargs={"net_arch": [16, 16], "log_std_init": -1.0, **kwargs},
            )
            path = tmp_path_factory.mktemp(algo) / f"{algo}.zip"
            meta = {"controller": algo, "algo": algo, "action_mode": "rotor", "obs_norm": None}
            made[algo] = save_model(model, path, meta)
        return made[algo]

    return _make
