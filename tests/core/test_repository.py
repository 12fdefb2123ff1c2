"""Repository scans (with their parsed configs), fingerprints and snapshot diffs, on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.repository.scan import OverrideDirs, Snapshot, diff, fingerprint, scan
from inferd.testing import write_repository

PLAIN = 'name: "plain"\nbackend: "python"\nmax_batch_size: 8\n'
ENSEMBLE = """
name: "ens"
platform: "ensemble"
ensemble_scheduling {
  step [
    { model_name: "second" model_version: -1 },
    { model_name: "first" model_version: -1 },
    { model_name: "second" model_version: -1 }
  ]
}
"""


def bump_mtime(path: Path) -> None:
    """Move a file's mtime one second on, so a same-size edit shows even on coarse clocks."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_scan_lists_model_directories_with_their_parsed_configs(tmp_path):
    repo = write_repository(
        tmp_path, {"plain": {"config.pbtxt": PLAIN, "1/model.py": ""}, "bare": {"1/model.onnx": b""}}
    )
    (repo / ".hidden").mkdir()
    (repo / "__pycache__").mkdir()
    (repo / "README.md").write_text("not a model")
    snap = scan([repo])
    assert sorted(snap.models) == ["bare", "plain"]
    plain = snap.models["plain"]
    assert (plain.name, plain.path, plain.repository) == ("plain", repo / "plain", repo)
    assert plain.config is not None and plain.config.max_batch_size == 8 and plain.config.backend == "python"
    assert plain.config_error == ""
    assert snap.models["bare"].config is None and snap.models["bare"].config_error == ""


def test_a_config_that_does_not_parse_is_kept_as_the_error_the_load_reports(tmp_path):
    repo = write_repository(tmp_path, {"bad": {"config.pbtxt": 'name: "bad"\nmax_batch_sizee: 4\n'}})
    source = scan([repo]).models["bad"]
    assert source.config is None
    assert source.config_error == (
        "model 'bad': config.pbtxt line 2 column 1: unknown field 'max_batch_sizee' in ModelConfig; "
        "did you mean 'max_batch_size'?"
    )


def test_config_name_picks_the_named_config_when_it_exists(tmp_path):
    repo = write_repository(
        tmp_path,
        {
            "m": {"config.pbtxt": "max_batch_size: 8\n", "configs/big.pbtxt": "max_batch_size: 64\n"},
            "n": {"config.pbtxt": "max_batch_size: 2\n"},
        },
    )
    snap = scan([repo], config_name="big")
    assert snap.models["m"].config.max_batch_size == 64
    assert snap.models["n"].config.max_batch_size == 2  # no configs/big.pbtxt: the default file
    assert scan([repo]).models["m"].config.max_batch_size == 8


def test_an_ensemble_is_known_by_its_parsed_config_not_its_text(tmp_path):
    repo = write_repository(
        tmp_path,
        {
            "ens": {"config.pbtxt": ENSEMBLE},
            "steps_only": {"config.pbtxt": 'ensemble_scheduling { step { model_name: "x" } }\n'},
            "commented": {"config.pbtxt": "# not an ensemble_scheduling at all\nmax_batch_size: 1\n"},
            "chosen": {"config.pbtxt": ENSEMBLE, "configs/plain.pbtxt": PLAIN},
        },
    )
    models = scan([repo], config_name="plain").models
    assert models["ens"].is_ensemble and models["ens"].step_models == ("second", "first")
    assert models["steps_only"].is_ensemble and models["steps_only"].step_models == ("x",)
    assert not models["commented"].is_ensemble and models["commented"].step_models == ()
    assert not models["chosen"].is_ensemble and models["chosen"].step_models == ()


def test_a_name_in_two_repositories_is_a_duplicate_not_a_model(tmp_path):
    one = write_repository(tmp_path / "one", {"m": {"config.pbtxt": PLAIN}, "a": {"config.pbtxt": PLAIN}})
    two = write_repository(tmp_path / "two", {"m": {"config.pbtxt": PLAIN}, "b": {"config.pbtxt": PLAIN}})
    snap = scan([one, two, tmp_path / "missing"])
    assert sorted(snap.models) == ["a", "b"]
    assert snap.duplicates == {"m": [one / "m", two / "m"]}


def test_with_namespacing_each_repository_keeps_its_own_model_of_a_name(tmp_path):
    one = write_repository(tmp_path / "one", {"m": {"config.pbtxt": PLAIN}, "a": {"config.pbtxt": PLAIN}})
    two = write_repository(tmp_path / "two", {"m": {"config.pbtxt": PLAIN}})
    snap = scan([one, two, one], namespacing=True)  # a repository given twice counts once, as in Triton
    assert sorted(snap.models) == [f"{one}::a", f"{one}::m", f"{two}::m"] and not snap.duplicates
    assert snap.keys_of("m") == [f"{one}::m", f"{two}::m"] and snap.keys_of("x") == []
    assert (snap.models[f"{two}::m"].name, snap.models[f"{two}::m"].namespace) == ("m", str(two))
    (two / "m").rename(tmp_path / "gone")
    assert diff(snap, scan([one, two], namespacing=True)).removed == [f"{two}::m"]


def test_with_namespacing_a_repository_is_named_as_given(tmp_path):
    # Triton's namespace (and metrics label) is the --model-repository value as given: 'two/' stays 'two/'.
    one = write_repository(tmp_path / "one", {"m": {"config.pbtxt": PLAIN}})
    two = write_repository(tmp_path / "two", {"m": {"config.pbtxt": PLAIN}})
    snap = scan([one, two], namespacing=True, namespaces=[str(one), "two/"])
    assert sorted(snap.models) == [f"{one}::m", "two/::m"]
    assert snap.models["two/::m"].namespace == "two/"


def test_version_directories_are_numeric_without_leading_zeros(tmp_path):
    repo = write_repository(tmp_path, {"m": {"1/f": "", "0/f": "", "007/f": "", "12/f": "", "x/f": "", "3": "a file"}})
    assert scan([repo]).models["m"].version_dirs() == {0: repo / "m" / "0", 1: repo / "m" / "1", 12: repo / "m" / "12"}


def test_fingerprint_changes_with_any_file_under_the_model_and_only_then(tmp_path):
    repo = write_repository(tmp_path, {"m": {"config.pbtxt": PLAIN, "1/model.py": "x = 1\n"}})
    model = repo / "m"
    first = fingerprint(model)
    assert fingerprint(model) == first
    (model / "1" / "model.py").write_text("x = 22\n")  # size changes
    second = fingerprint(model)
    assert second != first
    bump_mtime(model / "1" / "model.py")  # same size, newer
    third = fingerprint(model)
    assert third not in (first, second)
    (model / "2").mkdir()  # an empty directory counts too
    fourth = fingerprint(model)
    assert fourth not in (first, second, third)
    (model / "1" / "model.py").chmod(0o000)  # a file made (un)readable: a load would see it
    assert fingerprint(model) not in (first, second, third, fourth)
    (model / "1" / "model.py").chmod(0o644)


def test_importing_a_model_py_does_not_change_the_fingerprint(tmp_path):
    """Python writes ``1/__pycache__`` when a stub imports model.py (unless PYTHONDONTWRITEBYTECODE
    is set): a new entry in ``1``, so a newer mtime of ``1`` itself, and the files are unchanged."""
    repo = write_repository(tmp_path, {"m": {"config.pbtxt": PLAIN, "1/model.py": "x = 1\n"}})
    model = repo / "m"
    before = fingerprint(model)
    (model / "1" / "__pycache__").mkdir()
    (model / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0" * 64)
    bump_mtime(model / "1")
    assert fingerprint(model) == before


def test_diff_reports_added_removed_and_modified_models(tmp_path):
    repo = write_repository(
        tmp_path, {"keep": {"config.pbtxt": PLAIN}, "edit": {"config.pbtxt": PLAIN}, "gone": {"config.pbtxt": PLAIN}}
    )
    old = scan([repo])
    assert not diff(old, scan([repo]))
    (repo / "gone" / "config.pbtxt").unlink()
    (repo / "gone").rmdir()
    write_repository(repo, {"new": {"config.pbtxt": PLAIN}})
    (repo / "edit" / "config.pbtxt").write_text(PLAIN.replace("8", "16"))
    changes = diff(old, scan([repo]))
    assert (changes.added, changes.removed, changes.modified) == (["new"], ["gone"], ["edit"])
    assert diff(Snapshot(), old).added == ["edit", "gone", "keep"]


def test_a_changed_config_is_a_modified_model_with_the_new_config(tmp_path):
    repo = write_repository(tmp_path, {"m": {"config.pbtxt": "max_batch_size: 4\n"}})
    old = scan([repo])
    config = repo / "m" / "config.pbtxt"
    config.write_text("max_batch_size: 5\n")  # same size: only the mtime tells
    bump_mtime(config)
    new = scan([repo], previous=old)
    assert diff(old, new).modified == ["m"]
    assert new.models["m"].config.max_batch_size == 5
    assert old.models["m"].config.max_batch_size == 4


def test_a_model_moved_to_another_repository_is_modified(tmp_path):
    one = write_repository(tmp_path / "one", {"m": {"config.pbtxt": PLAIN}})
    two = tmp_path / "two"
    two.mkdir()
    old = scan([one, two])
    (one / "m").rename(two / "m")
    assert diff(old, scan([one, two])).modified == ["m"]


def test_a_rescan_reuses_the_configs_of_unchanged_models(tmp_path):
    repo = write_repository(tmp_path, {"same": {"config.pbtxt": PLAIN}, "edit": {"config.pbtxt": PLAIN}})
    old = scan([repo])
    (repo / "edit" / "config.pbtxt").write_text(PLAIN + "# edited\n")
    new = scan([repo], previous=old)
    assert new.models["same"] is old.models["same"]
    assert new.models["edit"].config is not old.models["edit"].config
    fresh = scan([repo])
    assert fresh == new  # equal by fingerprints, whatever config objects they hold
    assert fresh.models["same"].config is not old.models["same"].config


def test_override_dirs_hold_just_the_request_files_until_removed(tmp_path):
    dirs = OverrideDirs()
    source = dirs.write("m", {"1/model.py": b"x = 1\n", "1/sub/data.bin": b"\x00\x01"})
    assert source.name == "m" and source.path.name == "m" and source.config is None
    assert (source.path / "1" / "model.py").read_bytes() == b"x = 1\n"
    assert (source.path / "1" / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert source.version_dirs() == {1: source.path / "1"}
    other = dirs.write("m", {"1/model.py": b"y = 2\n"})
    assert other.path != source.path and (source.path / "1" / "model.py").read_bytes() == b"x = 1\n"
    with pytest.raises(InvalidArgument, match="file path 'file:../escape' leaves the model directory"):
        dirs.write("m", {"../escape": b""})
    dirs.remove()
    assert not source.path.exists() and not other.path.exists()
