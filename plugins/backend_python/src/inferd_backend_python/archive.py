"""Unpacking a tar archive (a packed Python environment) so that it cannot write outside its
directory or fill the disk, whatever the interpreter's ``tarfile`` patch level.

The rules, checked by :func:`extract` itself (``tarfile`` only parses headers here):

- Members are regular files, directories, symbolic links and hard links. Device nodes, FIFOs and
  anything else refuse the archive. No owner is applied; a file keeps its permission bits but
  setuid, setgid, sticky and the group/other write bits (``mode & 0o755``).
- A member's path is relative and has no ``..`` (an absolute path or ``..`` refuses the archive);
  ``./`` prefixes are dropped.
- Nothing is written through a symbolic link: every directory on a member's path must be one the
  archive made (or implied), never a link or a file, so a link extracted earlier cannot redirect a
  later member. The writes enforce it too: each directory is opened one name at a time with
  ``O_NOFOLLOW`` from the extraction directory, files are created with ``O_EXCL | O_NOFOLLOW``, and
  a name already there (a duplicate member) is unlinked first, which never follows a link.
- A symbolic link is written as it is, whatever it points to: a packed venv's ``bin/python``
  points to the interpreter it was made from (``/usr/bin/python3.11``), and environments link to
  libraries outside themselves. Extraction never follows a link, so where one points cannot make
  it write elsewhere; what the link reaches is what the environment's own programs reach, and they
  run as the server's user anyway.
- A hard link may only point to a regular file the archive extracted before it.
- The regular members' sizes add up to at most ``Limits.max_bytes`` and the archive has at most
  ``Limits.max_members`` members, counted from the headers before anything is written (a first
  pass), and counted again while writing. A header bigger than :data:`HEADER_LIMIT` (a pax or GNU
  long-name record) refuses the archive before it is read into memory.

Any refusal raises :class:`Refused` naming the member; the caller removes the directory.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import io
import lzma
import os
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: The default bounds: a CUDA PyTorch environment unpacks to 6-8 GB; inferd's own development
#: environment (every backend's framework, CPU PyTorch) is 4.0 GB in 76,000 files.
DEFAULT_MAX_BYTES = 16 * 1024**3
DEFAULT_MAX_MEMBERS = 500_000
#: The largest header record (pax extended header, GNU long name) read into memory.
HEADER_LIMIT = 1024 * 1024
_CHUNK = 256 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """The archive breaks one of the rules (the message says which member and why); ``bound`` is
    ``"bytes"`` or ``"members"`` when it is too big for :class:`Limits`."""

    def __init__(self, message: str, bound: str | None = None) -> None:
        super().__init__(message)
        self.bound = bound


@dataclass(frozen=True)
class Limits:
    """How much one archive may unpack to."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS


def extract(archive: Path, target: Path, limits: Limits) -> int:
    """Unpack ``archive`` (tar, optionally gzip, bzip2 or xz compressed) into the existing, empty,
    private directory ``target``; the bytes of file data written. Raises :class:`Refused`, or
    ``OSError`` / ``tarfile.TarError`` for an unreadable archive or a failed write."""
    with _open(archive) as tar:
        _walk(tar, _Tree(limits), None)
    root = os.open(target, _DIR_FLAGS)
    try:
        with _open(archive) as tar:  # again: the checks run on what is written, too
            return _walk(tar, _Tree(limits), _Writer(root))
    finally:
        os.close(root)


def read_errors() -> tuple[type[BaseException], ...]:
    """The exceptions reading a broken archive raises (besides :class:`Refused`)."""
    return (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)


# --- reading ----------------------------------------------------------------------------------


_Source = IO[bytes] | gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile


class _Capped(io.RawIOBase):
    """The decompressed stream, refusing any single read above :data:`HEADER_LIMIT` (``tarfile``
    reads a pax or long-name header in one call of its declared size; member data, in chunks)."""

    def __init__(self, inner: _Source) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > HEADER_LIMIT:
            raise Refused(f"a header record of {size} bytes (more than {HEADER_LIMIT})")
        return self._inner.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()


@contextlib.contextmanager
def _open(archive: Path) -> Iterator[tarfile.TarFile]:
    with open(archive, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        inner: _Source = raw
        if magic.startswith(b"\x1f\x8b"):
            inner = gzip.GzipFile(fileobj=raw, mode="rb")
        elif magic.startswith(b"BZh"):
            inner = bz2.BZ2File(raw, "rb")
        elif magic.startswith(b"\xfd7zXZ\x00"):
            inner = lzma.LZMAFile(raw, "rb")  # noqa: SIM115  # closed by the with below
        with inner, tarfile.open(fileobj=_Capped(inner), mode="r:") as tar:
            yield tar


# --- checking ---------------------------------------------------------------------------------


def _parts(name: str, what: str) -> tuple[str, ...]:
    """``name``'s components; ``what`` says whose name it is in a refusal."""
    if "\0" in name:
        raise Refused(f"{what} has a NUL character")
    if name.startswith("/"):
        raise Refused(f"{what} is an absolute path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise Refused(f"{what} has '..' in it")
    return parts


class _Tree:
    """What the archive made so far ('d'irectory, 'f'ile, 'l'ink by path), its member count and
    bytes: each member is checked against it before anything is written for it."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.kinds: dict[str, str] = {}
        self.members = 0
        self.bytes = 0

    def check(self, member: tarfile.TarInfo) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """The member's path and, for a hard link, its target's; raises :class:`Refused`."""
        name = member.name
        self.members += 1
        if self.members > self.limits.max_members:
            raise Refused(f"it has more than the limit of {self.limits.max_members} members", "members")
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            raise Refused(f"member '{name}' is a {_kind(member)}; only files, directories and links are unpacked")
        if member.isreg():
            self.bytes += member.size
            if self.bytes > self.limits.max_bytes:
                raise Refused(f"its files add up to more than the limit of {self.limits.max_bytes} bytes", "bytes")
        parts = _parts(name, f"member '{name}'")
        if not parts:
            if member.isdir():
                return parts, None
            raise Refused(f"member '{name}' has no name")
        for i in range(1, len(parts)):
            above = self.kinds.get("/".join(parts[:i]))
            if above == "l":
                raise Refused(f"member '{name}' would be written through the symbolic link '{'/'.join(parts[:i])}'")
            if above == "f":
                raise Refused(f"member '{name}' is below '{'/'.join(parts[:i])}', which is a file")
        path = "/".join(parts)
        there = self.kinds.get(path)
        if there == "d" and not member.isdir():
            raise Refused(f"member '{name}' would replace a directory")
        if there in ("f", "l") and member.isdir():
            raise Refused(f"member '{name}' is a directory where the archive put a file or link")
        source = None
        if member.islnk():
            source = _parts(member.linkname, f"member '{name}' is a hard link whose target '{member.linkname}'")
            if self.kinds.get("/".join(source)) != "f":
                raise Refused(
                    f"member '{name}' is a hard link to '{member.linkname}', which is not a file extracted before it"
                )
        for i in range(1, len(parts)):
            self.kinds.setdefault("/".join(parts[:i]), "d")
        self.kinds[path] = "d" if member.isdir() else "l" if member.issym() else "f"
        return parts, source


def _kind(member: tarfile.TarInfo) -> str:
    names = {tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "FIFO"}
    return names.get(member.type, f"member of tar type {member.type!r}")


def _walk(tar: tarfile.TarFile, tree: _Tree, writer: _Writer | None) -> int:
    """Check every member (and write it, with a writer); the bytes written."""
    written = 0
    try:
        while (member := tar.next()) is not None:
            # tarfile keeps every header it read; members are handled once, in order.
            tar.members.clear()  # type: ignore[attr-defined]
            parts, source = tree.check(member)
            if writer is not None and parts:
                written += writer.write(tar, member, parts, source)
    finally:
        if writer is not None:
            writer.close()
    return written


# --- writing ----------------------------------------------------------------------------------


class _Writer:
    """Writes members below the directory ``root`` (an open descriptor), never following a link."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._cached: tuple[tuple[str, ...], int] | None = None

    def close(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None

    def _directory(self, parts: tuple[str, ...], create: bool) -> int:
        """A descriptor of directory ``parts`` (owned by the writer: do not close it)."""
        if self._cached is not None and self._cached[0] == parts:
            return self._cached[1]
        fd = os.dup(self.root)
        try:
            for name in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                try:
                    inner = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise Refused(f"'{'/'.join(parts)}' goes through a symbolic link or a file") from None
                    raise
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        self.close()
        self._cached = (parts, fd)
        return fd

    def write(
        self, tar: tarfile.TarFile, member: tarfile.TarInfo, parts: tuple[str, ...], source: tuple[str, ...] | None
    ) -> int:
        parent, name = self._directory(parts[:-1], create=True), parts[-1]
        if member.isdir():
            try:
                os.mkdir(name, 0o700 | (member.mode & 0o755), dir_fd=parent)
            except FileExistsError:
                if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise Refused(f"member '{member.name}' is a directory where something else is") from None
            return 0
        _unlink(name, parent)
        if member.issym():
            os.symlink(member.linkname, name, dir_fd=parent)
            return 0
        if source is not None:
            # the source's directory: kept open as well as the destination's (not cached)
            src_dir = os.dup(self.root)
            try:
                for part in source[:-1]:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=src_dir)
                    os.close(src_dir)
                    src_dir = inner
                if not stat.S_ISREG(os.stat(source[-1], dir_fd=src_dir, follow_symlinks=False).st_mode):
                    raise Refused(f"member '{member.name}' is a hard link to '{member.linkname}', which is not a file")
                os.link(source[-1], name, src_dir_fd=src_dir, dst_dir_fd=parent, follow_symlinks=False)
            finally:
                os.close(src_dir)
            return 0
        fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=parent)
        with open(fd, "wb", closefd=True) as out:
            data = tar.extractfile(member)
            assert data is not None  # a regular member has data
            written = 0
            while chunk := data.read(_CHUNK):
                written += len(chunk)
                if written > member.size:  # never: the reader stops at the member's size
                    raise Refused(f"member '{member.name}' holds more data than its header says")
                out.write(chunk)
            out.flush()
            os.fchmod(fd, member.mode & 0o755)
            with contextlib.suppress(OverflowError, OSError, ValueError):
                os.utime(fd, (member.mtime, member.mtime))  # .pyc files compare their source's
        return written


def _unlink(name: str, parent: int) -> None:
    """Remove a file or link already at ``name`` (a duplicate member): ``unlink`` never follows one."""
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise Refused(f"'{name}' is a directory") from None
