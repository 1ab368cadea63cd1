"""The report's flight animation: controllers flying one scenario side by side, rendered by
MuJoCo off-screen (headless: EGL or OSMesa) into a GIF.

Each controller's flight is one job (:func:`frames_or_reason`), so the report stage renders them
in parallel worker processes (:func:`residual_quad.evaluation.report.figures.make_figures`);
:func:`write_animation` puts the frames together.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from residual_quad.controllers.base import ControlContext
from residual_quad.controllers.specs import parse_spec

#: the animation's frames are 320 × 240: a 1024² shadow map (MuJoCo's default is 4096²) and no
#: multisampling draw the same scene, camera and flight three times faster on a software
#: renderer (mean pixel difference 0.15 / 255; docs/results/benchmarks.md)
GIF_SHADOW_SIZE = 1024
GIF_SAMPLES = 0


def flight_frames(
    name: str, payload: str, wind: str, trajectory: str, seconds: float, fps: int
) -> list[np.ndarray]:
    """The rendered frames (320 × 240, RGB) of controller ``name`` flying one scenario (seed 0),
    one frame every ``100 / fps`` control steps."""
    import gymnasium as gym

    from residual_quad.envs.registration import ENV_ID
    from residual_quad.episode import run_episode

    ctrl = parse_spec(name).build(ControlContext())
    env = gym.make(
        ENV_ID,
        payload=payload,
        wind=wind,
        trajectory=trajectory,
        episode_s=seconds,
        action_mode=getattr(ctrl, "action_mode", "rotor"),
        render_mode="rgb_array",
        width=320,
        height=240,
        disable_env_checker=True,
    ).unwrapped
    quality = env.plant.model.vis.quality  # read when the renderer is made, at the first frame
    quality.shadowsize, quality.offsamples = GIF_SHADOW_SIZE, GIF_SAMPLES
    try:
        frame_every = max(1, round(100.0 / fps))  # control steps per frame at 100 Hz
        return run_episode(ctrl, env, seed=0, frame_every=frame_every).extras["frames"]
    finally:
        env.close()


def flight_animation(
    out: Path,
    controllers: list[str],
    payload: str = "heavy",
    wind: str = "windy",
    trajectory: str = "helix",
    seconds: float = 8.0,
    fps: int = 10,
) -> Path | None:
    """GIF of the controllers flying side by side (MuJoCo render); None without OpenGL."""
    frames_per = {}
    for name in controllers:
        frames = frames_or_reason(name, payload, wind, trajectory, seconds, fps)
        if isinstance(frames, str):
            print(frames)
            return None
        frames_per[name] = frames
    return write_animation(out, frames_per, f"{payload} payload, {wind}, {trajectory}", fps)


def frames_or_reason(
    name: str, payload: str, wind: str, trajectory: str, seconds: float, fps: int
) -> list[np.ndarray] | str:
    """:func:`flight_frames`, or the line saying why nothing renders here (no OpenGL context):
    a job that a worker process runs and never fails on a machine without rendering."""
    try:  # headless without MUJOCO_GL: the env's renderer picks EGL or OSMesa itself
        return flight_frames(name, payload, wind, trajectory, seconds, fps)
    except Exception as exc:  # no OpenGL context on this machine
        return f"flight animation skipped: rendering is not available here ({exc})"


def write_animation(
    out: Path, frames_per: dict[str, list[np.ndarray]], caption: str, fps: int
) -> Path:
    """``out/flight.gif``: the controllers' frames side by side, each named, with ``caption``
    and the time below."""
    from PIL import Image, ImageDraw

    controllers = list(frames_per)
    n = min(len(f) for f in frames_per.values())
    images = []
    for i in range(n):
        img = Image.fromarray(np.concatenate([frames_per[c][i] for c in controllers], axis=1))
        draw = ImageDraw.Draw(img)
        for j, name in enumerate(controllers):
            draw.text((8 + 320 * j, 6), name, fill=(255, 255, 255))
        draw.text((8, 224), f"{caption}  t = {i / fps:4.1f} s", fill=(255, 255, 255))
        images.append(img)
    path = out / "flight.gif"
    images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)
    return path
