"""Options declared once: every shared option identical on every command that takes it.

The groups of cli/options.py (and the options shared one by one) are what makes `--model-args` or
`--num_fewshot` mean the same on every command that takes them. These tests read the click commands
Typer builds, so they see exactly what a user sees: names, aliases, help, defaults and types.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections import defaultdict

import pytest
import typer
from command_line import flat_help

from layerprobe.api.arguments import Loading
from layerprobe.cli.app import COMMANDS, app
from layerprobe.cli.corpus_options import Corpus, Streaming
from layerprobe.cli.groups import OptionGroup, command_groups
from layerprobe.cli.options import Checkpoint, Evaluation, ModelLoading, Output, split_task_names
from layerprobe.core import parse_eval_batch_size

CLICK = typer.main.get_command(app)
# What Typer builds per use of an option (its own copies), not what the option is.
PER_USE = {"type_descriptor", "_runtime_param", "_custom_shell_complete"}


def described(param) -> str:
    """Everything click knows of one parameter, as comparable text: names, aliases, help, default, type…"""
    fields = {k: v for k, v in vars(param).items() if k not in PER_USE}
    fields["annotation"] = param.type_descriptor.annotation
    if param.callback is not None:  # Typer wraps a callback anew for each command: compare what it wraps
        fields["callback"] = getattr(param.callback, "__wrapped__", param.callback).__qualname__
    return json.dumps(fields, sort_keys=True, default=repr)


def params_of(command: str) -> dict[str, object]:
    return {p.name: p for p in CLICK.commands[command].params}


# --- every group, identical on every command that takes it ---------------------------------------------


def commands_taking(group: type[OptionGroup]) -> list[str]:
    return sorted(name for name, command in COMMANDS.items() if group in command_groups(command).values())


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (ModelLoading, ["angular", "depth", "gain", "heal", "prune-curve", "prune-drop"]),
        (Streaming, ["angular", "depth"]),
        (Corpus, ["angular", "depth", "heal", "prune-curve", "prune-drop"]),
        (Evaluation, ["prune-curve", "prune-drop"]),
        (Output, ["angular", "depth", "gain", "heal", "prune-curve", "prune-drop"]),
        (Checkpoint, ["layers", "prune"]),
    ],
)
def test_each_group_is_the_same_on_every_command_that_takes_it(group, expected):
    assert commands_taking(group) == expected
    fields = [field.name for field in dataclasses.fields(group)]
    first, *others = expected
    reference = {name: described(params_of(first)[name]) for name in fields}
    for command in others:
        assert {name: described(params_of(command)[name]) for name in fields} == reference, command


# Options of the same spelling that mean something else on some commands, on purpose: which commands
# share each declaration. Any other option string must have one declaration across all commands.
DELIBERATE = {
    "--out": [
        {"angular", "depth", "gain", "heal", "prune-curve", "prune-drop"},
        {"demo"},
        {"merge"},
        {"plot"},
        {"compare"},
        {"stability"},
        {"track"},
        {"report"},
        {"rerun"},
    ],
    "--output_path": [{"angular", "depth", "gain", "heal", "prune-curve", "prune-drop"}, {"demo"}],
    "--batch-size": [{"angular", "depth", "heal"}, {"prune-curve", "prune-drop"}],  # windows vs requests (or auto)
    "--batch_size": [{"angular", "depth", "heal"}, {"prune-curve", "prune-drop"}],
    "--tokens": [{"angular", "depth", "heal", "prune-curve", "prune-drop"}, {"demo"}],
    "--dtype": [{"angular", "depth", "gain", "heal", "prune-curve", "prune-drop"}, {"prune"}],  # export keeps the dtype
    "--angular": [{"prune-curve"}, {"prune-drop"}],  # an input of the curve, a comparison for ΔP
    # tasks to run vs the one task to rank by; heal's are optional (scored only when given), one declaration
    "--task": [{"heal"}, {"prune-curve", "prune-drop"}, {"stability"}],
    "--tasks": [{"heal"}, {"prune-curve", "prune-drop"}],
    "--seed": [{"gain"}, {"heal"}, {"prune-curve", "prune-drop"}, {"stability"}],  # each command's own RNGs
    "--metric": [{"prune-curve"}, {"stability"}],  # what the search chooses by vs what ranks the blocks
    "--unit": [{"prune-curve"}, {"prune-drop"}],  # what delta and greedy choose among vs what a variant removes
    "--plot": [{"compare"}, {"stability"}, {"track"}],
    "--no-plot": [{"compare"}, {"stability"}, {"track"}],
    "--format": [{"compare"}, {"track"}],
    # heal takes prune's choice of blocks and its --save, but says what they mean for a healed checkpoint.
    "--resume": [{"heal"}, {"prune-drop"}],  # LoRA's checkpoint vs prune-drop's answers
    "--save": [{"heal"}, {"prune"}],
    "--remove": [{"heal"}, {"prune"}],
    "--from": [{"heal"}, {"prune"}],
    "--method": [{"heal"}, {"prune"}],  # the heal method vs the curve's selection method
    "--n": [{"heal"}, {"prune"}],
    "--overwrite": [{"heal"}, {"prune"}],
}


def test_an_option_spelled_alike_is_declared_once_unless_it_means_something_else():
    declarations: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, command in CLICK.commands.items():
        for param in command.params:
            for spelling in (*param.opts, *param.secondary_opts):
                declarations[spelling][described(param)].add(name)
    for spelling, variants in declarations.items():
        shared = sorted(map(sorted, variants.values()))
        if spelling in DELIBERATE:
            assert shared == sorted(map(sorted, DELIBERATE[spelling])), spelling
        else:
            assert len(variants) == 1, f"{spelling} is declared differently on {shared}"


@pytest.mark.parametrize("command", ["angular", "depth", "prune-drop", "prune-curve"])
def test_lm_eval_spellings_and_the_loading_options_on_every_command_that_runs_a_model(command):
    text = flat_help(command)
    loading = ["--revision", "--dtype", "--device", "--device-map", "--trust-remote-code", "--layers-path"]
    loading += ["--model-args", "--load-in-4bit", "--load-in-8bit", "--attn-implementation"]
    for option in [*loading, "--model_args", "--batch_size", "--output_path"]:
        assert option in text, option
    if command.startswith("prune-"):
        for option in ("--tasks", "--num_fewshot", "--include_path", "--squad-data"):
            assert option in text, option


def test_no_command_hand_lists_more_than_twenty_parameters():
    for name, command in COMMANDS.items():
        assert len(inspect.signature(inspect.unwrap(command)).parameters) <= 20, name


def test_spec_parsing_of_lm_eval_spellings():
    assert split_task_names(["a,b", " c ", "d,,"]) == ("a", "b", "c", "d")
    assert parse_eval_batch_size("auto:4") == "auto:4" and parse_eval_batch_size("auto") == "auto"
    assert parse_eval_batch_size("16") == 16
    for bad in ("auto:0", "0", "-1", "auto:x", "8.5"):
        with pytest.raises(Exception, match="auto:N"):
            parse_eval_batch_size(bad)


def test_help_lists_choices_and_underscore_aliases():
    def help_text(command):
        return flat_help(command)

    prune = help_text("prune-drop")
    for name in ("--tasks", "--num_fewshot", "--include_path", "--batch_size", "--output_path", "--log_samples"):
        assert name in prune
    for name in ("<auto|simple|shared>",):
        assert name in prune
    angular = help_text("angular")
    assert "<auto|float32|bfloat16|float16>" in angular and "<all|last>" in angular and "--batch_size" in angular
    assert "<all|last>" in help_text("depth")
    assert "<table|markdown|json>" in help_text("compare")


def test_the_api_and_the_commands_read_the_loading_options_alike():
    """The API's loading keywords and the commands' loading options: same names and defaults, one ModelSpec."""
    assert {f.name: f.default for f in dataclasses.fields(Loading)} == {
        f.name: f.default for f in dataclasses.fields(ModelLoading)
    }
    given = {"revision": "r1", "dtype": "float16", "device": "cpu", "layers_path": "model.layers"}
    given |= {"model_args": "low_cpu_mem_usage=true,max_memory={0:20GiB}", "load_in_8bit": True}
    api, cli = Loading(**given).spec("gpt2"), ModelLoading(**given).spec("gpt2")
    assert api == cli
    assert api.model_args == {"low_cpu_mem_usage": True, "max_memory": {0: "20GiB"}} and api.quantization == "8bit"
    as_mapping = Loading(**{**given, "model_args": {"low_cpu_mem_usage": True, "max_memory": {0: "20GiB"}}})
    assert as_mapping.spec("gpt2") == cli


# --- commands × options: the common ones everywhere, the loading ones on every command that loads a model ----

LOADING = ["--revision", "--dtype", "--device", "--device-map", "--trust-remote-code", "--layers-path"]
LOADING += ["--model-args", "--model_args", "--load-in-4bit", "--load-in-8bit", "--attn-implementation"]
# Commands that read a model without taking the loading group, and why (each reads it its own way).
OWN_LOADING = {
    "prune": "writes a checkpoint on CPU in the checkpoint's own dtype (--dtype there keeps it); no quantization",
    "layers": "reads the config only (no weight is loaded): --revision, --trust-remote-code, --layers-path",
    "demo": "builds its own tiny model",
}


def spellings_of(command: str) -> set[str]:
    return {s for p in CLICK.commands[command].params for s in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("command", sorted(CLICK.commands))
def test_every_command_takes_the_common_options(command):
    assert {"--quiet", "-q", "--config"} <= spellings_of(command)
    if command not in ("prune", "layers"):  # prune writes to --save; layers writes nothing
        assert "--out" in spellings_of(command)


@pytest.mark.parametrize("command", sorted(CLICK.commands))
def test_every_command_that_loads_a_model_takes_the_loading_options_with_lm_evals_spellings(command):
    loads = ModelLoading in command_groups(COMMANDS[command]).values()
    assert loads or command in OWN_LOADING or "--model-args" not in spellings_of(command)
    if loads:
        assert set(LOADING) | {"--output_path"} <= spellings_of(command)
        if Evaluation in command_groups(COMMANDS[command]).values():
            assert {"--batch_size", "--num_fewshot", "--include_path", "--tasks"} <= spellings_of(command)
    if command in ("layers", "prune"):  # the loading options they do take come as the shared group
        assert Checkpoint in command_groups(COMMANDS[command]).values()
