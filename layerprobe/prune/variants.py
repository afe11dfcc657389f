"""Score any set of removed units (blocks and sublayers) on prune-curve's tasks, each (task, set) once.

`VariantScorer.score(variants, tasks)` scores what it has not scored yet and keeps every Evaluation, so
a search and the final scoring of the chosen sets never pay twice for one set. `--task corpus` scores
a batch of block sets in one shared-prefix pass (`evaluate.CorpusScorer`: a set replays the recorded
input of its first removed block); sublayer sets and the other tasks run the whole model with the set
removed in memory (the simple engine). With `--precision`, the lm-eval tasks are scored in rounds and
each set stops once its ΔP is known (`curve_rounds.py`). Every block forward pass is counted (`work`:
block × token evaluations), so a search can report what it cost.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from layerprobe.core import CORPUS_TASK, PruneSpec
from layerprobe.evaluate import CorpusScorer, PreparedTasks, Scorer, make_scorers, paired_delta
from layerprobe.model import hidden_from_input, removed_blocks, zeroed_sublayers
from layerprobe.prune.assemble import restricted
from layerprobe.prune.curve_rounds import SequentialSets
from layerprobe.prune.sequential import SequentialScorer
from layerprobe.prune.strategies import ATTENTION, BLOCK, MLP, Variant

if TYPE_CHECKING:
    from torch import nn

    from layerprobe.data import ImageWindow, Window
    from layerprobe.model import BlockSublayers, LayerStack, LoadedModel, Progress
    from layerprobe.results import Evaluation


@contextlib.contextmanager
def removed_units(
    stack: LayerStack, variant: Variant, sublayers: Sequence[BlockSublayers] | None = None
) -> Iterator[None]:
    """The model with `variant` removed in memory: its blocks taken out, its sublayers' outputs zeroed."""
    with contextlib.ExitStack() as inside:
        for kind in (ATTENTION, MLP):
            indices = [b for b, k in variant if k == kind]
            if indices:
                if sublayers is None:
                    raise ValueError("zeroing sublayers needs them located first")
                blocks = [stack.blocks[i] for i in indices]
                inside.enter_context(zeroed_sublayers(blocks, [sublayers[i] for i in indices], kind))
        inside.enter_context(removed_blocks(stack, [b for b, k in variant if k == BLOCK]))
        yield


class VariantScorer:
    """Every task of a prune-curve run, scored on any removed set, each (task, set) at most once."""

    def __init__(
        self,
        loaded: LoadedModel,
        stack: LayerStack,
        prune: PruneSpec,
        progress: Progress,
        sublayers: Sequence[BlockSublayers] | None = None,
        windows: Sequence[Window | ImageWindow] | None = None,
        prepared: PreparedTasks | None = None,
    ) -> None:
        self.loaded, self.stack, self.prune, self.progress = loaded, stack, prune, progress
        self.sublayers = sublayers
        self.windows = windows
        self.prepared = prepared  # the lm-eval tasks, built before the weights loaded (None: built here)
        self.done: dict[tuple[str, Variant], Evaluation] = {}
        self.work = 0  # block × token evaluations run so far
        self._scorers: list[tuple[Scorer, list[str]]] | None = None
        self._rounds: dict[str, SequentialSets] = {}  # --precision: each lm-eval task's rounds so far

    def evaluation(self, task: str, variant: Variant) -> Evaluation:
        """A finished evaluation (KeyError if never scored)."""
        return self.done[(task, variant)]

    def value(self, task: str, variant: Variant, metric: str) -> float | None:
        """The score of `metric` without `variant` (None if the task does not report it).

        For a set scored sequentially (`--precision`) it is the full model's value (on every document
        scored so far) plus the mean paired difference on the set's own documents.
        """
        evaluation = self.evaluation(task, variant)
        score = evaluation.metrics.get(metric)
        if score is None or not evaluation.sequential:
            return None if score is None else score.value
        base = self.evaluation(task, ())
        samples = evaluation.per_sample[metric]
        pair = paired_delta(restricted(base.per_sample[metric], samples), samples)
        return None if pair is None else base.metrics[metric].value + pair.delta

    def missing(self, variants: Sequence[Variant], tasks: Sequence[str]) -> int:
        """How many (task, set) pairs `score(variants, tasks)` would compute."""
        return sum((t, v) not in self.done for t in tasks for v in dict.fromkeys(variants))

    def score(self, variants: Sequence[Variant], tasks: Sequence[str]) -> None:
        """Score every (task, variant) not scored yet (the full model () always included), advancing progress."""
        wanted = list(dict.fromkeys([(), *variants]))
        with self.counting():
            if CORPUS_TASK in tasks:
                self._score_corpus([v for v in wanted if (CORPUS_TASK, v) not in self.done])
            others = [t for t in tasks if t != CORPUS_TASK]
            if others:
                self._score_others(wanted, others)

    # the work --------------------------------------------------------------------------------------
    def _score_corpus(self, variants: list[Variant]) -> None:
        if not variants:
            return
        blocks_only = [v for v in variants if v and all(k == BLOCK for _, k in v)]
        with_sublayers = [v for v in variants if v and v not in blocks_only]
        groups: list[tuple[list[Variant], CorpusScorer]] = []
        if blocks_only or () in variants:  # one shared-prefix pass for every set of whole blocks
            groups.append((blocks_only, self._corpus_scorer([tuple(b for b, _ in v) for v in blocks_only])))
        if with_sublayers:
            groups.append((with_sublayers, self._corpus_scorer(list(with_sublayers), ablate=True)))
        for members, scorer in groups:
            for variant in [(), *members]:
                if (CORPUS_TASK, variant) in self.done:
                    continue
                key = variant if scorer.ablate is not None else tuple(b for b, _ in variant)
                with scorer.variant(cast("tuple[int, ...]", key)):
                    self.done[(CORPUS_TASK, variant)] = scorer.score(CORPUS_TASK)
                self.progress.on_advance(1)

    def _corpus_scorer(self, variants: Sequence[Hashable], ablate: bool = False) -> CorpusScorer:
        prune = self.prune
        scorer = CorpusScorer(
            self.loaded,
            self.stack,
            prune.corpus,
            cast("list[int | tuple[int, ...]]", list(variants)),
            prune.batch_size,
            prune.engine,
            windows=self.windows,
            seed=prune.seed,
            ablate=(lambda key: removed_units(self.stack, cast("Variant", key), self.sublayers)) if ablate else None,
        )
        self.windows = scorer.windows  # read once, shared by every later pass
        return scorer

    def _score_others(self, variants: list[Variant], tasks: list[str]) -> None:
        if self._scorers is None:  # lm-eval / SQuAD: the set is removed in memory around the scorer's baseline
            every = tuple(t for t in self.prune.tasks if t != CORPUS_TASK)
            simple = replace(self.prune, tasks=every, engine="simple")
            self._scorers = make_scorers(self.loaded, self.stack, simple, [], self.progress, prepared=self.prepared)
        for scorer, scorer_tasks in self._scorers if self.prune.precision is not None else []:
            for task in [t for t in scorer_tasks if t in tasks]:  # lm-eval tasks only: PruneSpec refuses others
                self._score_rounds(cast(SequentialScorer, scorer), task, variants)
        for scorer, scorer_tasks in self._scorers if self.prune.precision is None else []:
            for variant in variants:
                pending = [t for t in scorer_tasks if t in tasks and (t, variant) not in self.done]
                if not pending:
                    continue
                with removed_units(self.stack, variant, self.sublayers), scorer.variant(None):
                    for task in pending:
                        self.done[(task, variant)] = scorer.score(task)
                        if not scorer.reports_progress:
                            self.progress.on_advance(1)

    def _score_rounds(self, scorer: SequentialScorer, task: str, variants: list[Variant]) -> None:
        """--precision: score the sets of `variants` not scored yet in rounds, each until it has stopped."""
        prune = self.prune
        assert prune.precision is not None
        if task not in self._rounds:
            self._rounds[task] = SequentialSets(scorer, task, prune.precision, prune.round_size, prune.seed)
        rounds = self._rounds[task]
        pending = [v for v in variants if v and (task, v) not in self.done]
        found = rounds.score(pending, lambda variant: removed_units(self.stack, variant, self.sublayers))
        for variant, evaluation in found.items():
            self.done[(task, variant)] = evaluation
            self.progress.on_advance(1)
        if (task, ()) not in self.done:
            self.progress.on_advance(1)
        self.done[(task, ())] = rounds.baseline()  # now on every document any set has used

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count block × token evaluations of the full stack's blocks (stand-ins and removed blocks never run)."""

        def count(_module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            hidden = hidden_from_input(args, kwargs)
            self.work += int(hidden.numel() // hidden.shape[-1])

        handles = [block.register_forward_pre_hook(count, with_kwargs=True) for block in self.stack.blocks]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
