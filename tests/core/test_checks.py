"""The cheap checks of user input: layer ranges (inclusive, 0-based), memory sizes, output directories."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from layerprobe.core import check_output_dir, parse_layer_ranges, parse_memory_size
from layerprobe.core.errors import LayerprobeError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, [0, 1, 2, 3, 4, 5, 6, 7]),
        ("all", list(range(8))),
        ("0-3,7", [0, 1, 2, 3, 7]),
        ("5", [5]),
        ("7,0", [0, 7]),
        ("2-2", [2]),
        (" 1 - 1 ".replace(" ", ""), [1]),
        ("0-1,1-2", [0, 1, 2]),
    ],
)
def test_layer_ranges_are_inclusive_and_zero_based(text, expected):
    assert parse_layer_ranges(text, 8) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8", "out of range"),
        ("0-8", "out of range"),
        ("3-1", "runs backwards"),
        ("a", "Cannot read"),
        ("1,,2", "Cannot read"),
        ("-1", "Cannot read"),
        ("1.5", "Cannot read"),
    ],
)
def test_bad_layer_ranges(text, message):
    with pytest.raises(LayerprobeError, match=message):
        parse_layer_ranges(text, 8)


def test_memory_sizes():
    assert parse_memory_size("512MiB") == 512 * 2**20
    assert parse_memory_size("2GiB") == 2 * 2**30
    assert parse_memory_size("1.5GB") == 1_500_000_000
    assert parse_memory_size("4096") == 4096
    assert parse_memory_size(None) is None
    for bad in ("lots", "0", "-1GiB", "2 parsecs"):
        with pytest.raises(LayerprobeError):
            parse_memory_size(bad)


def test_an_out_where_no_file_can_be_made_is_refused_and_nothing_is_left(tmp_path, monkeypatch):
    assert check_output_dir(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert list(tmp_path.iterdir()) == []  # the writability probe leaves nothing behind

    def refused(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)  # what access() cannot see (root, ACLs, /proc)
    with pytest.raises(LayerprobeError, match="is not writable") as caught:
        check_output_dir(tmp_path / "run", "--save")
    assert caught.value.hint == "Pick a directory you can write to with --save."


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_proc_is_refused_also_for_root():
    with pytest.raises(LayerprobeError, match="/proc does not allow writing"):
        check_output_dir("/proc/layerprobe-out")
