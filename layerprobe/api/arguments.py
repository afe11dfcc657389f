"""The Python API's arguments read into the specs the commands use: one declaration of every default.

A model is a live `PreTrainedModel` (measured in place, never reloaded or copied) or, as on the command
line, a hub id or a checkpoint directory with the loading options. A corpus is a dataset id or a file, as
`--dataset` takes, or a list of strings. Every keyword defaults to the spec field the CLI option defaults
to (core/corpus_spec.py, core/run_specs.py, core/model_spec.py), so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from os import PathLike
from typing import TYPE_CHECKING, Any

from layerprobe.core import CorpusSpec, LayerprobeError, ModelSpec
from layerprobe.model import is_live_model, live_name

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Loading:
    """How a hub id or checkpoint directory is loaded: the `angular` / `depth` loading options, same defaults.

    A live model is measured as it is, so none of these may be set for one.
    """

    revision: str | None = None
    dtype: str = ModelSpec.dtype
    device: str = ModelSpec.device
    device_map: str | None = None
    trust_remote_code: bool = False
    layers_path: str | None = None
    model_args: str | dict[str, Any] | None = None
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    attn_implementation: str | None = None

    def spec(self, model: str) -> ModelSpec:
        """The ModelSpec of `model` loaded with these options, read as the commands read theirs."""
        return ModelSpec.from_options(model, **asdict(self))

    def live_spec(self, model: Any, revision: str | None = None) -> ModelSpec:
        """The spec recorded for a live model: its checkpoint's name; only `layers_path` applies to it."""
        default = Loading()
        changed = [
            f.name
            for f in fields(self)
            if f.name != "layers_path" and getattr(self, f.name) != getattr(default, f.name)
        ]
        if changed:
            raise LayerprobeError(
                f"{changed[0]}= loads a checkpoint; the live model given is measured as it is.",
                hint=f"Drop {changed[0]}=, or pass a hub id / checkpoint directory instead of the model.",
            )
        return ModelSpec(live_name(model), revision=revision, layers_path=self.layers_path)


def loading(options: dict[str, Any]) -> Loading:
    """The loading keywords of an API call as `Loading`, refusing a name that is not one of them."""
    names = {f.name for f in fields(Loading)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise LayerprobeError(
            f"Unknown keyword {unknown[0]}=.", hint=f"The loading keywords are {', '.join(sorted(names))}."
        )
    return Loading(**options)


def model_spec(model: Any, tokenizer: Any, loading_options: dict[str, Any]) -> ModelSpec:
    """The `ModelSpec` an API call runs on: a live model's (loading keywords refused) or a hub id's / path's.

    Every call that takes a model reads it here, so a live model and a checkpoint are told apart, and a bad
    argument refused, one way everywhere and before anything loads.
    """
    check_model(model, tokenizer)
    options = loading(loading_options)
    return options.live_spec(model) if is_live_model(model) else options.spec(str(model))


def corpus_spec(corpus: Any, **options: Any) -> CorpusSpec:
    """`corpus` (a dataset id, a file, or a list of strings) and the corpus keywords as a `CorpusSpec`."""
    if isinstance(corpus, (str, PathLike)):
        return CorpusSpec(str(corpus), **options)
    if isinstance(corpus, Sequence):
        return CorpusSpec(texts=tuple(corpus), **options)
    raise LayerprobeError(
        f"corpus must be a dataset id, a file path or a list of strings, not a {type(corpus).__name__}.",
        hint='e.g. corpus="builtin:pydoc", corpus="notes.txt" or corpus=["some text", "more text"].',
    )


def check_model(model: Any, tokenizer: PreTrainedTokenizerBase | None) -> None:
    """A live model needs its tokenizer; a hub id or path loads its own (a tokenizer given with one is refused)."""
    if is_live_model(model):
        if tokenizer is None:
            raise LayerprobeError(
                "A live model needs its tokenizer.",
                hint="Pass tokenizer=AutoTokenizer.from_pretrained(<its checkpoint>) as the second argument.",
            )
        return
    if not isinstance(model, (str, PathLike)):
        raise LayerprobeError(
            f"model must be a transformers model, a hub id or a checkpoint directory, not a {type(model).__name__}.",
            hint='e.g. lp.angular(model, tokenizer, "builtin:pydoc") or lp.angular("gpt2", corpus="builtin:pydoc").',
        )
    if tokenizer is not None:
        raise LayerprobeError(
            "A tokenizer was given with a hub id or path, which loads its own.", hint="Drop the tokenizer argument."
        )
