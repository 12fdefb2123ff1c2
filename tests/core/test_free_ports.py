"""The test kit's port picker: the ports of one server are never the same port twice."""

from __future__ import annotations

import socket

from inferd.testing import free_ports


def test_ports_picked_together_are_distinct_and_bindable() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64
    with socket.socket() as s:  # free once picked
        s.bind(("127.0.0.1", ports[0]))
