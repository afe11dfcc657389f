"""Where each threshold of the gate comes from: defaults < rules file < flags; bad rules files are user errors."""

from __future__ import annotations

import re

import pytest

from layerprobe.core.errors import LayerprobeError
from layerprobe.gate import load_rules


def test_rules_file_sets_thresholds_and_flags_override_it(tmp_path):
    path = tmp_path / "gate.toml"
    path.write_text("[angular]\nlazy_threshold = 0.3\nmax_lazy_increase = 2\n\n[prune_drop]\nmax_drop = 0.05\n")
    rules = load_rules(path, max_drop=0.02, se_factor=None)
    assert (rules.lazy_threshold, rules.max_lazy_increase, rules.max_drop, rules.se_factor) == (0.3, 2, 0.02, 2.0)
    table = rules.to_dict()
    assert table["angular"]["lazy_threshold"] == {"value": 0.3, "source": "rules file"}
    assert table["prune_drop"]["max_drop"] == {"value": 0.02, "source": "flag"}
    assert table["prune_drop"]["se_factor"] == {"value": 2.0, "source": "default"}
    assert table["angular"]["adjacent_tolerance"]["value"] == 0.02


@pytest.mark.parametrize(
    "text, match",
    [
        ("[prune_drop]\nmax_drpo = 0.1\n", "Did you mean 'max_drop'"),
        ("[angluar]\nlazy_threshold = 0.1\n", "Did you mean 'angular'"),
        ("max_drop = 0.1\n", r"Put max_drop under \[prune_drop\]"),
        ("[prune_drop]\nmax_drop = -0.1\n", "must be a number ≥ 0"),
        ("[angular]\nlazy_threshold = 1.5\n", r"must be in \(0, 1\]"),
        ("[angular]\nmax_lazy_increase = 0.5\n", "whole number"),
        ("[prune_drop]\nse_factor = true\n", "must be a number"),
        ("[angular\n", "not valid TOML"),
    ],
)
def test_bad_rules_files_are_user_errors(tmp_path, text, match):
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(LayerprobeError) as info:
        load_rules(path)
    assert info.value.exit_code == 2
    assert re.search(match, str(info.value)), str(info.value)


def test_a_missing_rules_file_is_a_user_error(tmp_path):
    with pytest.raises(LayerprobeError, match="Cannot read rules file"):
        load_rules(tmp_path / "nope.toml")
