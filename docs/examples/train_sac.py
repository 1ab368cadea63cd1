"""Train a stable-baselines3 SAC on ``ResidualQuad-v0`` (hover, calm); save it for ``rquad eval``.

A user script, not part of the package: any SB3 algorithm trained on the env as it is (the raw
36-entry observation, the ``rotor`` action Box(-1, 1, (4,))) flies through the ``sb3``
controller. See docs/rl_policies.md.

    python docs/examples/train_sac.py --steps 2000 --out sac.zip
    rquad eval --controller sb3:sac.zip --payload none --trajectory hover --episode-s 5
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from tqdm import tqdm

import residual_quad  # noqa: F401 - registers ResidualQuad-v0


class Progress(BaseCallback):
    """A tqdm bar over the environment steps (SB3's own bar needs the `rich` package)."""

    def __init__(self, total: int):
        super().__init__()
        self.bar = tqdm(total=total, desc="SAC", unit="step")

    def _on_step(self) -> bool:
        self.bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="environment steps (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="sac.zip", help="where to save the model")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # small networks: one thread is fastest and reproducible
    env = gym.make("ResidualQuad-v0", payload="none", wind="calm", trajectory="hover")
    model = SAC(
        "MlpPolicy",
        env,
        learning_starts=min(1000, args.steps // 4),  # random exploration before learning
        seed=args.seed,
        device="cpu",
    )
    model.learn(total_timesteps=args.steps, callback=Progress(args.steps))
    model.save(args.out)
    print(f"saved {args.out}; fly it with: rquad eval --controller sb3:{args.out}")


if __name__ == "__main__":
    main()
