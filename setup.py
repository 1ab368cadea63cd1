"""Packaging for residual-quad.

The user-facing top-level folders (``envs/``, ``controllers/``, ``training/``, ``evaluation/``,
``configs/``) are mapped into one import package ``residual_quad`` with ``package_dir`` so that
nothing generic like ``envs`` or ``controllers`` lands in site-packages. The small root package
lives in ``src/residual_quad`` (its ``__init__`` registers the Gymnasium environment).
"""

from setuptools import find_packages, setup

SUBPACKAGES = ("envs", "controllers", "training", "evaluation", "configs")

package_dir = {"residual_quad": "src/residual_quad"}
package_dir.update({f"residual_quad.{name}": name for name in SUBPACKAGES})


def discover_packages() -> list[str]:
    """Every folder with an ``__init__.py`` under the mapped folders, so a new subpackage can never
    be silently left out of the install (``tests/test_packaging.py`` checks this)."""
    found = ["residual_quad"]
    found += [f"residual_quad.{p}" for p in find_packages("src/residual_quad")]
    for name in SUBPACKAGES:
        found.append(f"residual_quad.{name}")
        found += [f"residual_quad.{name}.{p}" for p in find_packages(name)]
    return found


setup(
    name="residual-quad",
    version="0.1.0",
    description=(
        "Gymnasium + MuJoCo quadrotor testbed: geometric, residual-learning, RLS, "
        "hierarchical-Newton and PPO controllers under drag, wind, payloads and ground effect"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=discover_packages(),
    package_dir=package_dir,
    package_data={
        "residual_quad.envs": ["assets/*.xml"],
        "residual_quad.configs": ["*.yaml"],
        "residual_quad.controllers": [
            "weights/*.npz",
            "weights/*.zip",
            "weights/*.json",
            "weights/tuned/*/*",  # the shipped tuning studies (controllers/tuned.py)
        ],
        "residual_quad.evaluation.studies": ["committed_outcome.json"],
        "residual_quad.evaluation.studies.stick": ["scenarios/*.yaml"],
    },
    include_package_data=False,
    install_requires=[
        "numpy>=1.24",
        "mujoco>=3.2",
        "numba>=0.59",  # the compiled substep wrench (envs/substep.py); wheels, no compiler
        "gymnasium>=1.0",
        "daqp>=0.6",
        "PyYAML>=6.0",
        "tqdm>=4.60",
        "matplotlib>=3.7",
        "tensorboard>=2.14",
        "scipy>=1.10",
    ],
    extras_require={
        "rl": [  # PPO, SAC, TQC training and policies; rliable: the RL statistics (its arch < 8
            "stable-baselines3>=2.3",  # needs pandas < 3)
            "sb3-contrib>=2.3",
            "torch>=2.2",
            "rliable>=1.2",
            "pandas<3",
        ],
        "cluster": ["ray>=2.9"],
        "tune": ["optuna>=4.0"],  # rquad tune: the seeded search of the trackers' gains
        "test": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6", "ruff>=0.5", "websockets>=12"],
        "server": [  # rquad serve, ResidualQuadRemote-v0, MCAP flight logs, Foxglove live view
            "msgpack>=1.0",
            "mcap>=1.6",  # Writer.flush: the flight log made durable every second
            "mcap-ros2-support>=0.5",
            "rosbags>=0.10",
            "foxglove-sdk>=0.20",
        ],
    },
    entry_points={"console_scripts": ["rquad=residual_quad.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
