"""Flight telemetry as standard ROS2 messages: a rosbag2-compatible MCAP log and a Foxglove live
view, on the source's topic names [RES §10].

Each flight frame (an observation and its ``info``) becomes one message per topic of
:data:`TOPICS`, encoded once as CDR with the ROS 2 Humble definitions of ``rosbags``' type store,
and goes to every sink: :class:`McapSink` (``mcap``: a single ``.mcap`` file with the ``ros2``
profile, ``ros2msg`` schemas and ``cdr`` messages — ``ros2 bag play FILE.mcap`` and Foxglove open
it) and :class:`FoxgloveSink` (``foxglove-sdk``: a Foxglove WebSocket server with the same
channels). Time stamps are simulated time since the first frame of the recording (ns).

Crash safety: the MCAP log is made durable once per :data:`FLUSH_EVERY_S` of flight (simulated
time): the chunk in progress is written out and followed by a provisional end of file (a data
end and a footer without a summary, which readers accept by scanning), which the next chunk
overwrites. A recorder killed without warning (``kill -9``, a crash) therefore leaves a complete,
readable file that lacks at most the last second of flight; a clean close writes the full
summary. Per-frame flushes would lose nothing but triple the file (compression works per chunk),
and a chunk-size bound alone cannot bound the lost flight time: it depends on the control rate.
Only a process crash is covered: nothing is fsynced, so a power cut may lose what the operating
system had not yet written. A file cut inside a write (the process killed while it wrote a
chunk) is read up to the cut by :func:`recover_flight_log`.

Frames: ``world`` is the simulation's world frame (ENU, z up), ``base_link`` the body frame.
Odometry twist is in ``base_link`` (REP 105/147); the other vectors are in ``world`` except the
IMU's, which are body-frame. Ground truth (residual, disturbance, wind) is marked so in
:data:`TOPICS` and never feeds a controller.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import mujoco
import numpy as np

from residual_quad.envs.observation import ObsLayout as L
from residual_quad.remote import require

WORLD_FRAME = "world"
BODY_FRAME = "base_link"

TOPICS: dict[str, tuple[str, str]] = {
    "/uav/odom": ("nav_msgs/msg/Odometry", "observed pose (world) and twist (base_link)"),
    "/tf": ("tf2_msgs/msg/TFMessage", "world → base_link"),
    "/uav/imu": ("sensor_msgs/msg/Imu", "attitude, body rates (rad/s), specific force (m/s²)"),
    "/uav/reference": ("geometry_msgs/msg/PointStamped", "reference position, world, m"),
    "/uav/tracking_error": ("geometry_msgs/msg/Vector3Stamped", "position − reference, world, m"),
    "/uav/residual": ("geometry_msgs/msg/Vector3Stamped", "truth: period residual, world, m/s²"),
    "/uav/disturbance": ("geometry_msgs/msg/Vector3Stamped", "truth: drag force, world, N"),
    "/uav/wind": ("geometry_msgs/msg/Vector3Stamped", "truth: wind velocity, world, m/s"),
    "/uav/rotor_thrusts": ("std_msgs/msg/Float64MultiArray", "rotor thrusts f0..f3, N"),
}
"""Topic → (ROS 2 message type, what it carries)."""

FLUSH_EVERY_S = 1.0
"""Flight time (simulated, s) between two flushes of the MCAP log: what a crash may lose."""
NS_PER_S = 1_000_000_000
MCAP_MAGIC = b"\x89MCAP0\r\n"


class Sink(Protocol):
    """Where encoded telemetry goes."""

    def write(self, topic: str, data: bytes, stamp_ns: int) -> None: ...

    def end_frame(self, stamp_ns: int) -> None:
        """Every topic of the frame at ``stamp_ns`` is written (a log may make it durable)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class FlightLogStats:
    """What an MCAP flight log holds."""

    messages: int
    flight_s: float  # s, from the first message's stamp to the last one's
    bytes: int  # size of the file

    def __str__(self) -> str:
        return f"{self.messages} messages, {self.flight_s:.2f} s of flight, {self.bytes} bytes"


def _typestore() -> Any:
    typesys = require("rosbags.typesys")
    return typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)


def message_definitions() -> dict[str, str]:
    """ROS 2 message type → its ``ros2msg`` definition text with dependencies (as rosbag2 and
    Foxglove expect in a schema)."""
    store = _typestore()
    return {
        msgtype: store.generate_msgdef(msgtype, ros_version=2)[0] for msgtype, _ in TOPICS.values()
    }


class FlightTelemetry:
    """Encode flight frames as the ROS 2 messages of :data:`TOPICS` and hand them to ``sinks``.

    Call it as ``telemetry(stamp_ns, obs, info)`` (the server's hook signature; an extra
    ``action`` argument is accepted and ignored) or use :meth:`episode_callback` as a
    ``run_episode`` callback.
    """

    def __init__(self, sinks: Sequence[Sink]):
        self.sinks = list(sinks)
        self._store = _typestore()
        t = self._store.types
        self._t = t
        self._seq = 0

    def __call__(
        self, stamp_ns: int, obs: np.ndarray, info: Mapping[str, Any], action: Any = None
    ) -> None:
        for topic, data in self.encode(stamp_ns, obs, info).items():
            for sink in self.sinks:
                sink.write(topic, data, stamp_ns)
        for sink in self.sinks:
            sink.end_frame(stamp_ns)

    def episode_callback(self) -> Any:
        """A ``run_episode`` callback that records every step (stamped with ``info["t"]``)."""

        def callback(step: int, obs: np.ndarray, action: Any, info: Mapping[str, Any]) -> None:
            self(int(round(info["t"] * 1e9)), obs, info)

        return callback

    def encode(self, stamp_ns: int, obs: np.ndarray, info: Mapping[str, Any]) -> dict[str, bytes]:
        """Topic → CDR bytes of one frame."""
        t = self._t
        obs = np.asarray(obs, dtype=np.float64)
        stamp = t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
        world = t["std_msgs/msg/Header"](stamp=stamp, frame_id=WORLD_FRAME)
        body = t["std_msgs/msg/Header"](stamp=stamp, frame_id=BODY_FRAME)
        vec = t["geometry_msgs/msg/Vector3"]
        rot = obs[L.rot].reshape(3, 3)
        q = np.empty(4)  # w, x, y, z
        mujoco.mju_mat2Quat(q, rot.ravel())
        quat = t["geometry_msgs/msg/Quaternion"](x=q[1], y=q[2], z=q[3], w=q[0])
        pos, vel, omega = obs[L.pos], obs[L.vel], obs[L.omega_b]

        def v3(a: Any) -> Any:
            x, y, z = np.asarray(a, dtype=np.float64).tolist()
            return vec(x=x, y=y, z=z)

        def stamped(header: Any, a: Any) -> Any:
            return t["geometry_msgs/msg/Vector3Stamped"](header=header, vector=v3(a))

        zeros36, zeros9 = np.zeros(36), np.zeros(9)
        point = t["geometry_msgs/msg/Point"](x=pos[0], y=pos[1], z=pos[2])
        odom = t["nav_msgs/msg/Odometry"](
            header=world,
            child_frame_id=BODY_FRAME,
            pose=t["geometry_msgs/msg/PoseWithCovariance"](
                pose=t["geometry_msgs/msg/Pose"](position=point, orientation=quat),
                covariance=zeros36,
            ),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](
                twist=t["geometry_msgs/msg/Twist"](linear=v3(rot.T @ vel), angular=v3(omega)),
                covariance=zeros36,
            ),
        )
        tf = t["tf2_msgs/msg/TFMessage"](
            transforms=[
                t["geometry_msgs/msg/TransformStamped"](
                    header=world,
                    child_frame_id=BODY_FRAME,
                    transform=t["geometry_msgs/msg/Transform"](translation=v3(pos), rotation=quat),
                )
            ]
        )
        imu = t["sensor_msgs/msg/Imu"](
            header=body,
            orientation=quat,
            orientation_covariance=zeros9,
            angular_velocity=v3(omega),
            angular_velocity_covariance=zeros9,
            linear_acceleration=v3(obs[L.imu]),
            linear_acceleration_covariance=zeros9,
        )
        ref = obs[L.ref_pos]
        reference = t["geometry_msgs/msg/PointStamped"](
            header=world, point=t["geometry_msgs/msg/Point"](x=ref[0], y=ref[1], z=ref[2])
        )
        dim = t["std_msgs/msg/MultiArrayDimension"](label="rotor", size=4, stride=4)
        thrusts = t["std_msgs/msg/Float64MultiArray"](
            layout=t["std_msgs/msg/MultiArrayLayout"](dim=[dim], data_offset=0),
            data=np.array(obs[L.thrusts], dtype=np.float64),
        )
        messages = {
            "/uav/odom": odom,
            "/tf": tf,
            "/uav/imu": imu,
            "/uav/reference": reference,
            "/uav/tracking_error": stamped(world, pos - ref),
            "/uav/residual": stamped(world, info["residual_accel"]),
            "/uav/disturbance": stamped(world, info["drag_force"]),
            "/uav/wind": stamped(world, info["wind"]),
            "/uav/rotor_thrusts": thrusts,
        }
        serialize = self._store.serialize_cdr
        return {topic: bytes(serialize(msg, TOPICS[topic][0])) for topic, msg in messages.items()}

    def close(self) -> None:
        """Close every sink (finishes the MCAP file, stops the live server)."""
        for sink in self.sinks:
            sink.close()


class McapSink:
    """A rosbag2-compatible single-file MCAP log (``ros2`` profile, ``cdr`` messages), durable
    every :data:`FLUSH_EVERY_S` of flight (see the module docstring)."""

    def __init__(self, path: str | Path):
        writer_mod = require("mcap.writer")
        if not hasattr(writer_mod.Writer, "flush"):  # an older mcap cannot close a chunk
            raise ImportError(
                "flight logs need an mcap whose Writer has flush() (constraints.txt pins one): "
                'pip install -c constraints.txt -e ".[server]"'
            )
        self.path = Path(path)
        if self.path.suffix != ".mcap":
            raise ValueError(f"a flight log must be a .mcap file, got {str(path)!r}")
        if not self.path.parent.is_dir():
            raise ValueError(f"folder {str(self.path.parent)!r} of the flight log does not exist")
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._writer = writer_mod.Writer(self._file)
        self._writer.start(profile="ros2", library="residual_quad")
        self._channels: dict[str, int] = {}
        self._sequence = 0
        self._first_ns: int | None = None
        self._last_ns: int | None = None
        self._flushed_ns: int | None = None  # stamp of the last frame made durable
        definitions = message_definitions()
        schema_ids: dict[str, int] = {}
        for topic, (msgtype, _) in TOPICS.items():
            if msgtype not in schema_ids:
                schema_ids[msgtype] = self._writer.register_schema(
                    msgtype, "ros2msg", definitions[msgtype].encode()
                )
            self._channels[topic] = self._writer.register_channel(
                topic=topic, message_encoding="cdr", schema_id=schema_ids[msgtype]
            )
        self._closed = False
        self._persist()  # from the start, a crash leaves a readable (empty) log

    def write(self, topic: str, data: bytes, stamp_ns: int) -> None:
        self._sequence += 1
        if self._first_ns is None:
            self._first_ns = stamp_ns
        self._last_ns = stamp_ns
        self._writer.add_message(
            channel_id=self._channels[topic],
            log_time=stamp_ns,
            publish_time=stamp_ns,
            data=data,
            sequence=self._sequence,
        )

    def end_frame(self, stamp_ns: int) -> None:
        """Make the log durable when ``FLUSH_EVERY_S`` of flight has passed since the last time
        (or the clock went back: a new recording in the same file)."""
        if self._flushed_ns is None:
            self._flushed_ns = stamp_ns
        elif not 0 <= stamp_ns - self._flushed_ns < FLUSH_EVERY_S * NS_PER_S:
            self._persist()
            self._flushed_ns = stamp_ns

    def _persist(self) -> None:
        """Write the chunk in progress, then a provisional end of file (data end, a footer
        without a summary, the magic) that the next chunk overwrites."""
        self._writer.flush()
        end = self._file.tell()
        self._file.write(_provisional_end())
        self._file.flush()
        self._file.seek(end)

    def stats(self) -> FlightLogStats:
        """What the log holds so far (its size on disk, once closed, is final)."""
        span = 0 if self._first_ns is None else self._last_ns - self._first_ns
        return FlightLogStats(self._sequence, span / NS_PER_S, self.path.stat().st_size)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.finish()
            self._file.truncate()  # nothing of a provisional end may outlast the summary
            self._file.close()


def _provisional_end() -> bytes:
    """A data end record, a footer with no summary and the closing magic: what turns the data
    written so far into a complete MCAP file (readers then scan the data section)."""
    records = require("mcap.records")
    builder = require("mcap.data_stream").RecordBuilder()
    records.DataEnd(data_section_crc=0).write(builder)
    records.Footer(summary_start=0, summary_offset_start=0, summary_crc=0).write(builder)
    return builder.end() + MCAP_MAGIC


def _readable_records(source: Any) -> Iterator[Any]:
    """The records of an MCAP stream up to its end or to the first that cannot be read (a file
    cut inside a write ends there; chunk checksums are verified)."""
    exceptions = require("mcap.exceptions")
    reader = require("mcap.stream_reader").StreamReader(source, validate_crcs=True)
    records = reader.records
    while True:
        try:
            yield next(records)
        except StopIteration:
            return
        except (exceptions.McapError, ValueError, struct.error):  # a cut or damaged record
            return


def recover_flight_log(source: str | Path, target: str | Path) -> FlightLogStats:
    """Copy every message that can be read from the MCAP log ``source`` (which may be cut short
    anywhere, e.g. by a crash inside a write) into a new, finished log ``target`` with its
    summary. Returns what ``target`` holds."""
    source, target = Path(source), Path(target)
    if source.resolve() == target.resolve():
        raise ValueError(
            f"recover_flight_log writes a new file: target {str(target)!r} is the source"
        )
    if target.suffix != ".mcap":
        raise ValueError(f"a flight log must be a .mcap file, got {str(target)!r}")
    records_mod = require("mcap.records")
    writer_mod = require("mcap.writer")
    schemas: dict[int, int] = {}  # source id -> target id
    channels: dict[int, int] = {}
    count, first, last = 0, None, None
    with open(source, "rb") as src, open(target, "wb") as dst:
        writer = writer_mod.Writer(dst)
        started = False
        for record in _readable_records(src):
            if isinstance(record, records_mod.Header):
                writer.start(profile=record.profile, library=record.library)
                started = True
            elif not started:
                break
            elif isinstance(record, records_mod.Schema) and record.id not in schemas:
                schemas[record.id] = writer.register_schema(
                    record.name, record.encoding, record.data
                )
            elif isinstance(record, records_mod.Channel) and record.id not in channels:
                channels[record.id] = writer.register_channel(
                    topic=record.topic,
                    message_encoding=record.message_encoding,
                    schema_id=schemas.get(record.schema_id, 0),
                    metadata=record.metadata,
                )
            elif isinstance(record, records_mod.Message) and record.channel_id in channels:
                writer.add_message(
                    channel_id=channels[record.channel_id],
                    log_time=record.log_time,
                    publish_time=record.publish_time,
                    data=record.data,
                    sequence=record.sequence,
                )
                count += 1
                first = record.log_time if first is None else min(first, record.log_time)
                last = record.log_time if last is None else max(last, record.log_time)
        if started:
            writer.finish()
    if not started:
        target.unlink()
        raise ValueError(f"{str(source)!r} is not an MCAP file (no header)")
    span = 0 if first is None else last - first
    return FlightLogStats(count, span / NS_PER_S, target.stat().st_size)


class FoxgloveSink:
    """A Foxglove WebSocket server (``foxglove-sdk``) publishing the telemetry channels live.

    Binds ``host`` (loopback by default); ``port`` 0 picks a free port (see :attr:`port`).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 8765):
        foxglove = require("foxglove")
        self._context = foxglove.Context()
        self._server = foxglove.start_server(
            name="residual_quad", host=host, port=port, context=self._context
        )
        definitions = message_definitions()
        self._channels = {
            topic: foxglove.Channel(
                topic,
                schema=foxglove.Schema(
                    name=msgtype, encoding="ros2msg", data=definitions[msgtype].encode()
                ),
                message_encoding="cdr",
                context=self._context,
            )
            for topic, (msgtype, _) in TOPICS.items()
        }
        self._closed = False

    @property
    def port(self) -> int:
        """The port the live view listens on."""
        return int(self._server.port)

    def write(self, topic: str, data: bytes, stamp_ns: int) -> None:
        self._channels[topic].log(data, log_time=stamp_ns)

    def end_frame(self, stamp_ns: int) -> None:
        """Nothing to do: every message is sent as it is written."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._server.stop()
