"""Input files the tests hand to layerprobe: local lm-eval tasks, corpora and SQuAD data.

The lm-eval tasks themselves are fixtures on disk (tests/data/tasks, described in its README); what is
built here are the variants the tests need around them, and every corpus and SQuAD file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from layerprobe.data.squad import SquadExample

TASKS_DIR = Path(__file__).resolve().parents[1] / "data" / "tasks"
# MMLU-shaped group, ARC-shaped, rolling perplexity: the three local tasks (see tests/data/tasks/README.md).
TASKS = ("lp_mmlu", "lp_arc_like", "lp_pydoc_ppl")

# The ARC-shaped questions asked for a generated answer: what the two generation tasks below share.
GENERATE_ON_ARC = """\
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/arc_like_test.jsonl
output_type: generate_until
test_split: test
doc_to_text: "Question: {{question}}\\nAnswer:"
"""

# ...and score the generated answer the same way.
EXACT_MATCH = """\
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

GENERATION_YAML = f"""\
task: lp_gen
{GENERATE_ON_ARC}\
doc_to_target: "{{{{choices.text[choices.label.index(answerKey)]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 3
  do_sample: false
{EXACT_MATCH}"""


# GSM8K-shaped: generate_until with a strict and a flexible answer extractor (GSM8K's own filter names;
# the flexible one here keeps the last word, so a random tiny model's answers can differ), so that flip
# rates are counted per filter.
GSM_YAML = f"""\
task: lp_gsm
{GENERATE_ON_ARC}\
doc_to_target: "{{{{choices.label.index(answerKey)}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
  do_sample: false
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: '#### (\\-?[0-9\\.\\,]+)' 
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: '(\\S+)' 
      - function: take_first
{EXACT_MATCH}"""


def tasks_with_generation(folder: Path) -> Path:
    """The local tasks plus two tiny generate_until tasks (lp_gen; lp_gsm with two filters), in one include path."""
    shutil.copytree(TASKS_DIR, folder)
    (folder / "lp_gen.yaml").write_text(GENERATION_YAML)
    (folder / "lp_gsm.yaml").write_text(GSM_YAML)
    return folder


def malformed_task_yaml(directory: Path) -> Path:
    """A task YAML that is not valid YAML (line 3)."""
    path = directory / "bad_task.yaml"
    path.write_text("task: lp_bad\ndataset_path: json\n  output_type: [multiple_choice\n")
    return path


def write_corpora(directory: Path, texts: list[str]) -> tuple[Path, Path, Path]:
    """The same documents as corpus.txt (paragraphs), corpus.jsonl and corpus.parquet (field `body`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    txt = directory / "corpus.txt"
    txt.write_text("\n\n".join(texts), encoding="utf-8")
    jsonl = directory / "corpus.jsonl"
    jsonl.write_text("\n".join(json.dumps({"body": t, "id": i}) for i, t in enumerate(texts)), encoding="utf-8")
    parquet = directory / "corpus.parquet"
    pq.write_table(pa.table({"body": texts}), parquet)
    return txt, jsonl, parquet


# ---------------------------------------------------------------------------------------------- SQuAD
# Paragraphs written for the tests. The first is far longer than 64 tokens, so with max_length=64 and
# doc_stride=16 it becomes several overlapping windows.
EIFFEL = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
    "after the engineer Gustave Eiffel, whose company designed and built the tower between 1887 and 1889. "
    "It was built as the centrepiece of the 1889 World's Fair, and although some of France's leading "
    "artists criticised it at first, it has become a cultural icon of the country. The tower is 330 "
    "metres tall, about as high as an 81-storey building, and it was the tallest man-made structure in "
    "the world until the Chrysler Building in New York City was finished in 1930. Visitors can reach "
    "three levels, with restaurants on the first and second. The upper platform of the top level is 276 "
    "metres above the ground, the highest observation deck open to the public in the European Union."
)
PYTHON = (
    "Python is a high-level programming language created by Guido van Rossum and first released in "
    "1991. Its design philosophy emphasises code readability through the use of significant indentation."
)
AMAZON = (
    "The Amazon River in South America is the largest river in the world by discharge volume of water. "
    "It flows through Peru, Colombia and Brazil before it reaches the Atlantic Ocean."
)
# (title, context, [(id, question, [gold answers])])
SQUAD_PARAGRAPHS = [
    (
        "Eiffel Tower",
        EIFFEL,
        [
            ("q1", "Who is the tower named after?", ["Gustave Eiffel", "engineer Gustave Eiffel"]),
            ("q2", "In which city is the Eiffel Tower?", ["Paris"]),
            (
                "q3",
                "Which building overtook the tower as the tallest structure?",
                ["the Chrysler Building", "Chrysler Building"],
            ),
            ("q4", "How high above the ground is the upper platform?", ["276 metres"]),
            ("q5", "For which event was the tower built?", ["the 1889 World's Fair", "1889 World's Fair"]),
        ],
    ),
    (
        "Python",
        PYTHON,
        [
            ("q6", "Who created Python?", ["Guido van Rossum"]),
            ("q7", "When was Python first released?", ["1991"]),
        ],
    ),
    (
        "Amazon",
        AMAZON,
        [
            ("q8", "Into which ocean does the Amazon flow?", ["the Atlantic Ocean", "Atlantic Ocean"]),
            ("q9", "By what measure is the Amazon the largest river?", ["discharge volume of water"]),
        ],
    ),
]
SQUAD_EXAMPLES = [
    SquadExample(qid, question, context, tuple(golds))
    for _, context, qas in SQUAD_PARAGRAPHS
    for qid, question, golds in qas
]

LONG = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
    "after the engineer Gustave Eiffel, whose company designed and built the tower between 1887 and 1889. "
    "It was built as the centrepiece of the 1889 World's Fair. "
) * 4  # > 256 tokens: several windows at the tiny models' max_length
# Six questions for the whole-run checks; the first context spans several windows.
RUN_SQUAD_PARAGRAPHS = [
    (
        "t0",
        LONG,
        [
            ("e1", "Who is the tower named after?", ["Gustave Eiffel"]),
            ("e2", "In which city is the tower?", ["Paris"]),
            ("e3", "For which event was the tower built?", ["the 1889 World's Fair"]),
        ],
    ),
    (
        "t1",
        "Python is a high-level programming language created by Guido van Rossum and first released in 1991.",
        [("p1", "Who created Python?", ["Guido van Rossum"]), ("p2", "When was Python first released?", ["1991"])],
    ),
    (
        "t2",
        "The Amazon River flows through Peru, Colombia and Brazil before it reaches the Atlantic Ocean.",
        [("a1", "Into which ocean does the Amazon flow?", ["the Atlantic Ocean", "Atlantic Ocean"])],
    ),
]
# (context, question, answer) of one-paragraph questions, for the per-question (.jsonl) checks.
SHORT_SQUAD_QUESTIONS = [
    ("Paris is the capital of France. It lies on the Seine.", "What is the capital of France?", "Paris"),
    ("The Nile flows north through Egypt into the Mediterranean.", "Where does the Nile flow?", "north"),
    ("Marie Curie won two Nobel prizes, in physics and chemistry.", "How many Nobel prizes?", "two"),
    ("Water boils at 100 degrees Celsius at sea level.", "At what temperature does water boil?", "100 degrees"),
    ("The piano has 88 keys, black and white.", "How many keys does a piano have?", "88"),
    ("Mount Everest is the highest mountain above sea level.", "Which mountain is the highest?", "Mount Everest"),
]


def squad_v11_json(paragraphs=SQUAD_PARAGRAPHS) -> dict:
    """The official SQuAD v1.1 layout for (title, context, [(id, question, [answers])]) paragraphs."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": qid,
                                "question": question,
                                "answers": [{"text": g, "answer_start": context.index(g)} for g in golds],
                            }
                            for qid, question, golds in qas
                        ],
                    }
                ],
            }
            for title, context, qas in paragraphs
        ],
    }


def squad_rows(examples=SQUAD_EXAMPLES) -> list[dict]:
    """The examples as the hub's `rajpurkar/squad` rows (and a .jsonl file's lines)."""
    return [
        {
            "id": e.id,
            "title": "t",
            "question": e.question,
            "context": e.context,
            "answers": {"text": list(e.answers), "answer_start": [e.context.index(g) for g in e.answers]},
        }
        for e in examples
    ]


def write_squad_json(path: Path, paragraphs=SQUAD_PARAGRAPHS) -> Path:
    """An official-layout SQuAD v1.1 file of `paragraphs`."""
    path.write_text(json.dumps(squad_v11_json(paragraphs)), encoding="utf-8")
    return path


def write_squad_jsonl(path: Path, questions=SHORT_SQUAD_QUESTIONS) -> Path:
    """A .jsonl SQuAD file, one row per (context, question, answer), ids q0, q1, …"""
    rows = squad_rows([SquadExample(f"q{i}", q, c, (a,)) for i, (c, q, a) in enumerate(questions)])
    fields = ("id", "context", "question", "answers")
    path.write_text("".join(json.dumps({k: row[k] for k in fields}) + "\n" for row in rows))
    return path
