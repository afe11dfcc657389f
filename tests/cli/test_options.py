"""Options declared once: the option-group mechanism, and every shared option identical on every command.

The groups of cli/options.py (and the options shared one by one) are what makes `--model-args` or
`--num_fewshot` mean the same on every command that takes them. These tests read the click commands
Typer builds, so they see exactly what a user sees: names, aliases, help, defaults and types.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import layerprobe
from layerprobe.cli.app import COMMANDS, app, friendly_errors
from layerprobe.cli.groups import OptionGroup, command_groups, takes_groups
from layerprobe.cli.options import Corpus, Evaluation, ModelLoading, Output, StreamedCorpus
from layerprobe.core import LayerprobeError

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
CLICK = typer.main.get_command(app)
# What Typer builds per use of an option (its own copies), not what the option is.
PER_USE = {"type_descriptor", "_runtime_param", "_custom_shell_complete"}


def described(param) -> str:
    """Everything click knows of one parameter, as comparable text: names, aliases, help, default, type…"""
    fields = {k: v for k, v in vars(param).items() if k not in PER_USE}
    fields["annotation"] = param.type_descriptor.annotation
    return json.dumps(fields, sort_keys=True, default=repr)


def params_of(command: str) -> dict[str, object]:
    return {p.name: p for p in CLICK.commands[command].params}


def flat_help(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    return " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())


# --- every group, identical on every command that takes it ---------------------------------------------


def commands_taking(group: type[OptionGroup]) -> list[str]:
    return sorted(name for name, command in COMMANDS.items() if group in command_groups(command).values())


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (ModelLoading, ["angular", "depth", "prune-curve", "prune-drop"]),
        (StreamedCorpus, ["angular", "depth"]),
        (Corpus, ["prune-curve", "prune-drop"]),
        (Evaluation, ["prune-curve", "prune-drop"]),
        (Output, ["angular", "depth", "prune-curve", "prune-drop"]),
    ],
)
def test_each_group_is_the_same_on_every_command_that_takes_it(group, expected):
    assert commands_taking(group) == expected
    fields = [name for name in group.__dataclass_fields__]
    first, *others = expected
    reference = {name: described(params_of(first)[name]) for name in fields}
    for command in others:
        assert {name: described(params_of(command)[name]) for name in fields} == reference, command


# Options of the same spelling that mean something else on some commands, on purpose: which commands
# share each declaration. Any other option string must have one declaration across all commands.
DELIBERATE = {
    "--out": [{"angular", "depth", "prune-curve", "prune-drop"}, {"demo"}, {"merge"}, {"plot"}, {"compare"}],
    "--output_path": [{"angular", "depth", "prune-curve", "prune-drop"}, {"demo"}],
    "--batch-size": [{"angular", "depth"}, {"prune-curve", "prune-drop"}],  # windows vs requests (or auto)
    "--batch_size": [{"angular", "depth"}, {"prune-curve", "prune-drop"}],
    "--tokens": [{"angular", "depth", "prune-curve", "prune-drop"}, {"demo"}],
    "--dtype": [{"angular", "depth", "prune-curve", "prune-drop"}, {"prune"}],  # export keeps the dtype
    "--angular": [{"prune-curve"}, {"prune-drop"}],  # an input of the curve, a comparison for ΔP
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
    for option in [*loading, "--batch_size", "--output_path"]:
        assert option in text, option
    if command.startswith("prune-"):
        for option in ("--tasks", "--num_fewshot", "--include_path", "--squad-data"):
            assert option in text, option


def test_prune_curve_passes_every_shared_option_to_its_spec(tmp_path, monkeypatch):
    import layerprobe.prune

    seen = []

    def capture(spec, *_args):
        seen.append(spec)
        raise LayerprobeError("captured")

    monkeypatch.setattr(layerprobe.prune, "run_prune_curve", capture)
    args = ["prune-curve", "org/m", "--tasks", "a,b", "--num_fewshot", "3", "--batch_size", "auto:2"]
    args += ["--include_path", str(tmp_path), "--squad-data", str(tmp_path / "s.json"), "--limit", "0.5"]
    args += ["--model-args", "low_cpu_mem_usage=true,max_memory={0:1GiB}", "--load-in-8bit"]
    args += ["--attn-implementation", "eager", "--revision", "main", "--trust-remote-code", "--layers-path", "x.y"]
    args += ["--device", "cpu", "--dtype", "bfloat16", "--tokens", "1e3", "--seq-len", "64", "--seed", "7"]
    args += ["--output_path", str(tmp_path / "out"), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "captured" in result.output, result.output
    [spec] = seen
    prune = spec.prune
    model = prune.model
    assert model.model_args == {"low_cpu_mem_usage": True, "max_memory": {0: "1GiB"}}
    assert (model.quantization, model.attn_implementation, model.revision) == ("8bit", "eager", "main")
    assert (model.trust_remote_code, model.layers_path, model.device, model.dtype) == (True, "x.y", "cpu", "bfloat16")
    assert prune.tasks == ("a", "b") and prune.num_fewshot == 3 and prune.batch_size == "auto:2"
    assert prune.include_path == str(tmp_path) and prune.squad_data == str(tmp_path / "s.json")
    assert prune.limit == 0.5 and prune.seed == 7
    assert prune.corpus.tokens == 1000 and prune.corpus.seq_len == 64


def test_no_command_hand_lists_more_than_twenty_parameters():
    for name, command in COMMANDS.items():
        assert len(inspect.signature(inspect.unwrap(command)).parameters) <= 20, name


# --- the mechanism ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size(OptionGroup):
    """A toy group."""

    width: Annotated[int, typer.Option("--width", "--breadth", help="How wide.")] = 3
    height: Annotated[int, typer.Option("--height", help="How high.")] = 4


calls: list[tuple[str, Size, bool]] = []


def area(
    name: Annotated[str, typer.Argument(help="A name.")],
    *,
    size: Size,
    verbose: Annotated[bool, typer.Option("--verbose", help="Say more.")] = False,
) -> None:
    calls.append((name, size, verbose))


def toy_app(command) -> typer.Typer:
    toy = typer.Typer()
    toy.command("area")(friendly_errors(command))
    toy.command("other")(lambda: None)  # two commands keep `area` a subcommand, as in the real app
    return toy


def test_a_group_parameter_becomes_its_options_in_order_and_every_parameter_is_keyword_only():
    command = takes_groups(area)
    signature = inspect.signature(command)
    assert list(signature.parameters) == ["name", "width", "height", "verbose"]
    assert {p.kind for p in signature.parameters.values()} == {inspect.Parameter.KEYWORD_ONLY}
    assert signature.parameters["width"].default == 3 and signature.parameters["height"].default == 4
    assert command_groups(command) == {"size": Size} == command_groups(friendly_errors(command))
    assert command_groups(area) == {}


def test_the_command_receives_one_object_per_group():
    calls.clear()
    toy = toy_app(takes_groups(area))
    assert runner.invoke(toy, ["area", "box", "--breadth", "5", "--verbose"]).exit_code == 0
    assert runner.invoke(toy, ["area", "box"]).exit_code == 0
    assert calls == [("box", Size(width=5, height=4), True), ("box", Size(), False)]
    text = " ".join(runner.invoke(toy, ["area", "--help"]).output.split())
    for option in ("--width", "--breadth", "How wide.", "--height", "How high.", "--verbose", "[default: 3]"):
        assert option in text


def test_an_option_taken_twice_is_refused_when_the_command_is_built():
    def twice(*, size: Size, width: Annotated[int, typer.Option("--w")] = 1) -> None:
        pass

    with pytest.raises(TypeError, match="width"):
        takes_groups(twice)


def test_a_group_option_needs_a_default():
    @dataclass(frozen=True)
    class NoDefault(OptionGroup):
        depth: Annotated[int, typer.Option("--depth")]

    def command(*, thing: NoDefault) -> None:
        pass

    command.__annotations__["thing"] = NoDefault  # a local class: give the resolved type
    with pytest.raises(TypeError, match="needs a default"):
        takes_groups(command)


# --- #18: --version, and help text that rich would have read as markup --------------------------------


def test_version_prints_the_package_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"layerprobe {layerprobe.__version__}\n"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert layerprobe.__version__ == project["version"]
    assert "--version" in flat_help()


@pytest.mark.parametrize("command", ["angular", "depth", "prune-drop", "prune-curve"])
def test_the_quant_extra_is_named_in_the_help(command):
    text = flat_help(command)
    assert text.count("bitsandbytes (extra [quant]).") == 2 and "(extra )" not in text


def test_help_never_imports_the_heavy_libraries():
    heavy = ("torch", "transformers", "lm_eval", "datasets", "matplotlib", "accelerate")
    code = (
        "import sys\nfrom layerprobe.cli.app import app\n"
        "for args in ([], ['prune-drop'], ['prune-curve'], ['angular'], ['layers'], ['compare']):\n"
        "    try:\n        app([*args, '--help'])\n    except SystemExit:\n        pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]"
