"""Write docs/architectures.md: every command run on a tiny checkpoint of each family, and what it said.

A user asks "does layerprobe work on my model?" before trying; this page answers with what the program
does, not with what we believe it does. Each family's checkpoint is built from its config with random
weights (the test factories in tests/factories/, the same ones the tests use), saved to a temporary
folder, and every command that loads a model is run on it in process, as a user would type it. A cell
is `works` (status 0), `refused` with the one-line error the user would read (status 2), or `FAILS`
with the exception (anything else: a defect to fix, never expected in the committed table).

    python docs/make_architectures.py                      # rewrite docs/architectures.md (minutes)
    python docs/make_architectures.py --families t5 vit    # print those rows only, write nothing
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "architectures.md"
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the factories the tests build their checkpoints with

TEXT = ("--dataset", "builtin:pydoc", "--tokens", "160", "--seq-len", "32", "--device", "cpu")
IMAGES = ("--tokens", "64", "--seq-len", "16", "--batch-size", "2", "--device", "cpu")  # --dataset: a folder
COMMANDS = ("layers", "angular", "depth", "prune-drop", "prune")


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
    args: list[str] = {
        "layers": ["layers", str(checkpoint), *chosen],
        "angular": ["angular", str(checkpoint), *chosen, *corpus, "--out", str(out)],
        "depth": ["depth", str(checkpoint), *chosen, *corpus, "--out", str(out)],
        "prune-drop": ["prune-drop", str(checkpoint), *chosen, "--task", "corpus", *corpus, "--out", str(out)],
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


def row(family: Family, root: Path, images: Path) -> list[str]:
    """The family's cells: its name, design, and one outcome per command."""
    checkpoint = root / family.name.split(" ")[0]
    if not checkpoint.exists():
        family.build(checkpoint)
    work = root / "runs" / family.name.replace(" ", "_").strip("()")
    cells = [run_command(command, family, checkpoint, work, images) for command in COMMANDS]
    print(f"{family.name}: " + " | ".join(cells), file=sys.stderr, flush=True)
    name = family.name.split(" ")[0] + (f" `--layers-path {family.layers_path}`" if family.layers_path else "")
    return [name, family.design, *cells]


def table(rows: list[list[str]]) -> str:
    """A markdown table; a refusal's message is kept whole (it is what the user will read)."""
    header = ["family", "design", *(f"`{c}`" for c in COMMANDS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


HEADER = """# Architectures: what works on which family

<!-- Generated by docs/make_architectures.py: every command run on a tiny checkpoint of each family. -->

Each row is a tiny checkpoint of one family, built from its config with random weights by the test
factories (tests/factories/) and saved to disk; each column is a command run on it as a user would
type it (`--task corpus` for `prune-drop`, `--remove 1 --save` for `prune`, a folder of images as the
corpus of a stack that reads images). `works`: status 0. `refused`: status 2 with the one-line error
shown, before any weight is read where the reason is in the config. Regenerate with
`python docs/make_architectures.py` after a change that touches a family (a few minutes on a CPU).

The numbers these commands print on each design are checked against float64 references in the tests
(tests/model/test_designs.py, test_encdec.py, test_towers.py, test_vlm_paths.py); this page says only
what runs. Families whose configs or weights transformers cannot build offline are not listed.

"""


def main(argv: list[str] | None = None) -> int:
    """Build each chosen family, run the commands, and write the page (or print the chosen rows)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="*", help="only these rows (printed, not written)")
    args = parser.parse_args(argv)
    from factories.towers import write_image_folder

    from layerprobe.model import quiet_transformers

    chosen = [f for f in families() if not args.families or f.name.split(" ")[0] in args.families]
    with tempfile.TemporaryDirectory(prefix="lp-architectures-") as tmp, quiet_transformers():
        root = Path(tmp)
        images = write_image_folder(root / "images")
        rows = [row(family, root, images) for family in chosen]
    text = HEADER + table(rows)
    if args.families:
        print(text)
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
