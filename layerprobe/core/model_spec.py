"""Which checkpoint to load and how: `ModelSpec`, and the loading options' command-line text read into it.

`--model-args` is read the way lm-eval reads its `--model_args`, so the same text works in both tools; the
options that have their own flag (dtype, device map, quantization…) are refused there, so each setting has
one spelling.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from layerprobe.core.defaults import ATTN_IMPLEMENTATIONS, DTYPES, QUANTIZATIONS
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.option_spec import LOADING_PANEL as PANEL
from layerprobe.core.option_spec import OptionSpec, setting
from layerprobe.core.redact import redacted, remember_secrets, remember_secrets_in_text

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
# from_pretrained keywords that have their own option: naming them in --model-args too would be ambiguous.
_DEDICATED = {
    "dtype": "--dtype",
    "torch_dtype": "--dtype",
    "device_map": "--device-map",
    "device": "--device",
    "revision": "--revision",
    "trust_remote_code": "--trust-remote-code",
    "load_in_4bit": "--load-in-4bit",
    "load_in_8bit": "--load-in-8bit",
    "quantization_config": "--load-in-4bit / --load-in-8bit",
    "pretrained": "the MODEL argument",
    "config": "the MODEL argument",
}

ArgScalar: TypeAlias = "bool | int | float | str | None"
ArgValue: TypeAlias = "ArgScalar | dict[ArgScalar, ArgValue]"


@dataclass(frozen=True)
class ModelSpec:
    """Which checkpoint to load and where to put it."""

    model: str
    revision: str | None = setting(None, OptionSpec(("--revision",), "Branch, tag or commit of a hub model.", PANEL))
    dtype: str = setting(
        "auto",
        OptionSpec(
            ("--dtype",),
            "auto: the checkpoint's half precision on GPU, float32 on CPU.",
            PANEL,
            cli_type=Literal[DTYPES],
        ),
    )
    device: str = setting("auto", OptionSpec(("--device",), "auto|cpu|cuda|cuda:N|mps. auto: GPU if present.", PANEL))
    device_map: str | None = setting(
        None,
        OptionSpec(
            ("--device-map",),
            "'auto' spreads a model too large for one GPU over all GPUs (and CPU) via accelerate.",
            PANEL,
        ),
    )
    trust_remote_code: bool = setting(
        False, OptionSpec(("--trust-remote-code",), "Allow the repository's own modelling code.", PANEL)
    )
    layers_path: str | None = setting(
        None,
        OptionSpec(
            ("--layers-path",), "Dotted path of the blocks' ModuleList (e.g. model.layers), if not found.", PANEL
        ),
    )
    model_args: dict[str, Any] = setting(  # any keyword from_pretrained takes
        None,
        OptionSpec(
            ("--model-args", "--model_args"),
            "Extra from_pretrained keywords as k=v,k=v (lm-eval's syntax): true/false/none, numbers, strings, "
            "and {k:v,...} mappings, e.g. low_cpu_mem_usage=true,max_memory={0:70GiB,1:70GiB,cpu:200GiB}.",
            PANEL,
            cli_type=str | None,
            cli_default=None,
            parse=lambda text: parse_model_args(text),
        ),
        factory=dict,
    )
    quantization: str | None = setting(
        None,
        OptionSpec(
            ("--load-in-4bit", "--load-in-8bit"),
            "Quantize the weights to {shown} with bitsandbytes (extra \\[quant]).",
            PANEL,
            switches=(("--load-in-4bit", "4bit", "4-bit NF4"), ("--load-in-8bit", "8bit", "8-bit")),
            parse=lambda chosen: one_quantization(chosen),
        ),
    )
    attn_implementation: str | None = setting(
        None,
        OptionSpec(
            ("--attn-implementation",),
            "eager|sdpa|flash_attention_2|... (default: transformers' choice).",
            PANEL,
        ),
    )
    name: str | None = None  # the name shown in titles, tables and result JSON, if not `model` (the demo's)

    @property
    def recorded_args(self) -> dict[str, Any]:
        """`model_args` as results record them: a token's or password's value is `"<redacted>"`."""
        return redacted(self.model_args)

    @property
    def display_name(self) -> str:
        """How results name the model: `name` when given, else the hub id or path as typed."""
        return self.name or self.model

    @classmethod
    def from_options(
        cls,
        model: str,
        *,
        revision: str | None,
        dtype: str,
        device: str,
        device_map: str | None,
        trust_remote_code: bool,
        layers_path: str | None,
        model_args: str | Mapping[str, Any] | None,
        load_in_4bit: bool,
        load_in_8bit: bool,
        attn_implementation: str | None,
    ) -> ModelSpec:
        """`model` with the loading options as a user gives them: the commands' flags, the API's keywords.

        One home for reading them, so `--model-args` text (or the API's mapping) and the two quantization
        flags mean the same in both; every rule is then checked by `__post_init__`.
        """
        args = parse_model_args(model_args) if model_args is None or isinstance(model_args, str) else dict(model_args)
        return cls(
            model,
            revision,
            dtype,
            device,
            device_map,
            trust_remote_code,
            layers_path,
            model_args=args,
            quantization=quantization_from_flags(load_in_4bit, load_in_8bit),
            attn_implementation=attn_implementation,
        )

    def __post_init__(self) -> None:
        remember_secrets(self.model_args)  # before any check quotes them: scrubbed from every file and line
        if not self.model:
            raise LayerprobeError("No model given.", hint="Pass a hub id like gpt2 or a local directory.")
        if self.model.startswith("~"):
            object.__setattr__(self, "model", os.path.expanduser(self.model))
        if self.dtype not in DTYPES:
            raise LayerprobeError(f"Unknown --dtype {self.dtype!r}.", hint=f"Choose one of {', '.join(DTYPES)}.")
        if not _DEVICE.match(self.device):
            raise LayerprobeError(f"Unknown --device {self.device!r}.", hint="Use auto, cpu, cuda, cuda:N or mps.")
        if self.device_map not in (None, "auto"):
            raise LayerprobeError(
                f"Unknown --device-map {self.device_map!r}.",
                hint="The only value is 'auto'; for one device use --device (e.g. --device cpu).",
            )
        if self.quantization not in (None, *QUANTIZATIONS):
            raise LayerprobeError(f"Unknown quantization {self.quantization!r}.", hint="Use 4bit or 8bit.")
        if "attn_implementation" in self.model_args:  # lm-eval's spelling; one home: the dedicated field
            if self.attn_implementation is not None:
                raise LayerprobeError(
                    "The attention implementation is given twice (--attn-implementation and --model-args).",
                    hint="Keep one of them.",
                )
            args = dict(self.model_args)
            object.__setattr__(self, "attn_implementation", args.pop("attn_implementation"))
            object.__setattr__(self, "model_args", args)
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise LayerprobeError(
                f"Unknown --attn-implementation {self.attn_implementation!r}.",
                hint=f"Use one of {', '.join(ATTN_IMPLEMENTATIONS)}.",
            )
        for key in self.model_args:
            if key in _DEDICATED:
                raise LayerprobeError(
                    f"--model-args names {key!r}, which has its own option.",
                    hint=f"Use {_DEDICATED[key]} instead of {key}= in --model-args.",
                )


def quantization_from_flags(load_in_4bit: bool, load_in_8bit: bool) -> str | None:
    """`--load-in-4bit` / `--load-in-8bit` → "4bit" / "8bit" / None; both at once is a mistake."""
    return one_quantization([value for on, value in ((load_in_4bit, "4bit"), (load_in_8bit, "8bit")) if on])


def one_quantization(chosen: list[str]) -> str | None:
    """The quantization switched on ("4bit", "8bit") or None; two at once is a mistake."""
    if len(chosen) > 1:
        raise LayerprobeError(
            "--load-in-4bit and --load-in-8bit were both given.", hint="Pick one quantization (or neither)."
        )
    return chosen[0] if chosen else None


def parse_model_args(text: str | None) -> dict[str, ArgValue]:
    """Read `--model-args k=v,k=v` the way lm-eval reads its `--model_args`, plus braces for mappings.

    Values: `true`/`false` → bool, `none` → None, integers and floats → numbers, anything else a string.
    A value in braces is a mapping with the same rules for its values and integer-looking keys as ints,
    which is what `max_memory` needs: `max_memory={0:20GiB,1:20GiB,cpu:60GiB}` (commas inside braces do
    not split arguments). Quotes around keys and values are dropped, so JSON-ish text works too.
    """
    if text is None or not text.strip():
        return {}
    remember_secrets_in_text(text)  # the errors below quote the text
    parsed: dict[str, ArgValue] = {}
    for part in _split_top_level(text.strip(), ","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise LayerprobeError(
                f"Cannot read {part.strip()!r} in --model-args.",
                hint="Write key=value pairs separated by commas, e.g. attn_implementation=sdpa,low_cpu_mem_usage=true.",
            )
        if key in parsed:
            raise LayerprobeError(f"--model-args names {key!r} twice.")
        parsed[key] = _parse_value(value.strip(), key)
    return parsed


def _split_top_level(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside braces (`a=1,m={0:1,1:2}` → `a=1`, `m={0:1,1:2}`)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                raise LayerprobeError(f"Unbalanced '}}' in --model-args {text!r}.")
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise LayerprobeError(f"Unbalanced '{{' in --model-args {text!r}.")
    parts.append("".join(current))
    return parts


def _parse_value(value: str, key: str) -> ArgValue:
    """One value of `--model-args`: a scalar, or a `{key:value,...}` mapping (`key` names it in errors)."""
    if value.startswith("{") and value.endswith("}"):
        mapping: dict[ArgScalar, ArgValue] = {}
        for item in _split_top_level(value[1:-1], ","):
            if not item.strip():
                continue
            inner_key, sep, inner_value = item.partition(":")
            if not sep:
                raise LayerprobeError(
                    f"Cannot read {item.strip()!r} in --model-args {key}=.",
                    hint="Write mappings as {key:value,...}, e.g. max_memory={0:20GiB,cpu:60GiB}.",
                )
            name = _scalar(inner_key.strip())
            mapping[name] = _parse_value(inner_value.strip(), key)
        return mapping
    return _scalar(value)


def _scalar(value: str) -> ArgScalar:
    """`true`/`false` → bool, `none` → None, numbers → int or float, anything else the unquoted string."""
    value = value.strip().strip("'\"")
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            number: int | float = kind(value)
        except ValueError:
            continue
        return number
    return value
