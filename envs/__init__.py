"""The plant and the Gymnasium environment (task logic only; no controller imports here).

One module per concept: ``airframe`` (nominal vehicle, mixer), ``model`` (MuJoCo model),
``disturbances`` (drag, wind, ground effect, payload), ``turbulence`` (Dryden gusts), ``plant``
(stepping with disturbances), ``trajectories`` (references), ``observation`` (layout),
``actions`` (action → rotor thrusts), ``reward``, ``termination``, ``sensors`` (noise),
``imu_bias`` (bias random walks), ``dynamics`` (the nominal model's period residual) and
``residual_quad_env`` (the Gymnasium class: the specification and the glue). At the bottom,
imported by controllers as well and free of MuJoCo: ``xp`` (the one float/array namespace of the
formulas written once for one vehicle and a batch), ``rotations`` (``quat_to_rot``) and
``airframe``.
"""
