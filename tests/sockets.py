"""What a server process listens on, read from /proc (Linux): its own sockets, whatever other
processes hold on the same port numbers."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on over TCP (its sockets, found in
    /proc/net/tcp{,6} by inode)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address, port = fields[1].rsplit(":", 1)
                found.add((_address(address), int(port, 16)))
    return found


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on."""
    return {port for _, port in listening_addresses(pid)}


def _address(hex_address: str) -> str:
    """/proc/net/tcp's address (the kernel's words in host byte order, as hex) as text."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))
