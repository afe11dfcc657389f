"""Write docs/architectures.md: every command run on a tiny checkpoint of each family, and what it said.

A user asks "does layerprobe work on my model?" before trying; this page answers with what the program
does, not with what we believe it does. Each family's checkpoint is built from its config with random
weights (the test factories in tests/factories/, the same ones the tests use), saved to a cache folder,
and every command that loads a model is run on it in process, as a user would type it. A cell is `works`
(status 0), `refused` with the one-line error the user would read (status 2), or `FAILS` with the
exception (anything else: a defect to fix, never expected in the committed table).

    python docs/make_architectures.py --jobs 2             # rewrite docs/architectures.md (minutes)
    python docs/make_architectures.py --check --jobs 2     # exit 1 naming the rows that differ (.ci/run)
    python docs/make_architectures.py --families t5 vit    # print those rows only, write nothing

Families run in parallel worker processes (`--jobs`), one torch thread each. The built checkpoints are
kept in a cache folder (`--cache`, default ~/.cache/layerprobe-architectures/) under a key that changes
with the factories' source and the installed transformers and torch, so a rerun only runs the commands.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "architectures.md"
FACTORIES = ROOT / "tests" / "factories"
DEFAULT_CACHE = Path.home() / ".cache" / "layerprobe-architectures"
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the factories the tests build their checkpoints with

TEXT = ("--dataset", "builtin:pydoc", "--tokens", "160", "--seq-len", "32", "--device", "cpu")
IMAGES = ("--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu")  # --dataset: a folder
COMMANDS = ("layers", "angular", "depth", "prune-drop", "prune-curve", "prune")


@dataclass(frozen=True)
class Family:
    """One row: a design, how its tiny checkpoint is built, and which stack (`--layers-path`) is measured."""

    name: str
    design: str  # what is special about it, in a few words
    build: Callable[[Path], Path]
    layers_path: str | None = None
    images: bool = False  # the stack reads images: the corpus is a folder of images


def families() -> list[Family]:
    """Every family the factories can build, grouped by design."""
    import factories as f
    from factories.towers import build_tower_checkpoint

    def plain(arch: str) -> Callable[[Path], Path]:
        return lambda d: f.build_checkpoint(arch, d)

    def design(name: str) -> Callable[[Path], Path]:
        return lambda d: f.build_design_checkpoint(name, d)

    def vlm(name: str) -> Callable[[Path], Path]:
        return lambda d: f.build_vlm_checkpoint(name, d)

    def encdec(name: str) -> Callable[[Path], Path]:
        return lambda d: f.build_encdec_checkpoint(name, d)

    def tower(name: str) -> Callable[[Path], Path]:
        return lambda d: build_tower_checkpoint(name, d)

    def whisper(directory: Path) -> Path:  # refused from its config alone: no weights needed
        import transformers as tf

        sizes = {"encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4}
        config = tf.WhisperConfig(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=512, **sizes)
        config.architectures = ["WhisperForConditionalGeneration"]
        config.save_pretrained(directory)
        return directory

    rows = [
        Family("llama", "decoder, Pre-LN", plain("llama")),
        Family("qwen3", "decoder, Pre-LN, QK-norm", plain("qwen3")),
        Family("deepseek_v3", "decoder, MoE, MLA", plain("deepseek_v3")),
        Family("gpt2", "decoder, Pre-LN, Conv1D", plain("gpt2")),
        Family("bert", "encoder, Post-LN", plain("bert")),
        Family("gemma3n", "per-layer inputs, AltUp, KV sharing", design("gemma3n")),
        Family("gemma4", "per-layer inputs, sliding/full pattern", design("gemma4")),
        Family("zamba2", "hybrid Mamba2 + shared attention blocks", design("zamba2")),
        Family("nemotron_h", "hybrid Mamba2 / attention / MLP blocks", design("nemotron_h")),
        Family("minimax", "MoE, linear + full attention", design("minimax")),
    ]
    rows += [Family(name, "vision-language model, its language model", vlm(name)) for name in f.VLM_FAMILIES]
    rows += [
        Family("t5", "encoder-decoder, decoder stack", encdec("t5")),
        Family("t5 (encoder)", "encoder-decoder, encoder stack", encdec("t5"), "encoder.block"),
        Family("bart", "encoder-decoder, decoder stack", encdec("bart")),
        Family("bart (encoder)", "encoder-decoder, encoder stack", encdec("bart"), "encoder.layers"),
        Family("whisper", "encoder-decoder, the encoder reads audio", whisper),
        Family("vit", "vision tower", tower("vit"), None, True),
        Family("clip", "dual encoder, text tower", tower("clip")),
        Family("clip (vision)", "dual encoder, vision tower", tower("clip"), "vision_model.encoder.layers", True),
        Family("siglip", "dual encoder, text tower", tower("siglip")),
        Family("mllama", "VLM with image-only cross-attention blocks", tower("mllama")),
    ]
    return rows


def run_command(command: str, family: Family, checkpoint: Path, work: Path, images: Path) -> str:
    """Run one command as a user would; `works`, `refused: <the error line>` or `FAILS: <exception>`."""
    from typer.testing import CliRunner

    from layerprobe.cli.app import app

    out = work / command
    chosen = ["--layers-path", family.layers_path] if family.layers_path else []
    corpus = ["--dataset", str(images), *IMAGES] if family.images else list(TEXT)
    corpus_task = ["--task", "corpus", *corpus, "--out", str(out)]
    args: list[str] = {
        "layers": ["layers", str(checkpoint), *chosen],
        "angular": ["angular", str(checkpoint), *chosen, *corpus, "--out", str(out)],
        "depth": ["depth", str(checkpoint), *chosen, *corpus, "--out", str(out)],
        "prune-drop": ["prune-drop", str(checkpoint), *chosen, *corpus_task],
        # the cheapest curve a user would ask for: Gromov's angular spans, scored on the corpus
        "prune-curve": ["prune-curve", str(checkpoint), *chosen, "--methods", "angular", *corpus_task],
        "prune": ["prune", str(checkpoint), *chosen, "--remove", "1", "--save", str(out)],
    }[command]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    output = result.output.replace(str(checkpoint), "MODEL").replace(str(out), "OUT")  # no temporary paths
    if result.exit_code == 0 and "Traceback" not in output:
        return "works"
    lines = output.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("error: ")), None)
    error = None
    if start is not None:  # the error line, joined again where the console wrapped it (up to its hint)
        rest = lines[start + 1 :]
        wrapped = rest[: next((i for i, line in enumerate(rest) if line.startswith("hint: ")), len(rest))]
        error = " ".join([lines[start], *(line.strip() for line in wrapped)])
    if result.exit_code == 2 and error is not None:
        return "refused: " + error.removeprefix("error: ")
    exception = result.exception
    reason = f"{type(exception).__name__}: {exception}" if exception is not None else (lines[-1] if lines else "")
    return f"FAILS (status {result.exit_code}): " + reason.splitlines()[0][:200] if reason else "FAILS"


def cache_key() -> str:
    """What the cached checkpoints were built with: the factories' source and the transformers and torch versions.

    A change to any of them builds every checkpoint again (a stale checkpoint would describe old code).
    """
    from importlib.metadata import version

    digest = hashlib.sha256()
    for path in sorted(FACTORIES.rglob("*.py")):
        digest.update(path.relative_to(FACTORIES).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"transformers {version('transformers')} torch {version('torch')}".encode())
    return digest.hexdigest()[:16]


def checkpoint_of(family: Family, cache: Path) -> Path:
    """The family's checkpoint in the cache, built first if missing (into a temporary folder, then renamed).

    Two workers may build the same checkpoint (t5 and t5's encoder): the first rename wins, the other's
    copy is discarded, so a reader never sees a half-written folder.
    """
    checkpoint = cache / family.name.split(" ")[0]
    if checkpoint.exists():
        return checkpoint
    cache.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{checkpoint.name}-", dir=cache))
    try:
        family.build(building)
        os.rename(building, checkpoint)
    except OSError:
        if not checkpoint.exists():
            raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return checkpoint


def row(family: Family, cache: Path, work: Path, images: Path) -> list[str]:
    """The family's cells: its name, design, and one outcome per command (a failed build fails every cell)."""
    name = family.name.split(" ")[0] + (f" `--layers-path {family.layers_path}`" if family.layers_path else "")
    try:
        checkpoint = checkpoint_of(family, cache)
    except Exception as error:  # a factory that cannot build this family: every cell says so
        reason = f"FAILS (building the checkpoint): {type(error).__name__}: {str(error).splitlines()[0][:160]}"
        return [name, family.design, *(reason for _ in COMMANDS)]
    runs = work / family.name.replace(" ", "_").replace("(", "").replace(")", "")
    cells = [run_command(command, family, checkpoint, runs, images) for command in COMMANDS]
    print(f"{family.name}: " + " | ".join(cells), file=sys.stderr, flush=True)
    return [name, family.design, *cells]


def _worker_start() -> None:
    """Each worker process: one torch thread (the workers share the cores), transformers quiet."""
    import torch

    torch.set_num_threads(1)


def _row_in_worker(name: str, cache: str, work: str, images: str) -> list[str]:
    """`row` for the family named `name`, in a worker process (families hold builders, which do not pickle)."""
    from layerprobe.model import quiet_transformers

    family = next(f for f in families() if f.name == name)
    with quiet_transformers():
        return row(family, Path(cache), Path(work), Path(images))


def rows(chosen: Sequence[Family], cache: Path, jobs: int) -> list[list[str]]:
    """Every chosen family's row, in order; `jobs` worker processes, or this one when `jobs` is 1."""
    from factories.towers import write_image_folder

    from layerprobe.model import quiet_transformers

    with tempfile.TemporaryDirectory(prefix="lp-architectures-") as tmp:
        work, images = Path(tmp) / "runs", write_image_folder(Path(tmp) / "images")
        if jobs <= 1:
            with quiet_transformers():
                return [row(family, cache, work, images) for family in chosen]
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch state forked mid-use
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_start) as pool:
            futures = [pool.submit(_row_in_worker, f.name, str(cache), str(work), str(images)) for f in chosen]
            return [future.result() for future in futures]


def table(rows: list[list[str]]) -> str:
    """A markdown table; a refusal's message is kept whole (it is what the user will read)."""
    header = ["family", "design", *(f"`{c}`" for c in COMMANDS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


def table_rows(text: str) -> dict[str, list[str]]:
    """The page's table as family → cells (design, then one per command), read back from its markdown."""
    found = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| family |"):
            cells = [cell.strip().replace("\\|", "|") for cell in line.strip()[2:-2].split(" | ")]
            found[cells[0]] = cells[1:]
    return found


def header_columns(text: str) -> list[str]:
    """The command of each column of the page's table, read from its header line."""
    line = next((line for line in text.splitlines() if line.startswith("| family |")), "")
    return [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")][2:]


def differences(current: str, fresh: str, only: Sequence[str] = ()) -> list[str]:
    """One line per row (family) whose cells differ between the page as written and as regenerated.

    `only` limits the comparison to those rows (a `--families` check); the text outside the table is
    compared too when every row is.
    """
    old, new = table_rows(current), table_rows(fresh)
    lines = []
    if not only and header_columns(current) != header_columns(fresh):
        lines.append(f"columns: {header_columns(current)} on the page, {header_columns(fresh)} now")
    names = list(only) if only else list(dict.fromkeys([*new, *old]))
    for name in names:
        if name not in old:
            lines.append(f"{name}: not on the page")
        elif name not in new:
            lines.append(f"{name}: on the page, but no family has this row now")
        elif old[name] != new[name]:
            columns = ["design", *COMMANDS]
            changed = [
                f"{column}: {was!r} -> {now!r}"
                for column, was, now in zip(columns, old[name], new[name], strict=False)
                if was != now
            ]
            lines.append(f"{name}: " + ("; ".join(changed) or "a different number of cells"))
    if not only and not lines and current != fresh:
        lines.append("the text around the table differs")
    return lines


HEADER = """# Architectures: what works on which family

<!-- Generated by docs/make_architectures.py: every command run on a tiny checkpoint of each family. -->

Each row is a tiny checkpoint of one family, built from its config with random weights by the test
factories (tests/factories/) and saved to disk; each column is a command run on it as a user would
type it (`--task corpus` for `prune-drop`, `--methods angular --task corpus` for `prune-curve`,
`--remove 1 --save` for `prune`, a folder of images as the corpus of a stack that reads images).
`works`: status 0. `refused`: status 2 with the one-line error shown, before any weight is read where
the reason is in the config.

The page cannot go stale unnoticed: CI (`.ci/run`) regenerates it in memory with
`python docs/make_architectures.py --check --jobs 2` and fails naming every row that differs. After a
change that touches a family, rewrite it with `python docs/make_architectures.py --jobs 2` (about 4
minutes of CPU time, 2 on two idle cores; the built checkpoints are cached in
~/.cache/layerprobe-architectures/, rebuilt when the test factories or the transformers or torch version
change).

The numbers these commands print on each design are checked against float64 references in the tests
(tests/model/test_designs.py, test_encdec.py, test_towers.py, test_vlm_paths.py); this page says only
what runs. Families whose configs or weights transformers cannot build offline are not listed.

"""


def main(argv: list[str] | None = None) -> int:
    """Build each chosen family, run the commands, and write the page (print the chosen rows, or check them)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--families", nargs="*", help="only these rows (printed, or checked; nothing written)")
    parser.add_argument("--check", action="store_true", help="exit 1, naming the rows, when the page is stale")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, one family at a time each")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of built checkpoints, kept")
    args = parser.parse_args(argv)
    all_families = families()
    known = {f.name.split(" ")[0] for f in all_families}
    unknown = sorted(set(args.families or ()) - known)
    if unknown:
        parser.error(f"no family {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    chosen = [f for f in all_families if not args.families or f.name.split(" ")[0] in args.families]
    began = time.monotonic()
    found = rows(chosen, args.cache / cache_key(), max(1, args.jobs))
    seconds = time.monotonic() - began
    text = HEADER + table(found)
    print(f"{len(found)} rows in {seconds:.0f} s with {args.jobs} job(s)", file=sys.stderr)
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        stale = differences(current, text, [cells[0] for cells in found] if args.families else ())
        for line in stale:
            print(f"{TARGET.name}: {line}", file=sys.stderr)
        if stale:
            print(f"{TARGET} is stale: run python docs/make_architectures.py --jobs 2", file=sys.stderr)
            return 1
        return 0
    if args.families:
        print(text)
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
