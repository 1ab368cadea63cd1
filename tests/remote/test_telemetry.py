"""Flight logs and the live view: the MCAP written here (``mcap`` container, CDR encoded with
``rosbags``' ROS 2 types) is read back with other libraries — ``mcap-ros2-support`` decodes
every message from the schema text in the file, ``rosbags`` parses the container — and the
values are checked against the flight; the Foxglove live view is received by a websocket
client on loopback."""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pytest
from remote_helpers import address, served

from residual_quad.envs.observation import ObsLayout as L
from residual_quad.envs.registration import REMOTE_ENV_ID
from residual_quad.episode import run_episode
from residual_quad.remote.telemetry import TOPICS, FlightTelemetry, FoxgloveSink, McapSink

EPISODE_S = 0.5
STEPS = 50


def _fly_recorded(path, **env):
    """A short geo flight recorded through the run_episode callback; returns the frames."""
    telemetry = FlightTelemetry([McapSink(path)])
    record = telemetry.episode_callback()
    frames = []

    def callback(step, obs, action, info):
        frames.append((obs.copy(), {k: np.copy(v) for k, v in info.items()}))
        record(step, obs, action, info)

    try:
        run_episode(
            "geo",
            payload="extra",
            wind="windy",
            trajectory="helix",
            episode_s=EPISODE_S,
            callback=callback,
            **env,
        )
    finally:
        telemetry.close()
    return frames


def _decoded(path):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    by_topic: dict[str, list] = {}
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _, channel, message, decoded in reader.iter_decoded_messages():
            by_topic.setdefault(channel.topic, []).append((message.log_time, decoded))
    return by_topic


def _xyz(v):
    return [v.x, v.y, v.z]


def test_mcap_log_reads_back_with_other_libraries(tmp_path):
    path = tmp_path / "flight.mcap"
    frames = _fly_recorded(path)
    assert len(frames) == STEPS
    by_topic = _decoded(path)
    assert set(by_topic) == set(TOPICS)
    for topic, messages in by_topic.items():
        assert len(messages) == STEPS, topic
    for k, (obs, info) in enumerate(frames):
        stamp = round(info["t"] * 1e9)
        t_odom, odom = by_topic["/uav/odom"][k]
        assert t_odom == stamp
        assert (odom.header.stamp.sec * 10**9 + odom.header.stamp.nanosec) == stamp
        assert odom.header.frame_id == "world" and odom.child_frame_id == "base_link"
        pose = odom.pose.pose
        assert _xyz(pose.position) == obs[L.pos].tolist()  # bit for bit
        R = L.rotation(obs)
        q = pose.orientation
        w, x, y, z = q.w, q.x, q.y, q.z
        R_q = np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
            ]
        )
        np.testing.assert_allclose(R_q, R, atol=1e-12)
        np.testing.assert_allclose(_xyz(odom.twist.twist.linear), R.T @ obs[L.vel], atol=1e-12)
        assert _xyz(odom.twist.twist.angular) == obs[L.omega_b].tolist()
        imu = by_topic["/uav/imu"][k][1]
        assert imu.header.frame_id == "base_link"
        assert _xyz(imu.linear_acceleration) == obs[L.imu].tolist()
        tf = by_topic["/tf"][k][1].transforms[0]
        assert _xyz(tf.transform.translation) == obs[L.pos].tolist()
        ref = by_topic["/uav/reference"][k][1].point
        assert _xyz(ref) == obs[L.ref_pos].tolist()
        err = by_topic["/uav/tracking_error"][k][1].vector
        assert _xyz(err) == (obs[L.pos] - obs[L.ref_pos]).tolist()
        assert _xyz(by_topic["/uav/residual"][k][1].vector) == info["residual_accel"].tolist()
        assert _xyz(by_topic["/uav/disturbance"][k][1].vector) == info["drag_force"].tolist()
        assert _xyz(by_topic["/uav/wind"][k][1].vector) == info["wind"].tolist()
        thrusts = by_topic["/uav/rotor_thrusts"][k][1]
        assert list(thrusts.data) == obs[L.thrusts].tolist()
        assert thrusts.layout.dim[0].label == "rotor"

    from rosbags.rosbag2 import Reader

    with Reader(path) as reader:  # rosbags' own MCAP parser: the container is rosbag2-readable
        types = {c.topic: c.msgtype for c in reader.connections}
        assert types == {topic: msgtype for topic, (msgtype, _) in TOPICS.items()}
        assert reader.message_count == STEPS * len(TOPICS)
        stamps = [t for conn, t, _ in reader.messages() if conn.topic == "/uav/wind"]
        assert stamps == [round(info["t"] * 1e9) for _, info in frames]


def test_the_server_records_every_reset_and_step(tmp_path):
    path = tmp_path / "served.mcap"
    telemetry = FlightTelemetry([McapSink(path)])
    try:
        with served(hook=telemetry) as server:
            for seed in (0, 1):
                run_episode(
                    "geo",
                    seed=seed,
                    episode_s=0.1,
                    env_id=REMOTE_ENV_ID,
                    address=address(server),
                )
    finally:
        telemetry.close()
    odom = _decoded(path)["/uav/odom"]
    assert len(odom) == 2 * (10 + 1)  # reset + 10 steps, twice
    stamps = [t for t, _ in odom]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # one clock for both


def test_mcap_sink_checks_its_path(tmp_path):
    with pytest.raises(ValueError, match=r"\.mcap"):
        McapSink(tmp_path / "log.bag")
    with pytest.raises(ValueError, match="does not exist"):
        McapSink(tmp_path / "missing" / "log.mcap")


def test_live_view_reaches_a_websocket_client():
    from rosbags.typesys import Stores, get_typestore
    from websockets.sync.client import connect

    sink = FoxgloveSink(port=0)
    telemetry = FlightTelemetry([sink])
    try:
        with connect(
            f"ws://127.0.0.1:{sink.port}", subprotocols=["foxglove.sdk.v1"], open_timeout=10
        ) as ws:
            channels: dict[str, dict] = {}
            deadline = time.monotonic() + 10
            while len(channels) < len(TOPICS) and time.monotonic() < deadline:
                message = ws.recv(timeout=5)
                if isinstance(message, str) and json.loads(message)["op"] == "advertise":
                    for channel in json.loads(message)["channels"]:
                        channels[channel["topic"]] = channel
            assert set(channels) == set(TOPICS)
            wind = channels["/uav/wind"]
            assert (wind["encoding"], wind["schemaEncoding"]) == ("cdr", "ros2msg")
            ws.send(
                json.dumps(
                    {"op": "subscribe", "subscriptions": [{"id": 7, "channelId": wind["id"]}]}
                )
            )
            frames = []

            def callback(step, obs, action, info):
                frames.append(info["wind"].copy())

            received = []
            for _ in range(20):  # the subscription takes effect within a few flights
                frames.clear()
                run_episode(
                    "geo",
                    wind="windy",
                    episode_s=0.05,
                    callback=lambda *a: (callback(*a), telemetry.episode_callback()(*a)),
                )
                try:
                    while True:
                        message = ws.recv(timeout=0.5)
                        if isinstance(message, bytes) and message[0] == 0x01:
                            received.append(message)
                except TimeoutError:
                    pass
                if received:
                    break
            assert received, "no message reached the subscriber"
            opcode, subscription, stamp = struct.unpack_from("<BIQ", received[-1])
            assert (opcode, subscription) == (1, 7)
            assert stamp == round(0.05 * 1e9)
            store = get_typestore(Stores.ROS2_HUMBLE)
            msg = store.deserialize_cdr(received[-1][13:], "geometry_msgs/msg/Vector3Stamped")
            assert [msg.vector.x, msg.vector.y, msg.vector.z] == frames[-1].tolist()
    finally:
        telemetry.close()
