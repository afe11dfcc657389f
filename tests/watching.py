"""Watching runs through their front door (Progress events) and comparing what they produced.

Never through private functions: a run is observed the way a caller of the library observes it, and
two runs are compared as the JSON documents they write.
"""

from __future__ import annotations

import json

import pytest

from layerprobe.model.progress import Progress


def task_set_responses(task_set) -> dict:
    """{(leaf task, doc_id): [responses of request 0, request 1, ...]} from lm-eval's filled instances."""
    grouped: dict = {}
    for leaf, task in task_set.tasks.items():
        for inst in task.instances:
            grouped.setdefault((leaf, inst.doc_id), []).append((inst.idx, list(inst.resps)))
    return {key: [resps for _, resps in sorted(pairs, key=lambda p: p[0])] for key, pairs in grouped.items()}


def sample_responses(samples: dict) -> dict:
    """The same mapping from `simple_evaluate(..., log_samples=True)`'s samples."""
    return {(leaf, s["doc_id"]): [list(r) for r in s["resps"]] for leaf, rows in samples.items() for s in rows}


class Spy:
    """Watches runs through the front door (Progress events): per finished (task, variant), the order,
    the scorer's raw answers, the scorers used, and the rows every block pass reported."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, int | None]] = []
        self.answers: dict[tuple[str, int | None], object] = {}
        self.scorers: list = []
        self.block_rows = 0
        self.advances: list[float] = []
        self.notes: list[str] = []
        self.progress = Progress(
            on_advance=self.advances.append,
            on_evaluation=self._evaluated,
            on_block=self._block,
            on_note=self.notes.append,
        )

    def reset(self) -> None:
        self.__init__()

    def _evaluated(self, event) -> None:
        self.recorded.append((event.task, event.variant))
        if event.scorer not in self.scorers:
            self.scorers.append(event.scorer)
        if hasattr(event.scorer, "task_sets"):
            self.answers[(event.task, event.variant)] = task_set_responses(event.scorer.task_sets[event.task])
        else:
            self.answers[(event.task, event.variant)] = dict(event.scorer.last.predictions)

    def _block(self, event) -> None:
        self.block_rows += event.rows


def assert_same_answers(got: dict, want: dict, rel: float = 1e-5) -> None:
    """Per request: log-likelihoods within `rel`, greedy flags identical."""
    assert got.keys() == want.keys()
    for key in want:
        assert len(got[key]) == len(want[key]), key
        for g_request, w_request in zip(got[key], want[key], strict=True):
            for g, w in zip(g_request, w_request, strict=True):
                if isinstance(w, (tuple, list)):  # (log-likelihood, is_greedy)
                    assert g[0] == pytest.approx(w[0], rel=rel, abs=1e-6), key
                    assert bool(g[1]) == bool(w[1]), key
                else:  # loglikelihood_rolling: one float
                    assert g == pytest.approx(w, rel=rel, abs=1e-6), key


def comparable(result) -> dict:
    """A result's JSON without what legitimately changes between runs (time, duration, out dir)."""
    data = result.to_dict()
    data.pop("run")
    return data


def angular_json(result) -> str:
    """An angular result as JSON text (NaN included) without timing: comparable bit for bit."""
    data = result.to_dict()
    data.pop("run"), data.pop("tokens_per_second")
    return json.dumps(data, sort_keys=True)
