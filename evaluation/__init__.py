"""Evaluation, in four rooms: :mod:`.sweep` (flying a matrix into rows), :mod:`.report` (tables,
figures and statistics from rows), :mod:`.studies` (experiments built on both) and :mod:`.bench`
(``rquad bench``).

Imports go one way only — report → sweep, studies → sweep and report, bench → any —
checked by ``tests/test_architecture.py``. The episode runner itself lives in the root package
(:mod:`residual_quad.episode`) and is re-exported here.
"""

from residual_quad.episode import EpisodeResult, run_episode

__all__ = ["EpisodeResult", "run_episode"]
