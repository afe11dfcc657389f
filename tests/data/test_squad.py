"""SQuAD v1.1 data: the official JSON, .jsonl rows or the hub's validation split, in file order; every
malformed file is one error naming the file and the problem."""

from __future__ import annotations

import json

import pytest
from factories import SQUAD_EXAMPLES, squad_rows

from layerprobe.core.errors import OFFLINE_HINT, TaskError
from layerprobe.data.squad import load_squad


def test_load_official_json_in_file_order(squad_json):
    assert load_squad(squad_json) == SQUAD_EXAMPLES
    assert load_squad(squad_json, limit=3) == SQUAD_EXAMPLES[:3]


def test_load_jsonl_rows(tmp_path):
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in squad_rows()) + "\n\n", encoding="utf-8")
    assert load_squad(str(path)) == SQUAD_EXAMPLES


def test_load_from_the_hub_uses_the_validation_split(monkeypatch):
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or squad_rows())
    assert load_squad(limit=2) == SQUAD_EXAMPLES[:2]
    assert calls == [(("rajpurkar/squad",), {"split": "validation"})]


@pytest.mark.parametrize(
    "error",
    [ConnectionError("Couldn't reach 'rajpurkar/squad' on the Hub"), "DatasetNotFoundError", "LocalEntryNotFoundError"],
)
def test_load_offline_hub_is_a_task_error(monkeypatch, error):
    import datasets
    import datasets.exceptions
    import huggingface_hub.errors

    if error == "DatasetNotFoundError":
        error = datasets.exceptions.DatasetNotFoundError("rajpurkar/squad doesn't exist")
    elif error == "LocalEntryNotFoundError":
        error = huggingface_hub.errors.LocalEntryNotFoundError("offline and not cached")

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(TaskError) as info:
        load_squad()
    assert info.value.hint == OFFLINE_HINT and "rajpurkar/squad" in info.value.message


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _without(dictionary, key):
    return {k: v for k, v in dictionary.items() if k != key}


def test_load_errors_name_the_file_and_the_problem(tmp_path):
    cases = [
        (tmp_path / "missing.json", "does not exist"),
        (_write(tmp_path, "bad.json", '{"data": [}'), "not valid JSON"),
        (_write(tmp_path, "list.json", "[]"), "no top-level 'data' list"),
        (_write(tmp_path, "empty.json", '{"data": []}'), "contains no SQuAD questions"),
        (
            _write(
                tmp_path,
                "noq.json",
                json.dumps(
                    {"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x", "answers": [{"text": "c"}]}]}]}]}
                ),
            ),
            "data[0].paragraphs[0].qas[0]: field 'question' is missing",
        ),
        (
            _write(tmp_path, "ctx.json", json.dumps({"data": [{"paragraphs": [{"context": 3, "qas": []}]}]})),
            "field 'context' is not a str",
        ),
        (
            _write(
                tmp_path,
                "noans.json",
                json.dumps(
                    {"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "x", "question": "q", "answers": []}]}]}]}
                ),
            ),
            "has no gold answers",
        ),
        (_write(tmp_path, "bad.jsonl", json.dumps(squad_rows()[0]) + "\n{oops\n"), "line 2 is not valid JSON"),
        (
            _write(tmp_path, "noans.jsonl", json.dumps(_without(squad_rows()[0], "answers"))),
            "field 'answers' is missing",
        ),
        (_write(tmp_path, "text.jsonl", json.dumps({**squad_rows()[0], "answers": {"text": [1]}})), "list of strings"),
        (_write(tmp_path, "scalar.jsonl", "3\n"), "line 1 is not a JSON object"),
    ]
    for path, problem in cases:
        with pytest.raises(TaskError) as info:
            load_squad(path)
        assert problem in info.value.message, (path.name, info.value.message)
        assert path.name in info.value.message
    with pytest.raises(TaskError, match="at least 1"):
        load_squad(cases[0][0], limit=0)
