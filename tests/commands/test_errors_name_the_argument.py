"""A user error of ``rquad`` names the argument that caused it (not only an errno or a raw
conversion message), and a bad output path is refused before any work is done."""

from __future__ import annotations

import socket

import pytest
from cli_helpers import assert_user_error, run_main

QUICK = ["--episode-s", "0.3"]


@pytest.fixture
def blocker(tmp_path):
    """A regular file where an output folder would have to be."""
    path = tmp_path / "a_file"
    path.write_text("not a folder", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("address", "fragment"),
    [("host:abc", "port must be an integer"), (":99", "no host"), ("[::1", "[IPV6]:PORT")],
)
def test_a_bad_remote_address_names_remote(capsys, address, fragment):
    res = run_main(["eval", *QUICK, "--remote", address], capsys)
    assert_user_error(res, "eval", "argument --remote", fragment)


def test_stick_output_paths_are_checked_before_the_study(capsys, blocker):
    res = run_main(["stick", "s1", "--methods", "gn", "--json", f"{blocker}/r.json"], capsys)
    assert_user_error(res, "stick", f"--json {blocker}/r.json", f"{blocker} is a file")
    assert res.out == ""  # nothing ran
    res = run_main(["stick", "s1", "--methods", "gn", "--plot", f"{blocker}/plots"], capsys)
    assert_user_error(res, "stick", f"--plot {blocker}/plots", f"{blocker} is a file")
    assert res.out == ""


def test_tensorboard_folder_is_checked_before_flying(capsys, blocker):
    res = run_main(
        ["eval", *QUICK, "--controller", "geo_rls", "--tensorboard", f"{blocker}/tb"], capsys
    )
    assert_user_error(res, "eval", f"--tensorboard {blocker}/tb", f"{blocker} is a file")
    assert res.out == ""


def test_serve_names_the_host_or_port_it_cannot_listen_on(capsys):
    res = run_main(["serve", "--host", "no.such.host.invalid", "--port", "0"], capsys)
    assert_user_error(res, "serve", "--host no.such.host.invalid")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_main(["serve", "--port", str(port)], capsys)
    assert_user_error(res, "serve", f"--port {port}", "in use")
