"""`layerprobe demo`: `angular` offline on the real MiniLM-L6 BERT over the standard library's pydoc text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.angular import measure_and_report
from layerprobe.cli.options import Quiet
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec, parse_tokens
from layerprobe.model import DEMO_NAME, demo_model_dir


def demo(
    tokens: Annotated[str, typer.Option("--tokens", metavar="INTEGER", help="Positions to measure.")] = "32768",
    out_dir: Annotated[Path, typer.Option("--out", "--output_path", help="Output directory.")] = Path(
        "layerprobe-out/demo"
    ),
    quiet: Quiet = False,
) -> None:
    """Run `angular` offline on the real MiniLM-L6 BERT over the stdlib's pydoc text (needs the demo extra)."""
    spec = AngularSpec(
        model=ModelSpec(str(demo_model_dir()), device="cpu", name=DEMO_NAME),
        corpus=CorpusSpec(BUILTIN_CORPUS, None, "train", "text", parse_tokens(tokens), 512),
    )
    measure_and_report(spec, out_dir, quiet)
