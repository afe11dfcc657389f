"""compare on per-document answers: an exact McNemar test per matching variant and task, and non-inferiority.

When both prune-drop runs kept their per-document values (`prune-drop --log-samples`: samples/<task>.jsonl
beside prune_drop.json), the baseline's and the candidate's right/wrong answers to the same documents
pair up. For the gated metric of every common task (when it is right/wrong per document: acc, acc_norm,
exact_match) and every variant both evaluated — the full model, and each common removed block — the
accuracy change is tested with the exact McNemar test (`stats.mcnemar`), and the p-values are adjusted
with Holm over every test of the comparison. The rule `max_drop_upper` asks for non-inferiority of the
full model: it passes only when the one-sided 95 % upper bound of the accuracy drop is within the margin.
The rule `max_flip_rate` caps, per generating task and filter, the share of documents whose full-model
answer after the filter differs between the two runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from layerprobe.core import ANSWER, DEFAULT_MULTIPLICITY, SIGNIFICANCE_LEVEL, ResultError
from layerprobe.gate.rules.record import RuleResult, within
from layerprobe.gate.rules.thresholds import GateRules
from layerprobe.results import Node, PruneDropResult, RunDir, read_json_lines
from layerprobe.stats import McNemar, adjust_pvalues, mcnemar, wilson_interval

# Per variant (None: the full model), per document (leaf task, doc id): right (True) or wrong.
Answers = dict[int | None, dict[tuple[str, str], bool]]


@dataclass(frozen=True)
class AnswerTest:
    """The exact McNemar test of one variant of one task: the candidate's answers against the baseline's."""

    task: str
    metric: str
    variant: int | None  # None: the full models; l: block l removed from both
    test: McNemar
    p_adjusted: float
    baseline_accuracy: float  # over the paired documents
    candidate_accuracy: float

    @property
    def label(self) -> str:
        """`<task>/<metric>` and the variant, e.g. `arc_easy/acc full model` or `arc_easy/acc −block 3`."""
        return f"{self.task}/{self.metric} " + ("full model" if self.variant is None else f"−block {self.variant}")

    def to_dict(self) -> dict[str, object]:
        """One test as compare's JSON reports it."""
        t = self.test
        return {
            "task": self.task,
            "metric": self.metric,
            "variant": self.variant,
            "documents": t.documents,
            "losses": t.losses,
            "gains": t.gains,
            "baseline_accuracy": self.baseline_accuracy,
            "candidate_accuracy": self.candidate_accuracy,
            "delta": t.delta,
            "p_value": t.pvalue,
            "p_adjusted": self.p_adjusted,
            "significant": self.p_adjusted < SIGNIFICANCE_LEVEL,
            "drop_upper": t.drop_upper,
            "level": t.level,
            "bound": t.bound,
        }


@dataclass(frozen=True)
class AnswerTests:
    """Every McNemar test of one comparison, Holm-adjusted together (`method`) over the `family`."""

    tests: list[AnswerTest]
    method: str = DEFAULT_MULTIPLICITY

    @property
    def family(self) -> int:
        return len(self.tests)

    def to_dict(self) -> dict[str, object]:
        return {"method": self.method, "family": self.family, "tests": [t.to_dict() for t in self.tests]}


def answer_tests(
    baseline: PruneDropResult, candidate: PruneDropResult, paths: tuple[Path, Path], rules: GateRules
) -> tuple[AnswerTests | None, list[RuleResult], list[str]]:
    """The McNemar tests of every common task and variant, the non-inferiority rules, and notes.

    Returns None for the tests when neither side kept per-document answers (nothing to note then).

    Raises:
        ResultError: `max_drop_upper` is set but a common task's full-model answers cannot be paired.
    """
    found: list[tuple[str, str, int | None, McNemar, list[bool]]] = []
    notes: list[str] = []
    unpaired: dict[str, str] = {}  # task → why its full models could not be paired
    common = [t for t in baseline.tasks if t in candidate.tasks]
    any_samples = any(RunDir(path.parent).sample_file(task).is_file() for path in paths for task in common)
    for task in common:
        metric = rules.metric_for(task, baseline.tasks[task].primary_metric)
        sides = [_read_answers(path, task, metric) for path in paths]
        why = next((s for s in sides if isinstance(s, str)), None)
        if why is not None:
            unpaired[task] = why
            continue
        base, cand = sides
        assert not isinstance(base, str) and not isinstance(cand, str)
        common_layers = [v for v in baseline.tasks[task].metrics[metric].layers if v in cand]
        for variant in [None, *common_layers]:
            if variant not in base or variant not in cand:
                continue
            if base[variant].keys() != cand[variant].keys():
                why = "the two runs answered different documents (another --limit or task version?)"
                if variant is None:
                    unpaired[task] = why
                notes.append(f"{task}/{metric}: {why}; no McNemar test" + _of(variant))
                continue
            right = [base[variant][d] for d in base[variant]]
            test = mcnemar(right, [cand[variant][d] for d in base[variant]])
            found.append((task, metric, variant, test, right))
    if any_samples:
        notes += [f"{task}: no McNemar test: {why}" for task, why in unpaired.items()]
    adjusted = adjust_pvalues([f[3].pvalue for f in found], DEFAULT_MULTIPLICITY).pvalues
    tests = [
        AnswerTest(
            task,
            metric,
            variant,
            test,
            float(p if p is not None else 1.0),
            sum(right) / len(right),
            sum(right) / len(right) + test.delta,
        )
        for (task, metric, variant, test, right), p in zip(found, adjusted, strict=True)
    ]
    results = [] if rules.max_flip_rate is None else flip_rate_rules(common, paths, rules.max_flip_rate)
    if rules.max_drop_upper is not None:
        for task in (t for t in baseline.tasks if t in candidate.tasks):
            full = next((t for t in tests if t.task == task and t.variant is None), None)
            if full is None:
                raise ResultError(
                    f"max_drop_upper needs both runs' per-document answers for {task}: "
                    f"{unpaired.get(task, 'no paired full-model answers')}.",
                    hint="Run prune-drop with --log-samples for baseline and candidate, on the same documents.",
                )
            results.append(_non_inferiority(full, rules.max_drop_upper))
    return (AnswerTests(tests) if found or any_samples else None), results, notes


def flip_rate_rules(tasks: list[str], paths: tuple[Path, Path], cap: float) -> list[RuleResult]:
    """Per generating task and filter: the share of documents whose full-model answer changed ≤ `cap`.

    Raises:
        ResultError: a task has no per-document answers after a filter on both sides.
    """
    results = []
    for task in tasks:
        base, cand = (_filtered_answers(path, task) for path in paths)
        shared = [name for name in base if name in cand]
        if not shared and (base or cand):
            raise ResultError(
                f"max_flip_rate needs both runs' per-document answers of generating task {task}, after the same "
                "filters; only one run has them.",
                hint="Run prune-drop with --log-samples for baseline and candidate.",
            )
        for name in shared:
            if base[name].keys() != cand[name].keys():
                raise ResultError(f"{task}: the two runs answered different documents; flip rate not defined.")
            flips = sum(base[name][d] != cand[name][d] for d in base[name])
            documents = len(base[name])
            rate = flips / documents
            low, high = wilson_interval(flips, documents) or (0.0, 1.0)
            results.append(
                RuleResult(
                    "prune_drop",
                    "flip_rate",
                    f"{task}/{name}",
                    f"share of documents whose full-model answer ({name}) changed ≤ {cap:g}",
                    {"max_flip_rate": cap},
                    0.0,
                    rate,
                    rate,
                    cap,
                    within(rate, cap),
                    f"{flips} of {documents} answers changed ({rate:.4f}, Wilson 95 % [{low:.4f}, {high:.4f}]); "
                    f"allowed ≤ {cap:g}",
                    {"flips": flips, "documents": documents, "ci95": [low, high]},
                    worse_if="higher",
                )
            )
    if not results:
        raise ResultError(
            "max_flip_rate needs both runs' per-document answers of a generating (generate_until) task; "
            f"none of {', '.join(tasks)} has them.",
            hint="Run prune-drop with --log-samples for baseline and candidate on a generating task.",
        )
    return results


def _filtered_answers(path: Path, task: str) -> dict[str, dict[tuple[str, str], object]]:
    """Filter → the full model's answer per document, from samples/<task>.jsonl beside `path` (empty: none)."""
    sample_file = RunDir(path.parent).sample_file(task)
    if not sample_file.is_file():
        return {}
    out: dict[str, dict[tuple[str, str], object]] = {}
    prefix = f"{ANSWER},"
    for number, row in enumerate(read_json_lines(sample_file), start=1):
        node = Node(row, f"{sample_file}:{number}")
        if node.key("variant").integer(optional=True, minimum=0) is not None:
            continue
        doc = (node.key("task").text(), repr(node.key("doc_id").value))
        for key, value in row.items():
            if key.startswith(prefix):
                out.setdefault(key[len(prefix) :], {})[doc] = value
    return out


def _non_inferiority(full: AnswerTest, margin: float) -> RuleResult:
    """Pass ⇔ the one-sided upper confidence bound of the full model's accuracy drop ≤ margin."""
    t = full.test
    level = f"{t.level:.0%}"
    message = (
        f"accuracy drop {t.drop:+.4f} over {t.documents} paired documents ({t.losses} lost, {t.gains} gained); "
        f"one-sided {level} upper bound {t.drop_upper:.4f} {'≤' if t.drop_upper <= margin else '>'} margin "
        f"{margin:g}: {'non-inferior' if t.drop_upper <= margin else 'non-inferiority not shown'}"
    )
    return RuleResult(
        "prune_drop",
        "non_inferiority",
        f"{full.task}/{full.metric}",
        f"one-sided {level} upper bound of the full model's accuracy drop (exact, paired answers) ≤ {margin:g}",
        {"max_drop_upper": margin, "higher_is_better": True},
        full.baseline_accuracy,
        full.candidate_accuracy,
        t.drop_upper,
        margin,
        within(t.drop_upper, margin),
        message,
        {"documents": t.documents, "losses": t.losses, "gains": t.gains, "drop": t.drop, "p_value": t.pvalue},
        worse_if="lower",
    )


def _of(variant: int | None) -> str:
    return "" if variant is None else f" for block {variant} removed"


def _read_answers(path: Path, task: str, metric: str) -> Answers | str:
    """Right/wrong per variant and document from samples/<task>.jsonl beside `path`; or why not."""
    sample_file = RunDir(path.parent).sample_file(task)
    if not sample_file.is_file():
        return f"{sample_file} is missing (run prune-drop with --log-samples)"
    answers: Answers = {}
    for number, row in enumerate(read_json_lines(sample_file), start=1):
        if metric not in row:
            continue
        node = Node(row, f"{sample_file}:{number}")
        value = row[metric]
        if isinstance(value, bool) or value in (0, 1):
            right = bool(value)
        else:
            return f"{metric} is not right/wrong per document in {sample_file}"
        variant = node.key("variant").integer(optional=True, minimum=0)
        answers.setdefault(variant, {})[node.key("task").text(), repr(node.key("doc_id").value)] = right
    if None not in answers:
        return f"{sample_file} holds no full-model answers of {metric}"
    return answers
