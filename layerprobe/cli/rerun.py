"""`layerprobe rerun RESULT.json`: run again exactly what produced a result, and say whether it reproduced.

Every result records the command line that re-runs it (`run.command`: its arguments and every option
not left at its default, `--config` values resolved), the folder it ran in (`run.cwd`), the content
digests of the local files it read (`run.inputs`: task YAMLs, a corpus file…) and the fingerprint of
the model's weights. `rerun` refuses, before any work, when one of those inputs or the weights changed
(naming which), runs the command again into a new `--out` in a fresh process (what a user would type,
so nothing of this process leaks into it), and compares every recorded value with the new one
(results/reproduce.py). Exit 0: reproduced exactly; 1: some value differs (listed); 2: it cannot be
re-run as recorded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.console import out
from layerprobe.cli.options import Quiet
from layerprobe.core import LayerprobeError, ModelSpec, ResultError, check_output_dir, content_digest
from layerprobe.model import weights_fingerprint  # reads file headers; torch only loads when used
from layerprobe.results import REVIEWED_FILES, RunDir, differences, load_result, read_json

RERUNNABLE = dict(REVIEWED_FILES)  # result kind → file: every result records the command that recomputes it
# option → values it takes: where the run wrote and how it showed progress, replaced or dropped.
SKIPPED_OPTIONS = {"--out": 1, "--output_path": 1, "--save": 1, "--overwrite": 0, "--resume": 0, "--quiet": 0}
SAVED_AGAIN = "healed-checkpoint"  # where a re-run heal writes the checkpoint it was asked to --save, in --out
DIFFERENT = 1
SHOWN_DIFFERENCES = 8


def recorded_file(path: Path) -> Path:
    """RESULT.json itself, or the one result file in a run directory."""
    if not path.is_dir():
        return path
    found = list(RunDir(path).present_results().values())
    if len(found) != 1:
        raise ResultError(
            f"{path} holds {len(found) or 'no'} result files ({', '.join(p.name for p in found) or 'none'})",
            hint="Pass the result file itself, e.g. runs/x/angular.json.",
        )
    return found[0]


def command_to_rerun(recorded: list[str], out_dir: Path) -> list[str]:
    """The recorded command with its `--out` replaced by `out_dir` and `--resume`/`--quiet` dropped.

    A heal that saved its checkpoint (`--save`) saves it again inside `out_dir` (SAVED_AGAIN): a re-run
    never writes over, or beside, the checkpoint the first run made, so `--overwrite` goes too.
    """
    kept: list[str] = []
    saved = False
    words = iter(recorded)
    for word in words:
        if word in SKIPPED_OPTIONS:
            saved = saved or word == "--save"
            for _ in range(SKIPPED_OPTIONS[word]):
                next(words, None)
            continue
        kept.append(word)
    return [*kept, "--out", str(out_dir), *(["--save", str(out_dir / SAVED_AGAIN)] if saved else [])]


def check_inputs(inputs: dict[str, str], cwd: Path, source: str) -> None:
    """Refuse when a local file the run read is gone or its content changed, naming it."""
    changed = []
    for word, digest in inputs.items():
        path = cwd / word
        if not path.exists():
            changed.append(f"{word} (no longer there)")
        elif content_digest(path) != digest:
            changed.append(f"{word} (content changed)")
    if changed:
        raise LayerprobeError(
            f"{source} cannot be re-run as recorded: {', '.join(changed)}",
            hint="Restore the files the run read, or run the command again by hand to measure the new ones.",
        )


def check_weights(model_path: str, recorded: str | None, revision: str | None, source: str) -> None:
    """Refuse when the model's weight files (local, or in the hub cache) no longer match the fingerprint."""
    if recorded is None:
        return
    now = weights_fingerprint(ModelSpec(model=model_path, revision=revision))
    if now is not None and now != recorded:
        raise LayerprobeError(
            f"{source}: the weights of {model_path} differ from the run's ({recorded[:19]}… then, {now[:19]}… now)",
            hint="Re-run on the checkpoint that produced the result (same files or hub commit).",
        )


def rerun(
    result: Annotated[Path, typer.Argument(help="A result file (angular.json, prune_drop.json, …) or its run folder.")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Where the re-run writes (default: a new folder `<run folder>-rerun` beside it)."),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Run again exactly what produced RESULT.json, then say whether every recorded value was reproduced."""
    file = recorded_file(result)
    loaded = load_result(file)  # validated: a result layerprobe wrote
    data = read_json(file)
    kind = next((k for k, name in RERUNNABLE.items() if name == file.name), file.name)
    run = loaded.run
    if kind not in RERUNNABLE or not run.command:
        raise ResultError(
            f"{file} does not record the command that made it"
            + ("" if kind in RERUNNABLE else f" ({kind} results are not re-run)"),
            hint="Results written by layerprobe ≥ this version record it; re-run older ones by hand.",
        )
    cwd = Path(run.cwd or ".")
    if not cwd.is_dir():
        raise LayerprobeError(f"{file}: the folder the run started in, {cwd}, is gone", hint="Re-run it by hand.")
    check_inputs(run.inputs, cwd, str(file))
    model = loaded.model
    check_weights(model.path or model.id, model.weights_fingerprint, model.revision, str(file))
    target = out_dir or file.resolve().parent.with_name(file.resolve().parent.name + "-rerun")
    check_output_dir(target)
    if (target / file.name).exists():
        raise LayerprobeError(
            f"{target / file.name} already exists: a rerun never overwrites a result",
            hint="Pass another --out.",
        )
    command = command_to_rerun(list(run.command), target.resolve())
    if quiet:
        command.append("--quiet")
    out.print("re-running: layerprobe " + " ".join(command), highlight=False, markup=False)
    done = subprocess.run([sys.executable, "-m", "layerprobe", *command], cwd=cwd, check=False)
    if done.returncode != 0:
        raise typer.Exit(done.returncode)
    again = read_json(target / file.name)
    if isinstance(again.get("checkpoint"), str) and isinstance(data.get("checkpoint"), str):
        again["checkpoint"] = data["checkpoint"]  # saved in the new --out by design (command_to_rerun)
    found = differences(data, again)
    if not found:
        out.print(f"reproduced: every recorded value of {file} is equal in {target / file.name}", highlight=False)
        return
    out.print(f"not reproduced: {len(found)} value(s) differ from {file}", highlight=False, markup=False)
    for difference in sorted(found, key=lambda d: -d.magnitude)[:SHOWN_DIFFERENCES]:
        out.print(f"  {difference.path}: {difference.recorded!r} → {difference.rerun!r}", highlight=False, markup=False)
    raise typer.Exit(DIFFERENT)
