"""Prioritized control: hierarchical least squares and the hierarchical Newton method ([HN]).

* :mod:`.hlsp` -- the generic HLSP solver (numpy reference cascade, daqp backend);
* :mod:`.box_hlsp` -- exact HLSP for a hard box level over small equality levels (and N of them);
* :mod:`.newton` -- the core of one hierarchical Newton cycle, shared by both controllers;
* :mod:`.hnewton` -- the generic method on task objects (:class:`HierarchicalNewton`);
* :mod:`.thrust_vector` -- the quadrotor's thrust-vector Newton cycle and rotor allocation, their
  memory as an explicit state and their batch algorithm;
* :mod:`.quad` -- the quadrotor controllers ``hnewton`` / ``hnewton_rls``, one tracker law each
  (imported on demand).
"""

from residual_quad.controllers.prioritized.hlsp import HLSPResult, HLSPSolver, Level, solve_hlsp
from residual_quad.controllers.prioritized.hnewton import (
    FunctionTask,
    HierarchicalNewton,
    HNewtonParams,
    JointTask,
    Task,
)
from residual_quad.controllers.prioritized.newton import METHODS

__all__ = [
    "METHODS",
    "FunctionTask",
    "HLSPResult",
    "HLSPSolver",
    "HNewtonParams",
    "HierarchicalNewton",
    "JointTask",
    "Level",
    "Task",
    "solve_hlsp",
]
