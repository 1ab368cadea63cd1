"""Which registered controllers need an optional extra of the package.

The package works without its ``rl`` extra (stable-baselines3 and torch); the controllers listed
here then refuse to build with the install hint, and everything that flies "every controller"
(tests, benchmarks) leaves exactly these out.
"""

from __future__ import annotations

#: the registered controllers that need the ``rl`` extra (stable-baselines3 and torch)
RL_EXTRA_CONTROLLERS: tuple[str, ...] = (
    "ppo",
    "ppo_res",
    "ppo_acc",
    "ppo_adapt",
    "sb3",
    "sac",
    "tqc",
)

#: the registered controllers that fly a policy file and have none shipped: they need ``path``
#: (train one with ``rquad train ppo_adapt|sac|tqc``)
UNSHIPPED_POLICY_CONTROLLERS: tuple[str, ...] = ("sac", "tqc")
