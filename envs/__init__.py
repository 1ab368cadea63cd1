"""The plant and the Gymnasium environment (task logic only; no controller imports here).

One module per concept: ``airframe`` (nominal vehicle, mixer), ``model`` (MuJoCo model),
``disturbances`` (drag, wind, ground effect, payload), ``turbulence`` (Dryden gusts), ``plant``
(stepping with disturbances), ``trajectories`` (references), ``observation`` (layout),
``actions`` (action → rotor thrusts), ``reward``, ``termination``, ``sensors`` (noise),
``imu_bias`` (bias random walks), ``dynamics`` (the nominal model's period residual) and
``residual_quad_env`` (the Gymnasium class: the specification and the glue).
"""
