"""The sample outputs of docs/examples.md are what docs/make_samples.py writes from real runs (timings aside)."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys

import pytest
from doc_commands import ROOT


@functools.cache
def make_samples():
    """docs/make_samples.py as a module."""
    if str(ROOT / "docs") not in sys.path:  # its helper docs/doc_fixtures.py sits beside it
        sys.path.insert(0, str(ROOT / "docs"))
    spec = importlib.util.spec_from_file_location("make_samples", ROOT / "docs" / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def test_the_readme_marks_every_sample_the_script_writes():
    script = make_samples()
    text = (ROOT / "docs" / "examples.md").read_text(encoding="utf-8")
    marked = [m.group("name") for m in script.BLOCK.finditer(text)]
    assert sorted(marked) == sorted(s.name for s in script.SAMPLES)
    assert text.count("<!-- /sample -->") == len(marked)


def test_normalising_hides_timings_and_keeps_every_measured_number():
    normalise = make_samples().normalise
    one = (
        'x^2 → x^3 (d = 0.1623 ± 0.0014); 198 tokens/s\n"seconds": 93.38, "tokens_per_second": 198.372\n'
        "engine: shared; 48.5 s"
    )
    other = (
        'x^2 → x^3 (d = 0.1623 ± 0.0014); 1,234 tokens/s\n"seconds": 1.0, "tokens_per_second": 2.5\nengine: shared; 3 s'
    )
    assert normalise(one) == normalise(other)
    assert normalise(one) != normalise(one.replace("0.1623", "0.1624"))
    assert normalise('"layerprobe": "0.1.0"') == normalise('"layerprobe": "0.2.0"')


def test_abridged_json_cuts_matrices_and_long_lists():
    abridged = make_samples().abridged
    text = abridged({"distance": [[0.0, 0.123456], [0.123456, 0.0]], "windows": list(range(9))})
    assert '"distance": [[0.0, 0.1235], …]' in text
    assert '"windows": [0, 1, 2, 3, 4, 5, 6, …]' in text


@pytest.mark.slow
def test_readme_samples_are_what_a_fresh_run_prints():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "make_samples.py"), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0 and "differ: none" in done.stdout, done.stdout + done.stderr[-3000:]
