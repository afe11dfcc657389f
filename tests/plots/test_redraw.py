"""`plot` redraws any result from its JSON: the same figures, next to it or in --out; anything else refused."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from drawn import PDF_MAGIC, PNG_MAGIC, assert_drawn_matrix, expected_cells, file_magic
from factories import angular_from_walk, random_prune_result

from layerprobe.core.errors import ResultError
from layerprobe.plots.heatmap import angular_figure
from layerprobe.plots.redraw import redraw
from layerprobe.results import load_result, write_json

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
@pytest.mark.parametrize("kind", ["angular", "prune_drop"])
def test_plot_result_round_trips_through_json(tmp_path, kind):
    result = angular_from_walk(7, nan_cells=[(3, 4)]) if kind == "angular" else random_prune_result(7, ("mmlu/x",))
    json_path = write_json(tmp_path / f"{kind}.json", result.to_dict())
    paths = redraw(json_path)
    assert paths and all(p.parent == tmp_path for p in paths)
    stem = "angular" if kind == "angular" else "prune_drop_mmlu_x"
    expected = [f"{stem}.png", f"{stem}.pdf"]
    assert [p.name for p in paths] == expected
    assert all(file_magic(p, PDF_MAGIC if p.suffix == ".pdf" else PNG_MAGIC) for p in paths)
    elsewhere = redraw(json_path, tmp_path / "plots")
    assert [p.parent for p in elsewhere] == [tmp_path / "plots"] * len(paths)
    if kind == "angular":  # NaN survives the JSON and lands in the same cell.
        reloaded = load_result(json_path)
        fig = angular_figure(reloaded)
        try:
            assert_drawn_matrix(fig.axes[0].images[0].get_array(), expected_cells(result.distance, 7), 7)
        finally:
            plt.close(fig)


def test_plot_result_rejects_a_file_that_is_not_a_result(tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(ResultError):
        redraw(tmp_path / "x.json")
