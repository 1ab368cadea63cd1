"""A minimal TensorBoard scalar writer on the ``tensorboard`` package's own record writer, and the
per-step RLS/residual logger used by ``rquad eval/demo --tensorboard``.

Why not ``torch.utils.tensorboard``: torch is an optional extra, not a core dependency. Why not
``tensorboard.summary.Writer``: it is marked experimental and writes one event per value through
an asynchronous queue (~100 µs each); :class:`ScalarWriter` writes one event per step holding all
of that step's scalars, synchronously, in the standard ``events.out.tfevents.*`` format
(``Summary.Value.simple_value``) that TensorBoard and :func:`read_scalars` read back.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from residual_quad.controllers.residual.estimator import rejected_updates

_UID = itertools.count()


class ScalarWriter:
    """Append scalar summaries to a new event file in ``logdir``."""

    def __init__(self, logdir: str | Path):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{next(_UID)}"
        )
        self.path = self.logdir / name
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._writer = RecordWriter(self._fh)
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Write several tagged scalars for one step (one event)."""
        V = self._summary.Value
        summary = self._summary(value=[V(tag=k, simple_value=float(v)) for k, v in values.items()])
        self._write(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars(step, {tag: value})

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._writer.close()  # flushes and closes the file

    def __enter__(self) -> ScalarWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_scalars(logdir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series under one run directory: ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


class EpisodeLogger:
    """``run_episode`` callback logging the residual estimate vs the truth, per step.

    Run directories under ``logdir/<run>``: ``true/`` and ``estimate/`` hold the same tags
    ``residual/x|y|z`` (world, m/s²) so TensorBoard overlays them on one chart; ``rls/`` holds
    ``rls/P_trace``, ``rls/prediction_error`` (‖true − estimate‖, m/s²), ``rls/innovation``
    (‖measured − estimate‖ as the controller saw it, one step later), ``rls/applied`` (0 during
    warm-up, 1 after), ``rls/rejected`` (RLS updates skipped so far for an implausible or
    non-finite measurement), ``rls/warmup_end`` (one point at the step the warm-up ended,
    value = t in s) and ``tracking/position_error`` (m). Controllers without a residual estimate
    log zeros for it and no ``rls/`` RLS tags.

    Covariance management (``rls.covariance``, ``docs/adaptive.md``): ``rls/P_eig_max`` and
    ``rls/P_eig_min`` (the extreme eigenvalues of P, normalized units) show whether P lives at a
    bound; with the OOD guard on, ``ood/weight`` (1 inside the envelope, 0 fully replaced); with a
    disturbance observer (``geo_rls_dob``), ``observer/torque_x|y|z`` (N·m, body).
    """

    def __init__(self, logdir: str | Path, controller: Any):
        self.controller = controller
        root = Path(logdir)
        self.w_true = ScalarWriter(root / "true")
        self.w_est = ScalarWriter(root / "estimate")
        self.w_rls = ScalarWriter(root / "rls")
        self._warmup_logged = False

    def __call__(self, step: int, obs: np.ndarray, action: np.ndarray, info: dict) -> None:
        c = self.controller
        state = getattr(c, "state", None)  # a law's state (LawController)
        es = getattr(state, "estimator", None)  # the residual estimator's part
        true = np.asarray(info["residual_accel"], dtype=float)
        est = np.zeros(3) if es is None else np.asarray(es.last_estimate, dtype=float)
        self.w_true.scalars(
            step, {"residual/x": true[0], "residual/y": true[1], "residual/z": true[2]}
        )
        self.w_est.scalars(step, {"residual/x": est[0], "residual/y": est[1], "residual/z": est[2]})
        values = {
            "rls/prediction_error": float(np.linalg.norm(true - est)),
            "tracking/position_error": float(info["position_error"]),
        }
        estimator = getattr(c, "estimator", None) if es is not None else None
        if es is not None and es.rls is not None:
            rls = estimator.rls
            values["rls/P_trace"] = float(rls.trace(es.rls))
            eig = np.linalg.eigvalsh(rls.covariance(es.rls))
            values["rls/P_eig_max"] = float(eig[-1])
            values["rls/P_eig_min"] = float(eig[0])
            values["rls/innovation"] = float(np.linalg.norm(es.last_prediction_error))
            values["rls/applied"] = float(rls.warmup_done(es.rls))
            values["rls/rejected"] = float(rejected_updates(es))
            if not self._warmup_logged and es.warmup_end_step >= 0:
                values["rls/warmup_end"] = float(info["t"])
                self._warmup_logged = True
        if estimator is not None and estimator.config.ood.enabled:
            values["ood/weight"] = float(es.ood_weight)
        if getattr(state, "observer", None) is not None:
            tx, ty, tz = (float(v) for v in c.law.disturbance_torque(state))
            values.update(
                {"observer/torque_x": tx, "observer/torque_y": ty, "observer/torque_z": tz}
            )
        self.w_rls.scalars(step, values)

    def close(self) -> None:
        for w in (self.w_true, self.w_est, self.w_rls):
            w.close()
