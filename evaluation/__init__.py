"""Evaluation: the episode runner, sweeps, tables, figures and benchmarks."""

from residual_quad.episode import EpisodeResult, run_episode

__all__ = ["EpisodeResult", "run_episode"]
