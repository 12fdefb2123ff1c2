"""The safe extractor of EXECUTION_ENV_PATH archives (``archive.extract``) and the lifetime of the
directories ``env`` unpacks into, on real archives written with ``tarfile``."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from inferd.api import ConfigError, InvalidArgument
from inferd_backend_python import env
from inferd_backend_python.archive import HEADER_LIMIT, Limits, Refused, extract


def member(name: str, data: bytes = b"", *, mode: int = 0o644, kind: bytes = tarfile.REGTYPE, link: str = "",
           mtime: int = 1_600_000_000) -> tuple[tarfile.TarInfo, bytes]:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.size, info.mtime = kind, mode, link, len(data), mtime
    return info, data


def pack(path: Path, *members: tuple[tarfile.TarInfo, bytes], mode: str = "w:gz", **options: object) -> Path:
    with tarfile.open(path, mode, **options) as archive:  # type: ignore[call-overload]
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "out"
    path.mkdir(mode=0o700)
    return path


def everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- what an environment needs ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_files_directories_and_links_are_unpacked(tmp_path: Path, target: Path, mode: str) -> None:
    outside = tmp_path / "interpreter"
    outside.write_text("the base interpreter")
    archive = pack(
        tmp_path / "env.tar",
        member("./", kind=tarfile.DIRTYPE, mode=0o755),
        member("./bin", kind=tarfile.DIRTYPE, mode=0o755),
        member("./bin/python3", kind=tarfile.SYMTYPE, link=str(outside)),  # as venv-pack leaves it
        member("./bin/python", kind=tarfile.SYMTYPE, link="python3"),
        member("./bin/activate", b"# activate\n", mode=0o644),
        member("./lib/libx.so.1", b"\x7fELF", mode=0o755),  # its directory implied
        member("./lib/libx.so", kind=tarfile.LNKTYPE, link="./lib/libx.so.1"),
        mode=mode,
    )
    assert extract(archive, target, Limits()) == len(b"# activate\n") + 4
    assert everything(target) == ["bin", "bin/activate", "bin/python", "bin/python3", "lib", "lib/libx.so",
                                  "lib/libx.so.1"]  # fmt: skip
    assert os.readlink(target / "bin" / "python3") == str(outside)
    assert (target / "bin" / "python").read_text() == "the base interpreter"
    assert (target / "lib" / "libx.so").stat().st_ino == (target / "lib" / "libx.so.1").stat().st_ino
    assert stat.S_IMODE((target / "lib" / "libx.so.1").stat().st_mode) == 0o755
    assert (target / "bin" / "activate").stat().st_mtime == 1_600_000_000  # .pyc files check their source's


def test_a_later_member_replaces_an_earlier_one_of_the_same_name(tmp_path: Path, target: Path) -> None:
    archive = pack(tmp_path / "a.tgz", member("f", b"first"), member("l", kind=tarfile.SYMTYPE, link="/etc/passwd"),
                   member("f", b"second"), member("l", b"a file now"))  # fmt: skip
    extract(archive, target, Limits())
    assert (target / "f").read_text() == "second"
    assert not (target / "l").is_symlink() and (target / "l").read_text() == "a file now"


def test_setuid_setgid_sticky_and_group_write_bits_are_stripped(tmp_path: Path, target: Path) -> None:
    archive = pack(
        tmp_path / "a.tgz", member("tool", b"x", mode=0o6777), member("d", kind=tarfile.DIRTYPE, mode=0o1777)
    )
    extract(archive, target, Limits())
    assert stat.S_IMODE((target / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((target / "d").stat().st_mode) & 0o7022 == 0


# --- refusals -----------------------------------------------------------------------------------


REFUSED = {
    "hard link out": ([member("pwn", kind=tarfile.LNKTYPE, link="../../../../etc/passwd"), member("pwn", b"x")],
                      "member 'pwn' is a hard link whose target '../../../../etc/passwd' has '..' in it"),
    "hard link absolute": ([member("pwn", kind=tarfile.LNKTYPE, link="/etc/passwd")],
                           "member 'pwn' is a hard link whose target '/etc/passwd' is an absolute path"),
    "hard link to a link": ([member("s", kind=tarfile.SYMTYPE, link="/etc/passwd"),
                             member("h", kind=tarfile.LNKTYPE, link="s")],
                            "member 'h' is a hard link to 's', which is not a file extracted before it"),
    "hard link forward": ([member("h", kind=tarfile.LNKTYPE, link="later"), member("later", b"x")],
                          "member 'h' is a hard link to 'later', which is not a file extracted before it"),
    "dot dot": ([member("a/../../x", b"x")], "member 'a/../../x' has '..' in it"),
    "absolute": ([member("/tmp/x", b"x")], "member '/tmp/x' is an absolute path"),
    "through a link": ([member("d", kind=tarfile.SYMTYPE, link="/tmp"), member("d/x", b"x")],
                       "member 'd/x' would be written through the symbolic link 'd'"),
    "through a relative link": ([member("d", kind=tarfile.SYMTYPE, link="."), member("d/x", b"x")],
                                "member 'd/x' would be written through the symbolic link 'd'"),
    "below a file": ([member("f", b"x"), member("f/x", b"x")], "member 'f/x' is below 'f', which is a file"),
    "file over a directory": ([member("d", kind=tarfile.DIRTYPE), member("d", b"x")],
                              "member 'd' would replace a directory"),
    "directory over a link": ([member("d", kind=tarfile.SYMTYPE, link="/tmp"), member("d", kind=tarfile.DIRTYPE)],
                              "member 'd' is a directory where the archive put a file or link"),
    "fifo": ([member("p", kind=tarfile.FIFOTYPE)], "member 'p' is a FIFO"),
    "character device": ([member("c", kind=tarfile.CHRTYPE)], "member 'c' is a character device"),
    "block device": ([member("b", kind=tarfile.BLKTYPE)], "member 'b' is a block device"),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED)
def test_an_archive_breaking_a_rule_is_refused_before_anything_is_written(
    tmp_path: Path, target: Path, case: str
) -> None:
    members, message = REFUSED[case]
    archive = pack(tmp_path / "a.tgz", member("first", b"written first"), *members)
    with pytest.raises(Refused) as refused:
        extract(archive, target, Limits())
    assert message in str(refused.value)
    assert everything(target) == []  # refused by the first pass, over the headers


def test_the_byte_bound_is_checked_from_the_headers(tmp_path: Path, target: Path) -> None:
    archive = pack(tmp_path / "a.tgz", member("a", bytes(600)), member("b", bytes(400)))
    assert extract(archive, target, Limits(max_bytes=1000)) == 1000
    for p in target.iterdir():
        p.unlink()
    archive = pack(tmp_path / "b.tgz", member("a", bytes(600)), member("b", bytes(401)))
    with pytest.raises(Refused, match="its files add up to more than the limit of 1000 bytes") as refused:
        extract(archive, target, Limits(max_bytes=1000))
    assert refused.value.bound == "bytes" and everything(target) == []


def test_a_member_declaring_more_data_than_the_archive_holds_is_refused_unread(tmp_path: Path, target: Path) -> None:
    """A header saying 1 TB, with no data after it: refused from the header, nothing inflated."""
    info, _ = member("huge")
    info.size = 10**12
    raw = info.tobuf(tarfile.GNU_FORMAT) + bytes(1024)
    (tmp_path / "a.tar").write_bytes(raw)
    with pytest.raises(Refused, match="more than the limit of") as refused:
        extract(tmp_path / "a.tar", target, Limits(max_bytes=10**9))
    assert refused.value.bound == "bytes"


def test_the_member_bound(tmp_path: Path, target: Path) -> None:
    archive = pack(tmp_path / "a.tgz", *(member(f"d{i}", kind=tarfile.DIRTYPE) for i in range(6)))
    extract(archive, target, Limits(max_members=6))
    with pytest.raises(Refused, match="more than the limit of 5 members") as refused:
        extract(archive, target, Limits(max_members=5))
    assert refused.value.bound == "members"


def test_a_huge_pax_header_is_refused_before_it_is_read(tmp_path: Path, target: Path) -> None:
    info, data = member("a")
    info.pax_headers = {"comment": "x" * (HEADER_LIMIT + 1)}
    archive = pack(tmp_path / "a.tar", (info, data), mode="w", format=tarfile.PAX_FORMAT)
    with pytest.raises(Refused, match="a header record of"):
        extract(archive, target, Limits())


def test_a_link_already_in_the_directory_is_never_followed(tmp_path: Path, target: Path) -> None:
    """The second guard: were a link there (not from the archive), the writes open each directory
    with O_NOFOLLOW and refuse."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (target / "d").symlink_to(outside)
    with pytest.raises(Refused, match="goes through a symbolic link"):
        extract(pack(tmp_path / "a.tgz", member("d/x", b"owned")), target, Limits())
    assert list(outside.iterdir()) == []


def test_a_broken_archive_is_a_read_error(tmp_path: Path, target: Path) -> None:
    broken = []
    for mode in ("w", "w:gz"):
        whole = pack(tmp_path / f"a.{mode[2:]}", member("a", os.urandom(100_000)), mode=mode).read_bytes()
        broken.append(tmp_path / f"cut.{mode[2:]}")
        broken[-1].write_bytes(whole[: len(whole) // 2])
    broken.append(tmp_path / "text.tar")
    broken[-1].write_text("not an archive" * 100)
    for path in broken:
        with pytest.raises((tarfile.TarError, EOFError)):
            extract(path, target, Limits())


# --- env: the directories' lifetime -------------------------------------------------------------


def test_limits_come_from_the_backend_settings() -> None:
    assert env.limits({}) == Limits()
    assert env.limits({"execution-env-max-bytes": "5", "execution-env-max-members": "7"}) == Limits(5, 7)
    with pytest.raises(ConfigError, match="--backend-config=python,execution-env-max-bytes=lots"):
        env.limits({"execution-env-max-bytes": "lots"})


def test_an_archive_is_shared_by_its_users_and_removed_with_the_last(tmp_path: Path) -> None:
    archive = pack(tmp_path / "env.tgz", member("bin/activate", b""), member("bin/python3", b""))
    first = env.prepare(archive, "model 'a'", Limits())
    second = env.prepare(archive, "model 'b'", Limits())
    assert first.unpacked is not None and first.unpacked == second.unpacked
    ns = os.stat("/proc/self/ns/pid").st_ino
    assert first.unpacked.name.startswith(f"inferd-python-env-{os.getpid()}-{env._start_time(os.getpid())}-{ns}-")
    env.release(first)
    assert first.unpacked.is_dir()
    env.release(second)
    assert not first.unpacked.exists()


def test_a_refused_or_failed_environment_leaves_no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / "tmp").mkdir()
    bomb = pack(tmp_path / "bomb.tgz", member("bin/python3", bytes(2000)))
    with pytest.raises(InvalidArgument) as err:
        env.prepare(bomb, "model 'm'", Limits(max_bytes=1000))
    assert str(err.value) == (
        f"model 'm': EXECUTION_ENV_PATH '{bomb}' is refused: its files add up to more than the limit of 1000 bytes; "
        "raise it with --backend-config=python,execution-env-max-bytes=<bytes>"
    )
    no_python = pack(tmp_path / "nopy.tgz", member("bin/activate", b""))
    with pytest.raises(InvalidArgument, match="has no bin/python3"):
        env.prepare(no_python, "model 'm'", Limits())
    assert list((tmp_path / "tmp").iterdir()) == []


def test_only_directories_of_dead_processes_are_removed(tmp_path: Path) -> None:
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)  # fmt: skip
    me, started, ns = os.getpid(), env._start_time(os.getpid()), os.stat("/proc/self/ns/pid").st_ino
    names = {
        "dead": f"inferd-python-env-{gone}-{started}-{ns}-x",
        "reused": f"inferd-python-env-{me}-{started + 1}-{ns}-x",  # this pid, another process's start
        "live": f"inferd-python-env-{me}-{started}-{ns}-x",
        "another namespace": f"inferd-python-env-{gone}-{started}-{ns + 1}-x",  # its pids are not ours
        "old style": "inferd-python-env-k2j4h5",  # no pid: cannot tell, kept
        "other": "something-else",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (tmp_path / f"inferd-python-env-{gone}-0-{ns}-link").symlink_to(outside)
    removed = env.remove_stale(tmp_path)
    assert sorted(p.name for p in removed) == sorted([names["dead"], names["reused"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            *(names[k] for k in ("live", "another namespace", "old style", "other")),
            "outside",
            f"inferd-python-env-{gone}-0-{ns}-link",
        ]  # fmt: skip
    )
    assert (outside / "keep").is_file()


def test_an_environment_released_with_a_linger_is_taken_over_by_the_next_user(tmp_path: Path) -> None:
    """auto_complete_config's stub unpacks the environment; the load that follows reuses it."""
    archive = pack(tmp_path / "env.tgz", member("bin/activate", b""), member("bin/python3", b""))
    autocomplete = env.prepare(archive, "model 'a'", Limits())
    env.release(autocomplete, linger_s=0.05)
    load = env.prepare(archive, "model 'a'", Limits())
    assert load.unpacked == autocomplete.unpacked
    [entry] = [u for u in env._extracted.values() if u.root == load.unpacked]
    deadline = time.monotonic() + 30
    while entry.users > 1 and time.monotonic() < deadline:  # the linger ends
        time.sleep(0.01)
    assert entry.users == 1 and load.unpacked is not None and load.unpacked.is_dir()
    env.release(load)
    assert not load.unpacked.exists()


def test_an_environment_path_that_is_neither_a_file_nor_a_directory_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "env.tar.gz"
    os.mkfifo(fifo)  # reading it would block the load forever
    with pytest.raises(InvalidArgument, match="is neither a directory nor a file"):
        env.prepare(fifo, "model 'm'", Limits())
