"""What one `layerprobe gain` run times: `GainSpec`, every setting declared once (flag, help, default, recorded)."""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.core.errors import LayerprobeError
from layerprobe.core.option_spec import OptionSpec, setting


@dataclass(frozen=True)
class GainSpec:
    """How the speed runs are shaped: prompts per batch, prompt and output length, rounds, seed.

    Recorded in gain.json's `settings` as declared (with the fixed `order`: interleaved rounds).
    """

    batch: int = setting(1, OptionSpec(("--batch",), "Prompts per run.", recorded=True, minimum=1))
    prompt_tokens: int = setting(
        128, OptionSpec(("--prompt-tokens",), "Prompt length (prefill), tokens.", recorded=True, minimum=1)
    )
    new_tokens: int = setting(
        32, OptionSpec(("--new-tokens",), "Tokens generated per prompt (decode).", recorded=True, minimum=1)
    )
    repeats: int = setting(
        5, OptionSpec(("--repeats",), "Interleaved timed rounds (after one warm-up).", recorded=True, minimum=1)
    )
    seed: int = setting(0, OptionSpec(("--seed",), "Seed of the random prompt token ids.", recorded=True))

    def __post_init__(self) -> None:
        for name in ("batch", "prompt_tokens", "new_tokens", "repeats"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise LayerprobeError(f"{flag} must be a positive integer, got {getattr(self, name)}.")
