"""residual-quad: a Gymnasium + MuJoCo testbed for model-based and learned quadrotor control.

Importing this package registers the Gymnasium environment ``ResidualQuad-v0``::

    import gymnasium as gym
    import residual_quad  # noqa: F401

    env = gym.make("ResidualQuad-v0", payload="extra", wind="windy", trajectory="helix")
"""

from residual_quad.envs.registration import register_envs

__version__ = "0.1.0"

register_envs()

__all__ = ["__version__"]
