"""``inferd.repository.names``: the one check of client-chosen names, and the containment check of paths the
server writes; and ``inferd.serving.json_depth``, the nesting limit of client JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferd.contracts.errors import InvalidArgument
from inferd.repository.names import MAX_NAME_BYTES, inside, name_problem
from inferd.repository.scan import OverrideDirs
from inferd.serving.json_depth import MAX_JSON_DEPTH, TOO_DEEP, depth_problem


@pytest.mark.parametrize(
    "name", ["add_sub", "resnet50.onnx", "a-b_c", "..a", "a..", ".hidden", "1", "modèle", "模型", "x" * MAX_NAME_BYTES]
)
def test_ordinary_names_pass(name: str) -> None:
    assert name_problem(name) == ""


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        (".", "'.' is not a name"),
        ("..", "'..' is not a name"),
        ("../x", "'/'"),
        ("a/b", "'/'"),
        ("/abs", "'/'"),
        ("a\\b", "'\\'"),
        ("a\0b", "control character '\\x00'"),
        ("a\nb", "control character '\\n'"),
        ("a\x7fb", "control character '\\x7f'"),
        ("a\x85b", "control character '\\x85'"),
        ("x" * (MAX_NAME_BYTES + 1), f"at most {MAX_NAME_BYTES} bytes long, this one has {MAX_NAME_BYTES + 1}"),
        ("é" * 128, "at most 255 bytes long, this one has 256"),
        ("a\udc80", "valid UTF-8"),
    ],
)
def test_names_that_could_leave_a_directory_or_break_a_file_system_are_refused(name: str, why: str) -> None:
    assert why in name_problem(name)


def test_inside_resolves_and_refuses_what_leaves_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    assert inside(root, root / "d" / "f") == (root / "d" / "f").resolve()
    for path in (root / ".." / "x", root, tmp_path / "other"):
        with pytest.raises(ValueError, match="is not inside"):
            inside(root, path)
    (root / "link").symlink_to(tmp_path)  # a symbolic link out of the root is followed, then refused
    with pytest.raises(ValueError, match="is not inside"):
        inside(root, root / "link" / "f")


def test_override_dirs_refuse_a_model_name_that_leaves_their_root(tmp_path: Path) -> None:
    dirs = OverrideDirs()
    target = tmp_path / "outside"
    target.mkdir()
    name = "../" * 16 + str(target).lstrip("/") + "/evil"
    try:
        for bad in (name, "..", ".", "a/b", "a\\b", "a\nb"):
            with pytest.raises(InvalidArgument) as err:
                dirs.write(bad, {"1/model.py": b"x = 1\n"})
            assert err.value.message.startswith(f"failed to load '{bad}', failed to poll from model repository; ")
        for rel in ("1/./model.py", "1//model.py", "1\\model.py", "1/mod\nel.py"):
            with pytest.raises(InvalidArgument, match="is not a file name"):
                dirs.write("m", {rel: b""})
        assert list(target.iterdir()) == []
        source = dirs.write("m", {"1/model.py": b"x = 1\n"})
        assert source.path.name == "m" and (source.path / "1" / "model.py").is_file()
    finally:
        dirs.remove()


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_depth_is_measured_on_arrays_and_objects_only_when_there_are_enough_brackets() -> None:
    at_limit = _nested(MAX_JSON_DEPTH)
    assert depth_problem(at_limit, json.loads(at_limit)) == ""
    over = _nested(MAX_JSON_DEPTH + 1)
    assert depth_problem(over, json.loads(over)) == TOO_DEEP
    objects = b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1)
    assert depth_problem(objects, json.loads(objects)) == TOO_DEEP
    mixed = json.dumps([1, "x", {"k": [2, [3]]}, [[4]] * 100]).encode()  # many brackets, shallow
    assert depth_problem(mixed, json.loads(mixed)) == ""
    strings = json.dumps(["[" * 1000]).encode()  # brackets in strings are no nesting
    assert depth_problem(strings, json.loads(strings)) == ""


def test_a_wide_tensor_is_walked_quickly() -> None:
    data = [[float(i)] * 1000 for i in range(1000)]
    raw = json.dumps({"inputs": [{"name": "X", "data": data}]}).encode()
    assert depth_problem(raw, json.loads(raw)) == ""
