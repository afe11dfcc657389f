"""One `layerprobe prune` run: every setting declared once, on its field (option_spec.py).

The command's options are built from these declarations (cli/export.py); the checks below give a library
user the same one-line errors as a CLI user.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass
from pathlib import Path

from layerprobe.core.errors import LayerprobeError
from layerprobe.core.model_spec import ModelSpec
from layerprobe.core.option_spec import OptionSpec, setting


@dataclass(frozen=True)
class ExportSpec:
    """One `layerprobe prune` run: write a checkpoint without some blocks (or sublayers).

    The removal options are the CLI text (`20-27`, inclusive, 0-based), resolved against the model's L
    once its config is read, or `from_curve` names a prune_curve.json whose `method` chose the set
    removed for `n`. `save` is the new checkpoint's directory; `mergekit_yaml`, if given, where
    the equivalent mergekit passthrough config goes. `max_shard_size` ("5GB", "500MB") caps each
    safetensors shard.
    """

    model: ModelSpec
    save: str = setting(
        MISSING,  # required
        OptionSpec(
            ("--save",),
            "Directory for the pruned checkpoint (written to a temp dir, renamed at the end).",
            cli_type=Path,
            parse=str,
        ),
    )
    remove: str | None = setting(
        None,
        OptionSpec(("--remove",), "Blocks to remove, all at once: 0-based inclusive ranges like 20-27,30."),
    )
    remove_attention: str | None = setting(
        None,
        OptionSpec(
            ("--remove-attention",),
            "Blocks whose attention sublayer to drop. Refused (before loading weights) unless the config "
            "can say a block has no attention: zeroed weights are not a smaller model.",
        ),
    )
    remove_mlp: str | None = setting(
        None,
        OptionSpec(("--remove-mlp",), "Blocks whose MLP sublayer to drop; refused like --remove-attention."),
    )
    overwrite: bool = setting(
        False,
        OptionSpec(
            ("--overwrite",),
            "Replace --save if it exists and is not empty: the old checkpoint goes only once the new one is "
            "complete, and an interrupted replacement is restored by the next run.",
        ),
    )
    mergekit_yaml: str | None = setting(
        None,
        OptionSpec(
            ("--mergekit-yaml",),
            "Also write the equivalent mergekit passthrough config (slices of the kept layer ranges) here.",
            cli_type=Path | None,
            parse=str,
        ),
    )
    max_shard_size: str | None = setting(  # None: transformers' save_pretrained default
        None,
        OptionSpec(("--max-shard-size",), "Largest safetensors shard, e.g. 5GB (default: transformers' own)."),
    )
    # --from prune_curve.json --method NAME --n K: remove the set that method chose for n blocks.
    from_curve: str | None = setting(
        None,
        OptionSpec(
            ("--from",),
            "A prune_curve.json: remove the set --method chose for --n units (instead of --remove). A set "
            "that removes a sublayer alone is refused.",
            cli_type=Path | None,
            parse=str,
        ),
    )
    method: str | None = setting(
        None, OptionSpec(("--method",), "With --from: the selection method whose set to export.")
    )
    n: int | None = setting(None, OptionSpec(("--n",), "With --from: the number of units that set removes."))

    def __post_init__(self) -> None:
        if not self.save:
            raise LayerprobeError("No --save directory given.", hint="Pass --save DIR for the pruned checkpoint.")
        removals = [o for o, v in (("--remove", self.remove), ("--remove-attention", self.remove_attention)) if v]
        removals += ["--remove-mlp"] if self.remove_mlp else []
        if self.from_curve is not None:
            if removals:
                raise LayerprobeError(f"--from and {removals[0]} both say what to remove.", hint="Pass one of them.")
            if self.method is None or self.n is None:
                raise LayerprobeError(
                    "--from needs --method and --n: which method's set, for how many blocks removed.",
                    hint="e.g. --from prune_curve.json --method angular --n 4",
                )
            if self.n < 1:
                raise LayerprobeError(f"--n {self.n}: the number of units removed is at least 1.")
        elif self.method is not None or self.n is not None:
            raise LayerprobeError(
                "--method and --n choose a set from a prune_curve.json.", hint="Pass it with --from FILE."
            )
        elif not removals:
            raise LayerprobeError(
                "Nothing to remove.",
                hint="Pass --remove with 0-based inclusive block ranges, e.g. --remove 20-27, "
                "or --from prune_curve.json --method NAME --n K.",
            )
        if self.max_shard_size is not None and not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", self.max_shard_size):
            raise LayerprobeError(
                f"Cannot read --max-shard-size {self.max_shard_size!r}.", hint="Use a size like 5GB or 500MB."
            )
