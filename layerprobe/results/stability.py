"""stability.json (`layerprobe/stability@1`): how much a block ranking depends on the data it was measured on.

`layerprobe stability` reads two or more angular.json / prune_drop.json of one model (different corpora,
seeds, chat-templated text, tasks) and ranks the blocks of each from most to least prunable. For every
pair of inputs it records Kendall's τ-b and Spearman's ρ of the two rankings and the Jaccard overlap of
their k most prunable blocks (k = 1 … ⌊n/2⌋ of the n blocks compared), each with a bootstrap 95 %
interval (stats/ranking.py). This module is the file's typed form and its validation when read back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import layerprobe.results.validate as v
from layerprobe.results.io import STABILITY_SCHEMA, check_schema
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.notebook import Notebook, Table, cell_text
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.rundir import RunDir
from layerprobe.results.validate import Node

ANGULAR_KIND, PRUNE_DROP_KIND = "angular", "prune_drop"
# How an input's scores are redrawn for the intervals: its windows, its documents, or its standard errors.
RESAMPLED = ("windows", "documents", "stderr")
METHODS = ("bootstrap", "parametric_bootstrap", "mixed_bootstrap")
SETTINGS_FIELDS: dict[str, v.Kind] = {
    "draws": v.integer(minimum=2),
    "seed": v.integer(),
    "confidence": lambda node: node.number(finite=True, low=0.0, high=1.0),
    "task": v.text(optional=True),
    "metric": v.text(optional=True),
}


@dataclass(frozen=True)
class StabilityInput:
    """One input file's ranking of the compared blocks.

    Attributes:
        path: The file as given.
        label: Its short name in tables and plots (its directory's name, made unique).
        kind: "angular" or "prune_drop".
        model_id: Its `model.id`.
        weights_fingerprint: Its `model.weights_fingerprint` (None in older files).
        task: The prune-drop task ranked (None for angular).
        metric: The metric whose ΔP is ranked (None for angular).
        higher_is_better: That metric's direction (None for angular).
        data: What it was measured on: the angular data block, or the prune-drop task's settings.
        scores: Per compared block (in `StabilityResult.blocks` order), lower = more prunable: the adjacent
            distance d(x^l, x^(l+1)), or the loss −ΔP (higher-is-better metric) / +ΔP (lower-is-better).
        ranking: The compared blocks, most prunable first (ties: lower block first).
        resampled: "windows", "documents" (the bootstrap) or "stderr" (the parametric fallback).
        units: How many windows or documents were resampled (None for "stderr").
        note: Why the per-window or per-document values could not be used (None when they were).
    """

    path: str
    label: str
    kind: str
    model_id: str
    weights_fingerprint: str | None
    task: str | None
    metric: str | None
    higher_is_better: bool | None
    data: Record
    scores: list[float]
    ranking: list[int]
    resampled: str
    units: int | None
    note: str | None

    @classmethod
    def from_dict(cls, node: Node, blocks: list[int]) -> StabilityInput:
        kind = node.key("kind").text()
        if kind not in (ANGULAR_KIND, PRUNE_DROP_KIND):
            node.key("kind").fail(f'"{ANGULAR_KIND}" or "{PRUNE_DROP_KIND}"')
        resampled = node.key("resampled").text()
        if resampled not in RESAMPLED:
            node.key("resampled").fail(" or ".join(f'"{r}"' for r in RESAMPLED))
        scores = [item.number(finite=True) for item in node.key("scores").items()]
        if len(scores) != len(blocks):
            node.key("scores").fail(f"an array of {len(blocks)} numbers (one per compared block)", f"got {len(scores)}")
        ranking = [item.integer(minimum=0) for item in node.key("ranking").items()]
        if sorted(ranking) != blocks:
            node.key("ranking").fail("the compared blocks, each once", f"got {ranking}")
        return cls(
            path=node.key("path").text(),
            label=node.key("label").text(nonempty=True),
            kind=kind,
            model_id=node.key("model_id").text(),
            weights_fingerprint=node.key("weights_fingerprint").text(optional=True),
            task=node.key("task").text(optional=True),
            metric=node.key("metric").text(optional=True),
            higher_is_better=node.key("higher_is_better").flag(optional=True),
            data=node.key("data").obj(),
            scores=scores,
            ranking=ranking,
            resampled=resampled,
            units=node.key("units").integer(optional=True, minimum=1),
            note=node.key("note").text(optional=True),
        )


@dataclass(frozen=True)
class StabilityPair:
    """The agreement of two inputs' rankings (indices into `StabilityResult.inputs`), with 95 % intervals.

    τ-b and ρ are None where one side's scores are all equal; an interval is None (a Jaccard interval
    [NaN, NaN]) where fewer than two bootstrap draws were defined.
    """

    first: int
    second: int
    kendall_tau_b: float | None
    spearman_rho: float | None
    jaccard_lowest_k: list[float]
    kendall_tau_b_ci95: list[float] | None
    spearman_rho_ci95: list[float] | None
    jaccard_lowest_k_ci95: list[list[float]]
    method: str

    @classmethod
    def from_dict(cls, node: Node, inputs: int, ks: int) -> StabilityPair:
        first, second = node.key("first").integer(minimum=0), node.key("second").integer(minimum=0)
        if not first < second < inputs:
            node.key("second").fail(f"an input index above first ({first}) and below {inputs}", f"got {second}")
        jaccard = [item.number(low=0.0, high=1.0) for item in node.key("jaccard_lowest_k").items()]
        intervals = [
            v.interval(item, 0.0, 1.0, estimate=jaccard[k] if k < len(jaccard) else None) or []
            for k, item in enumerate(node.key("jaccard_lowest_k_ci95").items())
        ]
        for name, count in (("jaccard_lowest_k", len(jaccard)), ("jaccard_lowest_k_ci95", len(intervals))):
            if count != ks:
                node.key(name).fail(f"an array of {ks} items (k = 1 … {ks})", f"got {count}")
        if any(not interval for interval in intervals):
            node.key("jaccard_lowest_k_ci95").fail("an array of [low, high] pairs")
        method = node.key("method").text()
        if method not in METHODS:
            node.key("method").fail(" or ".join(f'"{m}"' for m in METHODS))
        tau = node.key("kendall_tau_b").number(optional=True, low=-1.0, high=1.0)
        rho = node.key("spearman_rho").number(optional=True, low=-1.0, high=1.0)
        return cls(
            first=first,
            second=second,
            kendall_tau_b=tau,
            spearman_rho=rho,
            jaccard_lowest_k=jaccard,
            kendall_tau_b_ci95=v.interval(node.key("kendall_tau_b_ci95"), -1.0, 1.0, estimate=tau),
            spearman_rho_ci95=v.interval(node.key("spearman_rho_ci95"), -1.0, 1.0, estimate=rho),
            jaccard_lowest_k_ci95=intervals,
            method=method,
        )


@dataclass(frozen=True, repr=False)
class StabilityResult(Notebook):
    """Every pair of inputs' ranking agreement, over the blocks all inputs scored.

    Attributes:
        model: The model block of the first input (all inputs are of one model).
        settings: draws, seed, confidence (0.95), and the --task / --metric asked for (None: defaults).
        blocks: The compared blocks (those every input scored with a finite number), ascending.
        jaccard_chance: The expected Jaccard overlap of two unrelated rankings, per k.
        inputs: One entry per input file, in the order given.
        pairs: One entry per pair of inputs (i < j), in order.
        notes: What a reader must know: fallbacks, blocks left out, differing loading options.
        run: When and with which versions it was computed.
    """

    model: ModelInfo
    settings: JSONObject
    blocks: list[int]
    jaccard_chance: list[float]
    inputs: list[StabilityInput]
    pairs: list[StabilityPair]
    notes: list[str]
    run: RunInfo

    @property
    def ks(self) -> list[int]:
        """The sizes of the lowest-k sets compared: k = 1 … ⌊n/2⌋."""
        return list(range(1, len(self.blocks) // 2 + 1))

    def table(self) -> Table:
        """One row per pair of inputs: τ-b and ρ with their 95 % intervals, the Jaccard overlap at each k."""
        table: Table = {"first": [], "second": []}
        for pair in self.pairs:
            table["first"].append(self.inputs[pair.first].label)
            table["second"].append(self.inputs[pair.second].label)
            for name, value, interval in (
                ("kendall_tau_b", pair.kendall_tau_b, pair.kendall_tau_b_ci95),
                ("spearman_rho", pair.spearman_rho, pair.spearman_rho_ci95),
            ):
                table.setdefault(name, []).append(value)
                table.setdefault(f"{name}_low", []).append(interval[0] if interval else None)
                table.setdefault(f"{name}_high", []).append(interval[1] if interval else None)
            for k, overlap in zip(self.ks, pair.jaccard_lowest_k, strict=True):
                table.setdefault(f"jaccard_k{k}", []).append(overlap)
        return table

    def headline(self) -> str:
        taus = [p.kendall_tau_b for p in self.pairs if p.kendall_tau_b is not None]
        agreement = f"Kendall τ-b {cell_text(min(taus))} to {cell_text(max(taus))}" if taus else "τ-b undefined"
        return f"{self.model.id}: {len(self.inputs)} inputs over {len(self.blocks)} blocks, {agreement}"

    def run_file(self, run: RunDir) -> Path:
        return run.stability_json

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": STABILITY_SCHEMA,
            "model": asdict(self.model),
            "settings": dict(self.settings),
            "blocks": list(self.blocks),
            "k": self.ks,
            "jaccard_chance": list(self.jaccard_chance),
            "inputs": [asdict(item) for item in self.inputs],
            "pairs": [asdict(pair) for pair in self.pairs],
            "notes": list(self.notes),
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: JSONObject, source: str = "stability result") -> StabilityResult:
        """Validate every field and build the result.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, STABILITY_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        blocks = [item.integer(minimum=0) for item in root.key("blocks").items(min_length=2)]
        if blocks != sorted(set(blocks)) or blocks[-1] >= model.num_layers:
            root.key("blocks").fail(f"distinct ascending block indices below L = {model.num_layers}", f"got {blocks}")
        ks = len(blocks) // 2
        chance = [item.number(low=0.0, high=1.0) for item in root.key("jaccard_chance").items()]
        if len(chance) != ks:
            root.key("jaccard_chance").fail(f"an array of {ks} numbers (k = 1 … {ks})", f"got {len(chance)}")
        inputs = [StabilityInput.from_dict(item, blocks) for item in root.key("inputs").items(min_length=2)]
        pairs = [StabilityPair.from_dict(item, len(inputs), ks) for item in root.key("pairs").items()]
        expected = [(i, j) for i in range(len(inputs)) for j in range(i + 1, len(inputs))]
        if [(p.first, p.second) for p in pairs] != expected:
            root.key("pairs").fail(f"one entry per pair of the {len(inputs)} inputs, in order")
        return cls(
            model=model,
            settings=v.checked_record(root.key("settings"), SETTINGS_FIELDS),
            blocks=blocks,
            jaccard_chance=chance,
            inputs=inputs,
            pairs=pairs,
            notes=[item.text() for item in root.key("notes").items()],
            run=RunInfo.from_dict(root.key("run")),
        )
