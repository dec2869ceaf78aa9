"""A Unix socket whose queue of connections not yet accepted is full refuses a connect with a
timeout at once (EAGAIN: BlockingIOError), where TCP would wait. A node's agent probing its
services through its podman proxy met that under load (an exec probe "did not pass:
BlockingIOError"): libpod.unix_connect tries again until its timeout, and the proxy queues more."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from undercloud.agent import libpod
from undercloud.provisioning.servers import node_proxy


def full_listener(path: str) -> tuple[socket.socket, list[socket.socket]]:
    """A listener whose accept queue is full: the next connect with a timeout gets EAGAIN."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(0)
    held = []
    while True:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(1)
        try:
            c.connect(path)
        except BlockingIOError:
            c.close()
            return srv, held
        held.append(c)


def test_a_connect_to_a_busy_unix_socket_waits_for_room_instead_of_failing(tmp_path):
    path = str(tmp_path / "s")
    srv, held = full_listener(path)
    try:
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.settimeout(5)
        with pytest.raises(BlockingIOError):  # what a plain connect does: at once, despite 5 s
            raw.connect(path)
        raw.close()

        def accept_later():
            time.sleep(0.3)
            for _ in range(len(held) + 1):
                srv.accept()[0].close()
        t = threading.Thread(target=accept_later)
        t.start()
        start = time.monotonic()
        sock = libpod.unix_connect(path, timeout=5)
        assert time.monotonic() - start >= 0.25  # it waited for the accept, then connected
        sock.close()
        t.join()
    finally:
        srv.close()
        for c in held:
            c.close()


def test_a_unix_socket_that_never_makes_room_fails_at_the_timeout(tmp_path):
    path = str(tmp_path / "s")
    srv, held = full_listener(path)
    try:
        start = time.monotonic()
        with pytest.raises(BlockingIOError):
            libpod.unix_connect(path, timeout=0.5)
        assert time.monotonic() - start >= 0.3  # it tried again until its timeout, then gave up
    finally:
        srv.close()
        for c in held:
            c.close()


def test_the_node_proxy_queues_more_than_socketservers_five():
    assert node_proxy._Server.request_queue_size >= 64
