"""A planar chain point task for the hierarchical Newton tests: the controllers' tests build their
own small task instead of importing the stick study from ``evaluation/``.

Joint angles are relative (link ``i`` points along ``θ_i = q_0 + … + q_i``); the task is the tip of
link ``link`` reaching ``target``, with its analytic Jacobian and Hessian.
"""

from __future__ import annotations

import numpy as np

from residual_quad.controllers.prioritized import Task


class ChainPointTask(Task):
    """Tip of link ``link`` (0-based) of a planar chain with ``lengths`` (m) to ``target`` (m)."""

    def __init__(self, lengths: list[float], link: int, target: np.ndarray):
        super().__init__(2, 0.0, 0.0, name=f"tip{link + 1}")
        self.lengths = np.asarray(lengths, dtype=float)
        self.link = link
        self.target = np.asarray(target, dtype=float)

    def evaluate(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``e = p(q) - target``, ``∂p/∂q`` (2×n) and ``∂²p/∂q∂q`` (2×n×n)."""
        n = q.size
        theta = np.cumsum(q)
        p, J, H = np.zeros(2), np.zeros((2, n)), np.zeros((2, n, n))
        for i in range(self.link + 1):  # link i moves with joints 0..i
            u = self.lengths[i] * np.array([np.cos(theta[i]), np.sin(theta[i])])
            du = self.lengths[i] * np.array([-np.sin(theta[i]), np.cos(theta[i])])
            p += u
            J[:, : i + 1] += du[:, None]
            H[:, : i + 1, : i + 1] -= u[:, None, None]
        return p - self.target, J, H
