"""Residual learning for inference: features and measured residuals (:mod:`.features`), the
network (:mod:`.network`), the one estimator every residual tracker uses (:mod:`.estimator`), its
settings (:mod:`.config`) and the ``geo_res``/``geo_rls`` trackers (:mod:`.trackers`).

The training of the network lives in ``residual_quad.training`` (``residual_net``,
``residual_train``). The names below are the package's inference API.
"""

from residual_quad.controllers.residual.features import (
    FEATURE_NAMES,
    N_FEATURES,
    N_OUTPUTS,
    OUTPUT_NAMES,
    build_features,
    features_from_obs,
    imu_residual,
    measured_residual,
)
from residual_quad.controllers.residual.network import (
    DEFAULT_WEIGHTS,
    FastMLP,
    ResidualMLP,
    ResidualWeightsError,
    load_network,
)

__all__ = [
    "DEFAULT_WEIGHTS",
    "FEATURE_NAMES",
    "N_FEATURES",
    "N_OUTPUTS",
    "OUTPUT_NAMES",
    "FastMLP",
    "ResidualMLP",
    "ResidualWeightsError",
    "build_features",
    "features_from_obs",
    "imu_residual",
    "load_network",
    "measured_residual",
]
