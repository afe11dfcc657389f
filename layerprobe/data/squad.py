"""Reading SQuAD v1.1 questions: the hub's validation split, the official JSON, or .jsonl rows.

Every malformed input becomes one `TaskError` naming the file, the place in it and the expected format;
a `limit` reads (and checks) only the questions it keeps. Scoring lives in `squad.py`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from layerprobe.core import OFFLINE_HINT, TaskError

Field = TypeVar("Field")

HUB_DATASET = "rajpurkar/squad"
_FORMAT_HINT = (
    "expected the official SQuAD v1.1 JSON ({'data': [{'paragraphs': [{'context', 'qas'}]}]}) "
    "or .jsonl rows {id, question, context, answers: {text: [...]}}"
)


@dataclass(frozen=True)
class SquadExample:
    """One question, its context paragraph, and every gold answer text (dev questions have up to ~5)."""

    id: str
    question: str
    context: str
    answers: tuple[str, ...]


def load_squad(path: str | Path | None = None, limit: int | None = None) -> list[SquadExample]:
    """Read SQuAD v1.1 questions in file order (article, paragraph, question), optionally the first `limit`.

    Args:
        path: None for the hub's `rajpurkar/squad` validation split; a `.jsonl` file of rows in the hub's
            format (id, question, context, answers: {text: [...]}); any other file is read as the
            official SQuAD v1.1 JSON.
        limit: Keep only the first `limit` questions in that order (a cheap, reproducible subset).

    Raises:
        TaskError: The dataset cannot be reached offline, or the file is missing or malformed.
    """
    if limit is not None and limit < 1:
        raise TaskError(f"The SQuAD question limit must be at least 1, got {limit}")
    if path is not None and not Path(path).is_file():
        raise TaskError(f"SQuAD file {path} does not exist or is not a file", hint=OFFLINE_HINT)
    rows = (
        _hub_examples()
        if path is None
        else _jsonl_examples(Path(path))
        if Path(path).suffix == ".jsonl"
        else _official_examples(Path(path))
    )
    examples = list(itertools.islice(rows, limit))  # lazily: a limit never reads (or checks) the rest
    if not examples:
        raise TaskError(f"{path or HUB_DATASET} contains no SQuAD questions", hint=_FORMAT_HINT)
    return examples


def _hub_examples() -> Iterator[SquadExample]:
    import datasets
    from datasets.exceptions import DatasetsError

    try:
        dataset = datasets.load_dataset(HUB_DATASET, split="validation")
    except (OSError, DatasetsError) as exc:  # ConnectionError, offline mode, not found, HTTP errors
        raise TaskError(f"Cannot load {HUB_DATASET} from the hub: {exc}", hint=OFFLINE_HINT) from exc
    for i, row in enumerate(dataset):
        yield _row_example(row, f"{HUB_DATASET} validation row {i}")


def _official_examples(path: Path) -> Iterator[SquadExample]:
    data = _read_json(_read_text(path), str(path))
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise TaskError(f"{path} has no top-level 'data' list", hint=_FORMAT_HINT)
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(_field(article, "paragraphs", list, f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = _field(paragraph, "context", str, where)
            for q, qa in enumerate(_field(paragraph, "qas", list, where)):
                at = f"{where}.qas[{q}]"
                answers = _field(qa, "answers", list, at)
                texts = [_field(ans, "text", str, f"{at}.answers[{k}]") for k, ans in enumerate(answers)]
                yield _example(_field(qa, "id", str, at), _field(qa, "question", str, at), context, texts, at)


def _jsonl_examples(path: Path) -> Iterator[SquadExample]:
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if line.strip():
            yield _row_example(_read_json(line, f"{path}, line {number}"), f"{path}, line {number}")


def _row_example(row: object, where: str) -> SquadExample:
    """One question from a row in the hub's format (id, question, context, answers: {text: [...]})."""
    texts = _field(_field(row, "answers", dict, where), "text", list, f"{where}: answers")
    if not all(isinstance(t, str) for t in texts):
        raise TaskError(f"{where}: answers.text must be a list of strings", hint=_FORMAT_HINT)
    return _example(
        _field(row, "id", str, where),
        _field(row, "question", str, where),
        _field(row, "context", str, where),
        texts,
        where,
    )


def _example(id_: str, question: str, context: str, answers: list[str], where: str) -> SquadExample:
    if not answers:  # SQuAD v2's unanswerable questions look like this; v1.1 metrics cannot score them
        raise TaskError(f"{where}: question {id_!r} has no gold answers (SQuAD v2 is not supported)")
    return SquadExample(id=id_, question=question, context=context, answers=tuple(answers))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"Cannot read SQuAD file {path}: {exc}", hint=_FORMAT_HINT) from exc


def _read_json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{where} is not valid JSON ({exc})", hint=_FORMAT_HINT) from exc


def _field(obj: object, key: str, kind: type[Field], where: str) -> Field:
    """`obj[key]`, checked to be a JSON object's field of type `kind` (else a `TaskError` naming `where`)."""
    if not isinstance(obj, dict):
        raise TaskError(f"{where} is not a JSON object", hint=_FORMAT_HINT)
    value = obj.get(key)
    if not isinstance(value, kind):
        problem = "is missing" if key not in obj else f"is not a {kind.__name__}"
        raise TaskError(f"{where}: field {key!r} {problem}", hint=_FORMAT_HINT)
    return value
