"""The MCAP flight log survives a crash: ``rquad serve --record`` killed without warning
(SIGKILL) leaves a file that the project's two MCAP readers (``mcap`` with ``mcap-ros2-support``,
and ``rosbags``) open as it is and that lacks at most the last second of flight; a file cut
inside a write is recovered up to the cut; on exit the server says what the log holds."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from remote_helpers import raw_client, serve_process

from residual_quad.episode import run_episode
from residual_quad.remote.telemetry import (
    FLUSH_EVERY_S,
    TOPICS,
    FlightTelemetry,
    McapSink,
    recover_flight_log,
)

CONTROL_HZ = 100
STEPS = 350  # 3.5 s of flight: the last flush (at 3.0 s) is half a second behind
NS = 1_000_000_000


def _fly(client, steps):
    """hello, reset, then ``steps`` steps of an equal-thrust hover (vertical PD); returns the
    flight-clock stamp (ns) and the observation of every frame the server published."""
    layout = client.call("hello")["obs_layout"]
    z, vz, z_ref = (layout[name][0] + 2 for name in ("pos", "vel", "ref_pos"))
    reply = client.call("reset", seed=0)
    frames = [(round(reply["info"]["t"] * NS), reply["obs"])]
    hover = 0.95 * 9.81 / 4 / 3.0 - 1  # a quarter of the weight per rotor
    for _ in range(steps):
        obs = reply["obs"]
        u = hover + 0.3 * (obs[z_ref] - obs[z]) - 0.2 * obs[vz]
        reply = client.call("step", action=[u] * 4)
        assert reply["ok"] and not reply["terminated"], reply
        frames.append((round(reply["info"]["t"] * NS), reply["obs"]))
    return frames


def _read_mcap(path):
    """topic → [(stamp ns, decoded message)] with the ``mcap`` reader and the ROS 2 decoder."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    by_topic: dict[str, list] = {topic: [] for topic in TOPICS}
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _, channel, message, decoded in reader.iter_decoded_messages():
            by_topic[channel.topic].append((message.log_time, decoded))
    return by_topic


def _read_rosbags(path):
    """topic → [stamp ns] with ``rosbags``' reader (its own MCAP parser)."""
    from rosbags.rosbag2 import Reader

    with Reader(Path(path)) as reader:
        stamps: dict[str, list] = {c.topic: [] for c in reader.connections}
        for connection, stamp, _ in reader.messages():
            stamps[connection.topic].append(stamp)
        assert reader.message_count == sum(map(len, stamps.values()))
    return stamps


def test_a_killed_server_leaves_a_log_that_lacks_at_most_the_last_second(tmp_path):
    path = tmp_path / "crash.mcap"
    argv = ["--record", str(path), "--control-hz", str(CONTROL_HZ), "--episode-s", "30"]
    with serve_process(*argv) as server:
        with raw_client(server) as c:
            frames = _fly(c, STEPS)
            rc, _, _ = server.stop(signal.SIGKILL)  # after the last reply: no clean close
    assert rc == -signal.SIGKILL
    flown = [stamp for stamp, _ in frames]
    assert flown[-1] == round(STEPS / CONTROL_HZ * NS)

    by_topic = _read_mcap(path)
    odom = by_topic["/uav/odom"]
    on_disk = [stamp for stamp, _ in odom]
    assert on_disk == flown[: len(on_disk)]  # every frame up to the last one on disk, in order
    assert flown[-1] - on_disk[-1] <= FLUSH_EVERY_S * NS  # at most the last second is lost
    for topic, messages in by_topic.items():
        assert [stamp for stamp, _ in messages] == on_disk, topic
    last = odom[-1][1].pose.pose.position
    assert [last.x, last.y, last.z] == frames[len(on_disk) - 1][1][0:3]  # bit for bit

    assert _read_rosbags(path) == {topic: on_disk for topic in TOPICS}


def test_on_exit_the_server_says_where_the_log_is_and_what_it_holds(tmp_path):
    path = tmp_path / "exit.mcap"
    with serve_process("--record", str(path), "--control-hz", str(CONTROL_HZ)) as server:
        assert f"flight log {path}" in server.first_line
        with raw_client(server) as c:
            _fly(c, 100)  # 1 s: the reset frame and 100 steps
        rc, out, _ = server.stop(signal.SIGTERM)
    assert rc == 0
    size = path.stat().st_size
    assert f"; flight log {path}: 909 messages, 1.00 s of flight, {size} bytes" in out
    assert sum(map(len, _read_rosbags(path).values())) == 909 == 101 * len(TOPICS)


@pytest.fixture(scope="module")
def finished_log(tmp_path_factory):
    """A 2.5 s flight logged through ``run_episode`` (durable at 1 s and 2 s, then closed)."""
    path = tmp_path_factory.mktemp("logs") / "flight.mcap"
    telemetry = FlightTelemetry([McapSink(path)])
    try:
        run_episode("geo", episode_s=2.5, callback=telemetry.episode_callback())
    finally:
        telemetry.close()
    return path


def test_a_log_cut_anywhere_is_recovered_up_to_the_cut(finished_log, tmp_path):
    data = finished_log.read_bytes()
    whole = _read_rosbags(finished_log)["/uav/odom"]
    assert len(whole) == 250  # the steps (the callback sees no reset frame)
    counts = []
    for cut in range(64, len(data) + 1, len(data) // 23):
        cut_file = tmp_path / "cut.mcap"
        cut_file.write_bytes(data[:cut])
        recovered = tmp_path / "recovered.mcap"
        stats = recover_flight_log(cut_file, recovered)
        odom = _read_rosbags(recovered).get("/uav/odom", [])
        assert odom == whole[: len(odom)], cut  # a prefix of the flight, in order
        assert [s for s, _ in _read_mcap(recovered)["/uav/odom"]] == odom
        assert stats.messages == len(odom) * len(TOPICS)
        counts.append(len(odom))
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] <= len(whole)
    assert len(set(counts)) >= 3  # the durable seconds come back one by one
    stats = recover_flight_log(finished_log, tmp_path / "all.mcap")  # a finished log: all of it
    assert (stats.messages, stats.flight_s) == (250 * len(TOPICS), 2.49)


def test_recover_refuses_to_overwrite_its_source_and_a_file_that_is_not_mcap(tmp_path):
    with pytest.raises(ValueError, match="is the source"):
        recover_flight_log(tmp_path / "a.mcap", tmp_path / "a.mcap")
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not an mcap file")
    with pytest.raises(ValueError, match="not an MCAP file"):
        recover_flight_log(junk, tmp_path / "out.mcap")
    assert not (tmp_path / "out.mcap").exists()  # nothing half-written is left
