"""Fly a hover on `rquad serve` with the standard library only (JSON frames, protocol v1).

Usage: python remote_hover_client.py [HOST:PORT]   (default 127.0.0.1:41460, see docs/remote.md)
"""

import json
import socket
import struct
import sys

host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:41460").rpartition(":")
sock = socket.create_connection((host, int(port)), timeout=10)
seq = 0


def recv(n):
    data = b""
    while len(data) < n:
        data += sock.recv(n - len(data)) or sys.exit("the server closed the connection")
    return data


def call(op, **args):
    """Send one request as a length-prefixed JSON frame; return the reply."""
    global seq
    seq += 1
    data = json.dumps({"v": 1, "seq": seq, "op": op, **args}).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)
    reply = json.loads(recv(struct.unpack(">I", recv(4))[0]))
    if not reply["ok"]:
        sys.exit(f"refused: {reply['error']}")
    return reply


layout = call("hello")["obs_layout"]  # named slices of the observation: [start, stop]
z, vz, z_ref = layout["pos"][0] + 2, layout["vel"][0] + 2, layout["ref_pos"][0] + 2
obs = call("reset", seed=0, scenario={"trajectory": "hover", "episode_s": 3.0})["obs"]
hover = 0.95 * 9.81 / 4 / 3.0 - 1  # rotor action for a quarter of the weight (f = (a+1)·3 N)
while True:  # equal thrusts, vertical PD: enough to hold the hover point in calm air
    u = hover + 0.3 * (obs[z_ref] - obs[z]) - 0.2 * obs[vz]
    step = call("step", action=[u] * 4)
    obs = step["obs"]
    if step["terminated"] or step["truncated"]:
        break
print(f"t = {step['info']['t']:.2f} s, height error {obs[z_ref] - obs[z]:+.3f} m")
call("close")
