"""Flying a controller and measuring the episode: :func:`run_episode`, the one episode loop.

:func:`run_episode` flies one controller for one episode and returns an :class:`EpisodeResult`
with the metrics and the time series; it never raises because a flight diverged (that is
``diverged=True``). A :class:`RunSpec` names one run (controller label, scenario, seed) and
:func:`fly` flies it with :func:`run_episode`; :func:`fly_batch` flies many runs at once on the
vector env (a batched controller stepping every env together), their metrics from the same
:func:`episode_result`. The sweep engine (:mod:`residual_quad.evaluation.sweep`) maps runs over
worker processes, one by one or in batches. It lives in the root package so that both
``training`` and ``evaluation`` import it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from residual_quad.controllers.base import ControlContext, Controller
from residual_quad.controllers.specs import ControllerSpec, parse_spec
from residual_quad.envs.airframe import Airframe
from residual_quad.envs.checks import integer, real
from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.registration import ENV_ID
from residual_quad.envs.trajectories import make_named_trajectory

STEADY_STATE_FROM_S = 3.0  # s, metrics ignore the take-off transient before this time
#: env arguments that shape the observation a policy was trained on (its file's ``env_kwargs``):
#: :func:`run_episode` and :func:`fly_batch` make the env with the controller's own, as they do
#: with its ``action_mode``, unless the caller sets them. The plant's arguments are not among
#: them: the plant is the caller's (a policy trained on another plant flies on the one given).
OBSERVATION_ENV_KWARGS = ("preview",)
_INITIAL_CAPACITY = 1 << 16  # time-series rows preallocated by run_episode (≈ 11 min at 100 Hz)


def control_dt(env_kwargs: dict[str, Any]) -> float:
    """The control period (s) of the env settings, with the env's own check of ``control_hz``."""
    return 1.0 / real("control_hz", env_kwargs.get("control_hz", 100.0), low=0.0, low_open=True)


def control_context(env_kwargs: dict[str, Any], airframe: Airframe | None = None) -> ControlContext:
    """What a controller is told about the plant of the env settings ``env_kwargs``: the nominal
    ``airframe`` (default: the env's), the control period, the rotors' time constant and the
    latencies of the settings' plant options (``preset``, ``rotor_tau_s``, ``*_delay_steps``;
    the env's own checks)."""
    base = ControlContext(airframe=airframe or Airframe(), control_dt=control_dt(env_kwargs))
    return base.on_plant(env_kwargs)


@dataclass
class EpisodeResult:
    """Metrics and time series of one closed-loop episode."""

    rmse: float  # m, position RMSE for t ≥ 3 s (inf if the episode ended before)
    max_error: float  # m, max position error for t ≥ 3 s
    diverged: bool
    termination: str | None  # reason the episode was terminated, None if it ran to the end
    control_cost: float  # N²·s, ∫ Σ f_i² dt
    duration: float  # s of simulated flight
    wall_time: float  # s
    steps: int
    t: np.ndarray = field(repr=False)  # s, (N,)
    #: m, world, (N, 3): the position the controller saw (behind sensor latency, the one measured
    #: ``obs_delay_steps`` periods earlier)
    pos: np.ndarray = field(repr=False)
    ref: np.ndarray = field(repr=False)  # m, world, (N, 3): the reference at each step's time
    #: m, (N,): the true ‖p − p_ref‖ at each step's time (``info["position_error"]``): what the
    #: metrics measure, so a sensor's latency is not charged to the controller as tracking error
    pos_error: np.ndarray = field(repr=False)
    thrusts: np.ndarray = field(repr=False)  # N, (N, 4)
    tilt: np.ndarray = field(repr=False)  # rad, (N,)
    residual_true: np.ndarray = field(repr=False)  # m/s², world, (N, 3)
    wind: np.ndarray = field(repr=False)  # m/s, world, (N, 3)
    extras: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def error(self) -> np.ndarray:
        """True position error norm over time, m (:attr:`pos_error`)."""
        return self.pos_error

    def metrics(self) -> dict[str, Any]:
        """The scalar results, JSON-friendly."""
        return {
            "rmse": self.rmse,
            "max_error": self.max_error,
            # m, over the whole episode (the yaw-start bound of docs/adaptive.md)
            "max_error_episode": float(self.error.max()) if self.error.size else float("nan"),
            "diverged": self.diverged,
            "termination": self.termination,
            "control_cost": self.control_cost,
            "duration": self.duration,
            "steps": self.steps,
            "wall_time": self.wall_time,
        }


def observation_env(controller: Any) -> dict[str, Any]:
    """The observation-shaping env arguments (:data:`OBSERVATION_ENV_KWARGS`) ``controller``
    was trained with — a policy file's ``preview`` — for a single or a batched controller;
    ``{}`` for one that needs none."""
    candidates = [controller, getattr(controller, "single", None)]
    candidates += list(getattr(controller, "controllers", ()))[:1]
    for c in candidates:
        kwargs = getattr(c, "env_kwargs", None)
        if isinstance(kwargs, dict):
            return {k: kwargs[k] for k in OBSERVATION_ENV_KWARGS if k in kwargs}
    return {}


_MAX_NESTING = 4  # controller levels _policies looks through (groups of batches of singles)


def _policies(controller: Any, depth: int = 0) -> list[Any]:
    """``controller`` and what it flies through: a batched controller's ``single``, a loop's
    ``controllers``, a group's ``parts`` (each in turn)."""
    found = [controller]
    if depth < _MAX_NESTING:
        children = [getattr(controller, "single", None)]
        children += list(getattr(controller, "controllers", ()) or ())
        children += [part[0] for part in getattr(controller, "parts", ()) or ()]
        for child in children:
            if child is not None:
                found += _policies(child, depth + 1)
    return found


def check_observation(controller: Any, env: Any) -> None:
    """A :class:`~residual_quad.controllers.policy_inputs.LayoutError` naming both layouts unless
    the env ``env`` (unwrapped; one env of a vector env) gives every policy ``controller`` flies
    (alone, batched or in groups) the observation it was trained on: the preview of its file's
    ``env_kwargs`` (:data:`OBSERVATION_ENV_KWARGS`), its ``K`` and its spacing. A policy without
    a preview reads the base fields of any env; an env that does not say its preview (a remote
    one) is left to the observation width check of the policy's inputs."""
    from residual_quad.controllers.policy_file import check_flown_preview

    flown = getattr(env, "preview_spec", _UNKNOWN)
    if flown is _UNKNOWN:
        return
    for policy in _policies(controller):
        kwargs = getattr(policy, "env_kwargs", None)
        spec = getattr(policy, "spec", None)
        if not isinstance(kwargs, dict) or not getattr(spec, "preview_k", 0):
            continue
        if "preview" not in kwargs:
            continue  # an in-memory policy: its trainer makes the env
        path = getattr(policy, "path", None)
        who = f"{getattr(policy, 'kind', 'the')} policy" + (f" {path}" if path else "")
        check_flown_preview(kwargs["preview"], flown, who)


_UNKNOWN = object()


def run_episode(
    controller: Controller | str,
    env: gym.Env | None = None,
    *,
    payload: str | float | None = None,
    wind: Any = None,
    trajectory: Any = None,
    seed: int = 0,
    reset_options: dict[str, Any] | None = None,
    callback: Any = None,
    frame_every: int = 0,
    env_id: str | None = None,
    **env_kwargs: Any,
) -> EpisodeResult:
    """Fly ``controller`` (an object or a registered name) for one episode.

    Args:
        controller: a :class:`Controller` or a spec for :func:`make_controller` (``geo``,
            ``hnewton:lm``, ``geo:kp=15``, ``my_pkg.ctrl:Factory``).
        env: an environment the caller built (``ResidualQuad-v0``, possibly in Gymnasium
            wrappers, which the flight goes through), like SB3's ``evaluate_policy(model, env)``;
            it is reset with ``seed`` and left open. ``None``: one is made with ``gym.make``
            from the scenario arguments below (and closed). Scenario arguments together with
            ``env`` are a ``ValueError`` naming them.
        payload, wind, trajectory: scenario (see ``ResidualQuad-v0``; default ``none``,
            ``calm``, ``hover``).
        seed: env seed (wind realization); the controller is reset with the same seed.
        reset_options: passed to ``env.reset`` (``yaw_offset``, ``position_offset``, ...).
        callback: optional ``callback(step, obs, action, info)`` called after every step.
        frame_every: if > 0, render the env (``render_mode="rgb_array"`` in ``env_kwargs``) after
            steps 1, 1 + n, 1 + 2n, ... into ``result.extras["frames"]``.
        env_id: the registered env to fly: ``ResidualQuad-v0`` (default) or
            ``ResidualQuadRemote-v0`` (a simulation server; give its ``address=`` in
            ``env_kwargs``).
        **env_kwargs: any other ``ResidualQuad-v0`` argument.
    """
    frame_every = integer("frame_every", frame_every, low=0)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable or None, got {callback!r}")
    scenario = {"payload": payload, "wind": wind, "trajectory": trajectory, "env_id": env_id}
    if env is not None:
        given = sorted([k for k, v in scenario.items() if v is not None] + list(env_kwargs))
        if given:
            raise ValueError(
                f"run_episode got env= and scenario arguments {given}: give the scenario to the "
                "env you build, or leave env out and run_episode makes one from them"
            )
        base = env.unwrapped  # the env's own attributes; the flight goes through the wrappers
        if isinstance(controller, str):
            controller = parse_spec(controller).build(ControlContext.from_env(base))
        return _fly(controller, env, base, seed, reset_options, callback, frame_every)
    if isinstance(controller, str):
        context = control_context(env_kwargs, env_kwargs.get("airframe"))
        controller = parse_spec(controller).build(context)
    # the env speaks the controller's action mode and gives the observation it was trained on
    # (a policy's preview) unless the caller insists on others
    env_kwargs.setdefault("action_mode", getattr(controller, "action_mode", "rotor"))
    for key, value in observation_env(controller).items():
        env_kwargs.setdefault(key, value)
    made = gym.make(
        env_id or ENV_ID,
        payload="none" if payload is None else payload,
        wind="calm" if wind is None else wind,
        trajectory="hover" if trajectory is None else trajectory,
        disable_env_checker=True,
        **env_kwargs,
    ).unwrapped
    try:
        return _fly(controller, made, made, seed, reset_options, callback, frame_every)
    finally:
        made.close()  # also when a reset option or the controller raises


def _fly(
    controller: Controller,
    env: gym.Env,
    base: Any,
    seed: int,
    reset_options: dict[str, Any] | None,
    callback: Any,
    frame_every: int,
) -> EpisodeResult:
    """:func:`run_episode`'s flight through ``env`` (``base``: the env under its wrappers)."""
    if getattr(controller, "action_mode", "rotor") != base.action_mode:
        raise ValueError(
            f"controller acts in action_mode {controller.action_mode!r} but the env was "
            f"made with {base.action_mode!r}"
        )
    check_observation(controller, base)
    t0 = time.perf_counter()
    obs, info = env.reset(seed=seed, options=reset_options)
    controller.reset(seed)
    # buffers sized for the whole episode up to a cap, grown by doubling past it: a long
    # episode_s costs memory only as far as it is flown
    n = min(base.max_steps + 1, _INITIAL_CAPACITY)
    dt = base.control_dt
    t = np.empty(n)
    pos, ref, res, wnd = (np.empty((n, 3)) for _ in range(4))
    err = np.empty(n)
    thr = np.empty((n, 4))
    cos_tilt = np.empty(n)  # R[2, 2]; the angle is taken once after the flight
    t[0], pos[0], ref[0], err[0] = 0.0, obs[L.pos], obs[L.ref_pos], info["position_error"]
    thr[0], res[0], wnd[0] = obs[L.thrusts], info["residual_accel"], info["wind"]
    cos_tilt[0] = obs[L.R22]
    k = 0
    termination = None
    frames: list[np.ndarray] = []
    while True:
        action = controller.policy(obs)
        obs, _, terminated, truncated, info = env.step(action)
        k += 1
        if k == n:  # full: double the buffers
            t, pos, ref, err, res, wnd, thr, cos_tilt = (
                np.concatenate([a, np.empty_like(a)])
                for a in (t, pos, ref, err, res, wnd, thr, cos_tilt)
            )
            n *= 2
        t[k], pos[k], ref[k] = info["t"], obs[L.pos], obs[L.ref_pos]
        err[k] = info["position_error"]
        thr[k], res[k], wnd[k] = obs[L.thrusts], info["residual_accel"], info["wind"]
        cos_tilt[k] = obs[L.R22]
        if callback is not None:
            callback(k, obs, action, info)
        if frame_every and (k - 1) % frame_every == 0:
            frames.append(env.render())
        if terminated or truncated:
            termination = info["termination"]
            break
    wall = time.perf_counter() - t0
    result = episode_result(
        t, pos, ref, err, thr, cos_tilt, res, wnd, k, dt, bool(info["diverged"]), termination,
        wall,
    )  # fmt: skip
    if frame_every:
        result.extras["frames"] = frames
    return result


def episode_result(
    t: np.ndarray,
    pos: np.ndarray,
    ref: np.ndarray,
    pos_error: np.ndarray,
    thrusts: np.ndarray,
    cos_tilt: np.ndarray,
    residual: np.ndarray,
    wind: np.ndarray,
    steps: int,
    dt: float,
    diverged: bool,
    termination: str | None,
    wall_time: float,
) -> EpisodeResult:
    """The :class:`EpisodeResult` of one flight's recorded series (rows ``0..steps``; the buffers
    may be longer): the one place the metrics are computed, for :func:`run_episode` and
    :func:`fly_batch` alike."""
    sl = slice(0, steps + 1)
    result = EpisodeResult(
        rmse=float("inf"),
        max_error=float("inf"),
        diverged=diverged,
        termination=termination,
        control_cost=float(np.sum(thrusts[1 : steps + 1] ** 2) * dt),
        duration=steps * dt,
        wall_time=wall_time,
        steps=steps,
        t=t[sl].copy(),
        pos=pos[sl].copy(),
        ref=ref[sl].copy(),
        pos_error=pos_error[sl].copy(),
        thrusts=thrusts[sl].copy(),
        tilt=np.arccos(np.clip(cos_tilt[sl], -1.0, 1.0)),
        residual_true=residual[sl].copy(),
        wind=wind[sl].copy(),
    )
    steady = result.t >= STEADY_STATE_FROM_S - 1e-9
    if steady.any() and not result.diverged:
        err = result.error[steady]
        result.rmse = float(np.sqrt(np.mean(err**2)))
        result.max_error = float(err.max())
    return result


@dataclass(frozen=True)
class RunSpec:
    """One closed-loop run: a controller label, a scenario and a seed.

    The matrix needs only the first five fields; named scenarios (the stress study) add trajectory
    parameters, reset options, their own episode length and a scenario label. ``controller`` is the
    run's label: for a compact spec (``"geo"``, ``"hnewton:lm"``) the spec itself; a sweep with
    user specs maps its labels to specs (``SweepConfig.controller_spec``).
    """

    controller: str
    payload: Any = "none"
    wind: Any = "calm"  # level name or (mean, sigma) in m/s
    trajectory: str = "hover"
    seed: int = 0
    trajectory_params: tuple[tuple[str, Any], ...] = ()  # e.g. (("period", 6.0),)
    reset_options: tuple[tuple[str, Any], ...] | None = None  # ResidualQuad-v0 reset options
    episode_s: float = 20.0  # s
    scenario: str | None = None  # label of a named scenario
    group: str | None = None  # scenario group

    def env_scenario(self, shared: dict[Any, Any] | None = None) -> dict[str, Any]:
        """The run's env scenario (the keys of a vector env scenario): ``payload``, ``wind`` (a
        name or ``(mean, sigma)``), ``trajectory`` (a name, or the built-in one with
        ``trajectory_params``) and ``options`` (the reset options, when given). ``shared`` (a
        dict kept by the caller) hands out one trajectory instance per name and parameters —
        built-in trajectories are frozen and pure, and a vector env computes a shared one once."""
        trajectory: Any = self.trajectory
        if self.trajectory_params:
            key = (self.trajectory, self.trajectory_params)
            cache = shared if shared is not None else {}
            if key not in cache:
                cache[key] = make_named_trajectory(self.trajectory, **dict(self.trajectory_params))
            trajectory = cache[key]
        scenario: dict[str, Any] = {
            "payload": self.payload,
            "wind": self.wind if isinstance(self.wind, str) else tuple(self.wind),
            "trajectory": trajectory,
        }
        if self.reset_options is not None:
            scenario["options"] = dict(self.reset_options)
        return scenario

    @property
    def run_id(self) -> str:
        if self.scenario is not None:
            return f"{self.controller}|{self.scenario}|{self.seed}"
        wind = self.wind if isinstance(self.wind, str) else ",".join(map(str, self.wind))
        return f"{self.controller}|{self.payload}|{wind}|{self.trajectory}|{self.seed}"


def parse_label(label: str) -> tuple[str, dict[str, Any]]:
    """A compact spec → (factory target, options): ``"hnewton:lm"`` → (``"hnewton"``,
    ``{"method": "lm"}``), ``"geo:kp=15"`` → (``"geo"``, ``{"kp": 15}``), ``"pkg.mod:Make"`` →
    (``"pkg.mod:Make"``, ``{}``); a plain name has no options (grammar: ``docs/controllers.md``)."""
    spec = parse_spec(label)
    return spec.target, dict(spec.options)


def build_controller(
    label: str | ControllerSpec,
    env: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> Controller:
    """The controller of a spec (a compact string or a resolved :class:`ControllerSpec`), for the
    env settings ``env`` (its control rate and rotors: :func:`control_context`); ``options`` win
    over the spec's own."""
    spec = label if isinstance(label, ControllerSpec) else parse_spec(label)
    return spec.build(control_context(env or {}), **(options or {}))


def fly(
    spec: RunSpec,
    env: dict[str, Any] | None = None,
    controller_options: dict[str, Any] | None = None,
    callback: Callable[..., None] | None = None,
    controller: Controller | ControllerSpec | None = None,
) -> EpisodeResult:
    """Fly one spec with :func:`run_episode`, the one episode loop (:func:`fly_batch` flies
    many specs at once on the vector env).

    Args:
        spec: the run.
        env: extra ``ResidualQuad-v0`` keyword arguments.
        controller_options: overrides for the controller's factory.
        callback: ``run_episode`` callback.
        controller: an already built controller, or the resolved spec of a user label
            (``spec.controller`` is then only a label).
    """
    env = env or {}
    if controller is None or isinstance(controller, ControllerSpec):
        controller = build_controller(controller or spec.controller, env, controller_options)
    scenario = spec.env_scenario()
    return run_episode(
        controller,
        payload=scenario["payload"],
        wind=scenario["wind"],
        trajectory=scenario["trajectory"],
        seed=spec.seed,
        reset_options=scenario.get("options"),
        callback=callback,
        episode_s=spec.episode_s,
        **env,
    )


def fly_batch(
    specs: Sequence[RunSpec],
    controller: Any,
    env: dict[str, Any] | None = None,
    *,
    nthread: int = 1,
    keep_actions: bool = False,
) -> list[EpisodeResult]:
    """Fly ``len(specs)`` runs at once on the vector env: the batched counterpart of :func:`fly`.

    Each run is one env of a :class:`~residual_quad.envs.vector_env.ResidualQuadVectorEnv`
    (its scenario, reset options and seed), flown by ``controller``, a
    :class:`~residual_quad.controllers.batch.BatchedController` of ``len(specs)`` envs, until its
    episode ends; the metrics come from :func:`episode_result`, as :func:`run_episode`'s do, and
    equal them to ≤ 1e-9 (``tests/evaluation/test_sweep_vector.py``). A run that ended is fed its
    first observation until the batch is done (its actions are ignored, its rows cut off).
    ``extras["residual_est"]`` holds the estimate the controller applied at each step (NaN rows
    where it has none, as :func:`~residual_quad.evaluation.sweep.engine.run_one` records it); each
    result's ``wall_time`` is the batch's wall time shared evenly.

    Args:
        specs: the runs; they must share ``episode_s`` (one vector env, one episode length).
        controller: the batch controller, ``controller.n_envs == len(specs)``.
        env: extra ``ResidualQuad-v0`` keyword arguments (shared).
        nthread: ``rollout`` threads (1: the calling thread; one process per core is faster).
        keep_actions: also keep each run's actions, ``extras["actions"]`` (steps, 4), the env's
            action units (the tuning objective's smoothness term reads them).
    """
    from residual_quad.envs.vector_env import ResidualQuadVectorEnv

    specs = list(specs)
    n = len(specs)
    if n == 0:
        return []
    if getattr(controller, "n_envs", None) != n:
        raise ValueError(
            f"the batch controller flies {getattr(controller, 'n_envs', None)} envs, "
            f"but {n} runs were given"
        )
    lengths = sorted({s.episode_s for s in specs})
    if len(lengths) != 1:
        raise ValueError(f"the runs of one batch must share episode_s, got {lengths}")
    shared: dict[Any, Any] = {}  # one trajectory instance per (name, params)
    scenarios = [s.env_scenario(shared) for s in specs]
    kwargs = dict(env or {})
    kwargs.setdefault("action_mode", getattr(controller, "action_mode", "rotor"))
    for key, value in observation_env(controller).items():
        kwargs.setdefault(key, value)
    venv = ResidualQuadVectorEnv(
        n, scenarios=scenarios, nthread=nthread, episode_s=lengths[0], **kwargs
    )
    try:
        if controller.action_mode != venv.envs[0].action_mode:
            raise ValueError(
                f"controller acts in action_mode {controller.action_mode!r} but the env was "
                f"made with {venv.envs[0].action_mode!r}"
            )
        check_observation(controller, venv.envs[0])
        t0 = time.perf_counter()
        seeds = [s.seed for s in specs]
        obs, info = venv.reset(seed=seeds)
        controller.reset_batch(seeds)
        steps = venv.max_steps
        dt = venv.control_dt
        t = np.empty((steps + 1, n))
        pos, ref, res, wnd, est = (np.empty((steps + 1, n, 3)) for _ in range(5))
        err = np.empty((steps + 1, n))
        thr = np.empty((steps + 1, n, 4))
        cos_tilt = np.empty((steps + 1, n))
        actions = np.empty((steps, n, 4)) if keep_actions else None
        t[0], pos[0], ref[0] = 0.0, obs[:, L.pos], obs[:, L.ref_pos]
        err[0] = info["position_error"]
        thr[0], res[0], wnd[0] = obs[:, L.thrusts], info["residual_accel"], info["wind"]
        cos_tilt[0], est[0] = obs[:, L.R22], np.nan
        first_obs = obs.copy()
        done = np.zeros(n, dtype=bool)
        end = np.full(n, steps)
        diverged = np.zeros(n, dtype=bool)
        termination = np.full(n, None, dtype=object)
        k = 0
        while not done.all():
            feed = np.where(done[:, None], first_obs, obs)
            action = controller.policy_batch(feed)
            applied = getattr(controller, "last_residual", None)
            if actions is not None:
                actions[k] = action
            obs, _, terminated, truncated, info = venv.step(action)
            k += 1
            t[k], pos[k], ref[k] = info["t"], obs[:, L.pos], obs[:, L.ref_pos]
            err[k] = info["position_error"]
            thr[k], res[k], wnd[k] = obs[:, L.thrusts], info["residual_accel"], info["wind"]
            cos_tilt[k] = obs[:, L.R22]
            est[k] = np.nan if applied is None else applied
            ended = (terminated | truncated) & ~done
            if ended.any():
                end[ended] = k
                diverged[ended] = info["diverged"][ended]
                termination[ended] = info["termination"][ended]
                done |= ended
        wall = time.perf_counter() - t0
    finally:
        venv.close()
    results = []
    for i in range(n):
        result = episode_result(
            t[:, i],
            pos[:, i],
            ref[:, i],
            err[:, i],
            thr[:, i],
            cos_tilt[:, i],
            res[:, i],
            wnd[:, i],
            int(end[i]),
            dt,
            bool(diverged[i]),
            termination[i],
            wall / n,
        )
        result.extras["residual_est"] = est[: end[i] + 1, i].copy()
        if actions is not None:
            result.extras["actions"] = actions[: end[i], i].copy()
        results.append(result)
    return results
