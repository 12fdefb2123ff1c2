"""Unpacking an ``EXECUTION_ENV_PATH`` archive: inferd's checking extractor against tarfile's own.

Packs a directory (default: this interpreter's numpy and scipy, ~130 MB in ~2,600 files) into a
``.tar.gz`` as a packed environment would be, then unpacks it ``--rounds`` times each way, in turns:
``tarfile.extractall(filter="tar")`` (what inferd used before) and
``inferd_backend_python.archive.extract`` (two passes: the headers are checked and the sizes summed
first, then each member is checked again and written without following links). Prints the median
wall and CPU seconds of each; asserts nothing.

    .venv/bin/python benchmarks/python_env_extract.py
    .venv/bin/python benchmarks/python_env_extract.py --source /path/to/env --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from inferd_backend_python.archive import Limits, extract


def _pack(sources: list[Path], out: Path) -> tuple[int, int]:
    files = size = 0
    with tarfile.open(out, "w:gz") as archive:
        for source in sources:
            archive.add(source, arcname=f"lib/site-packages/{source.name}")
            for p in source.rglob("*"):
                if p.is_file() and not p.is_symlink():
                    files += 1
                    size += p.stat().st_size
    return files, size


def _tarfile(archive: Path, target: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="tar")


def _inferd(archive: Path, target: Path) -> None:
    extract(archive, target, Limits())


def _time(run: Callable[[Path, Path], None], archive: Path, work: Path) -> tuple[float, float]:
    target = Path(tempfile.mkdtemp(dir=work))
    wall, cpu = time.perf_counter(), time.process_time()
    run(archive, target)
    result = time.perf_counter() - wall, time.process_time() - cpu
    shutil.rmtree(target)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, action="append", help="a directory to pack (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    purelib = Path(sysconfig.get_paths()["purelib"])
    sources = args.source or [purelib / n for n in ("numpy", "scipy") if (purelib / n).is_dir()]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        archive = work / "env.tar.gz"
        files, size = _pack(sources, archive)
        print(f"archive: {archive.stat().st_size / 1e6:.1f} MB gzip, {size / 1e6:.1f} MB in {files} files")
        times: dict[str, list[tuple[float, float]]] = {"tarfile filter='tar'": [], "inferd archive.extract": []}
        for _ in range(args.rounds):
            times["tarfile filter='tar'"].append(_time(_tarfile, archive, work))
            times["inferd archive.extract"].append(_time(_inferd, archive, work))
        for name, runs in times.items():
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            print(f"{name:24s} wall {wall:6.2f} s   cpu {cpu:6.2f} s   (median of {len(runs)}; cpus: {os.cpu_count()})")


if __name__ == "__main__":
    main()
