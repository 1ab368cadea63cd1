"""The plant and the Gymnasium environment (task logic only; no controller imports here).

One module per concept:

- ``actions``: the action mapping, a normalized action → rotor thrusts (``rotor``, ``ctbr``)
- ``actuators``: rotor dynamics, a first-order lag run by MuJoCo inside its step
- ``airframe``: the nominal vehicle's parameters and rotor allocation (mixer)
- ``checks``: argument checks, one clear ``ValueError`` naming the argument per bad value
- ``config``: the env's settings, one typed and checked ``EnvConfig``
- ``disturbances``: drag, mean wind and Ornstein–Uhlenbeck gusts, ground effect, payload levels
- ``dynamics``: the nominal model's period residual
- ``events``: payload, wind and rotor events during an episode
- ``imu_bias``: gyro and accelerometer biases as random walks
- ``latency``: command and sensor delay lines of whole control periods
- ``model``: the MuJoCo model (MJCF edited through ``MjSpec``)
- ``observation``: the observation layout (``ObsLayout``) and the preview's spec
- ``plant``: MuJoCo stepping with the disturbances applied every substep
- ``presets``: named sets of plant options (``ideal``, ``realistic``)
- ``preview``: the reference preview, future reference points in the observation
- ``reference_table``: the built-in trajectories tabulated for a batch (the vector env)
- ``registration``: Gymnasium registration of ``ResidualQuad-v0`` (and the remote client's id)
- ``rendering``: an off-screen renderer that works headless
- ``resets``: resetting envs as one batch (the vector env's resets; the single env's with one)
- ``residual_quad_env``: the Gymnasium class, the specification and the glue
- ``reward``: the reward terms and their weights
- ``rotations``: attitude formulas (``quat_to_rot``)
- ``scenarios``: what each env of the vector env flies and how it is seeded
- ``sensors``: white sensor noise and the IMU bias on the observation
- ``substep``: the compiled substep wrench (drag, ground effect, rotor gains) of both envs
- ``task``: the task step shared by the single and the vector env
- ``termination``: the crash conditions and the termination reasons
- ``trajectories``: reference trajectories with analytic derivatives
- ``turbulence``: Dryden gusts, the alternative to the OU ones
- ``vector_env``: ``ResidualQuad-v0`` for N quadrotors at once on ``mujoco.rollout``
- ``vector_physics``: the vector env's physics, one control period of N plants
- ``wind_mirror``: the vector env's copy of every env's wind samples
- ``xp``: the one float/array namespace of the formulas written once for one vehicle and a batch

At the bottom, imported by controllers as well and free of MuJoCo: ``xp``, ``rotations`` and
``airframe``.
"""
