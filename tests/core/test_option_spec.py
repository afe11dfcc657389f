"""One declaration per setting: what a spec declares is what the commands, the fingerprint and the result use.

A setting's flag, help, default and panel, and whether it enters the resume fingerprint and the recorded
settings, are written once on its spec field (core/option_spec.py). The first test lists, for every
declared setting, the modules that *name* it — declare an option with its spelling, copy it into a
spec call by keyword, or write it as a key of a fingerprint or settings record — and fails when any
module but its declaration does. So adding an option to a command touches its spec and its tests only.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict
from pathlib import Path

import pytest
import typer
from source_code import PACKAGE

from layerprobe.cli.app import COMMANDS, app
from layerprobe.cli.groups import SpecGroup, command_groups
from layerprobe.core import (
    SAME,
    AngularSpec,
    CorpusSpec,
    DepthSpec,
    ExportSpec,
    GainSpec,
    HealSpec,
    ModelSpec,
    PruneCurveSpec,
    PruneSpec,
    ResultError,
    declared,
    fingerprint_values,
    recorded_options,
    recorded_values,
)
from layerprobe.results import PruneDropResult

SPECS = (PruneSpec, AngularSpec, DepthSpec, CorpusSpec, ModelSpec, PruneCurveSpec, ExportSpec, HealSpec, GainSpec)
# The modules that declare each spec's settings (run_specs.py: --max-state-memory, shared by two specs;
# --positions and the windows' --batch-size, shared by AngularSpec and DepthSpec).
DECLARING = {
    PruneSpec: {"core/prune_spec.py", "core/run_specs.py"},
    AngularSpec: {"core/run_specs.py"},
    DepthSpec: {"core/run_specs.py"},
    CorpusSpec: {"core/corpus_spec.py"},
    ModelSpec: {"core/model_spec.py"},
    PruneCurveSpec: {"core/curve_spec.py"},
    ExportSpec: {"core/export_spec.py"},
    HealSpec: {"core/heal_spec.py", "core/run_specs.py"},
    GainSpec: {"core/gain_spec.py"},  # heal's --batch-size is angular's (windows)
}
# Spellings other commands use for settings of their own, declared where they are used (tests/cli/test_options.py
# checks each is declared alike wherever it means the same): module → spellings of another meaning.
OTHER_MEANING = {
    "cli/corpus_options.py": {"--batch-size", "--batch_size"},  # windows per forward pass (angular, depth)
    "cli/heal.py": {"--task", "--tasks"},  # heal takes prune-drop's tasks, scored only when given
    "cli/prune_drop.py": {"--resume"},  # continue from the progress file (LoRA's checkpoint on heal)
    "cli/demo.py": {"--tokens"},  # the demo's own token count (default 32,768 on MiniLM)
    "cli/export.py": {"--dtype"},  # prune writes in the checkpoint's own dtype unless told
    "cli/stability.py": {"--seed", "--metric"},  # the metric that ranks the blocks
    "core/run_specs.py": set(),
}
OPTION_MAKERS = {"Option", "OptionSpec", "Argument"}
# The Python API takes the settings as keywords of its own functions (docs/api.md) and passes them on;
# `heal --task` scores as prune-drop does, its settings passed on to a PruneSpec; heal saves through `prune`'s
# export, its choice of blocks passed on to an ExportSpec. Some callers build a spec from values of their
# own, not from options: the demo's fixed run (CPU), the training-loop monitor's live model, `rerun` reading
# a result's revision back, and `Checkpoint`, which passes on the dtype `prune` reads its own way.
CONSUMERS = {
    "api/experiments.py",
    "api/measure.py",
    "api/arguments.py",
    "heal/tasks.py",
    "heal/run.py",
    "cli/demo.py",
    "integrations/monitor.py",
    "cli/rerun.py",
    "cli/options.py",
}
# Functions that build a record of settings.
RECORDS = {"fingerprint", "prune_settings", "corpus_settings", "curve_settings"}


def qualified(spec: type, name: str) -> str:
    return f"{spec.__name__}.{name}"


def spellings(spec: type) -> dict[str, tuple[str, set[str]]]:
    """Every spelling of every declared setting → (setting, the declaration's spellings)."""
    out = {}
    for name, item in declared(spec).items():
        flags = {s for flag in item.option.flags for s in flag.split("/")}
        for flag in item.option.flags:
            out[flag] = (name, flags)
        out.update({s: (name, flags) for s in flags})
    return out


def called(call: ast.Call) -> str | None:
    """The name a call calls: `Option` for typer.Option(…), `PruneSpec` for PruneSpec(…)."""
    function = call.func
    return function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)


def meant(settings: set[str], module: str) -> set[str]:
    """Which of the settings a name may mean (one spelling or field name, several specs) a module names.

    In a module that declares some of them, the name is their declaration (prune_spec.py's --unit is
    PruneSpec's, curve_spec.py's the curve's); anywhere else it names every one of them.
    """
    own = {s for s in settings if module in DECLARING[SPEC_NAMED[s.split(".")[0]]]}
    return own or settings


SPEC_NAMED = {spec.__name__: spec for spec in SPECS}


def naming_modules() -> dict[str, dict[str, set[str]]]:
    """setting (`Spec.field`) → module → how it names it ("option", "keyword", "record key")."""
    spelled: dict[str, set[str]] = defaultdict(set)  # one spelling may be declared by two specs (--unit)
    # A record may name only what a spec records or fingerprints (the loaded model's provenance, which
    # records what was loaded rather than the loading options, is not a copy of them).
    fields: dict[str, set[str]] = defaultdict(set)
    for spec in SPECS:
        for spelling, (name, _) in spellings(spec).items():
            spelled[spelling].add(qualified(spec, name))
        for name, item in declared(spec).items():
            if item.option.recorded or item.option.fingerprint:
                fields[name].add(qualified(spec, name))
    by_spec = {spec.__name__: declared(spec) for spec in SPECS}
    named: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and called(node) in OPTION_MAKERS:
                # An option declared with the setting's spelling (typer.Option("--x", …), OptionSpec(("--x",), …)).
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Constant) and inner.value in spelled:
                        if inner.value not in OTHER_MEANING.get(module, set()):
                            for setting in meant(spelled[inner.value], module):
                                named[setting][module].add("option")
            if isinstance(node, ast.Call) and called(node) in by_spec:
                # The setting copied into its spec by keyword: PruneSpec(…, x=…).
                for keyword in node.keywords:
                    if keyword.arg in by_spec[called(node)]:
                        named[f"{called(node)}.{keyword.arg}"][module].add("keyword")
            # The setting written into a record: {"x": spec.x} in the fingerprint or a settings block.
            if isinstance(node, ast.FunctionDef) and node.name in RECORDS:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Dict):
                        for key, value in zip(inner.keys, inner.values, strict=True):
                            if (
                                isinstance(key, ast.Constant)
                                and key.value in fields
                                and isinstance(value, ast.Attribute)
                                and value.attr == key.value
                            ):
                                for setting in meant(fields[key.value], module):
                                    named[setting][module].add("record key")
    return named


def test_every_setting_is_named_by_its_declaration_only():
    named = naming_modules()
    listing = {setting: sorted(modules) for setting, modules in sorted(named.items())}
    print("\n".join(f"{setting}: {', '.join(modules)}" for setting, modules in listing.items()))
    for spec in SPECS:
        for name in declared(spec):
            outside = {
                m: sorted(how)
                for m, how in named[qualified(spec, name)].items()
                if m not in DECLARING[spec] | CONSUMERS
            }
            assert not outside, f"{spec.__name__}.{name} is named outside its declaration: {outside}"
    # The listing sees a declaration: it would see a copy. A spelling two specs declare is each one's own.
    assert "core/prune_spec.py" in named["PruneSpec.prefix_reuse"]
    assert "core/run_specs.py" in named["PruneSpec.max_state_bytes"]
    assert set(named["PruneCurveSpec.unit"]) == {"core/curve_spec.py"}
    assert "core/prune_spec.py" in named["PruneSpec.unit"] and "core/curve_spec.py" not in named["PruneSpec.unit"]
    assert "core/export_spec.py" in named["ExportSpec.save"]


def test_the_listing_finds_a_setting_named_twice(tmp_path, monkeypatch):
    """The lister is not blind: a module that re-declares --prefix-reuse or copies it into a record is found."""
    copy = tmp_path / "layerprobe"
    (copy / "cli").mkdir(parents=True)
    (copy / "prune").mkdir()
    (copy / "core").mkdir()
    (copy / "cli" / "x.py").write_text('import typer\nO = typer.Option("--prefix-reuse/--no-prefix-reuse")\n')
    (copy / "prune" / "state.py").write_text('def fingerprint(spec):\n    return {"prefix_reuse": spec.prefix_reuse}\n')
    (copy / "core" / "y.py").write_text("def f(spec, PruneSpec):\n    return PruneSpec(span=spec.span)\n")
    (copy / "cli" / "z.py").write_text('import typer\nU = typer.Option("--unit")\n')
    (copy / "core" / "curve_spec.py").write_text('U = OptionSpec(("--unit",), "what delta and greedy remove")\n')
    monkeypatch.setitem(globals(), "PACKAGE", copy)
    named = naming_modules()
    assert named["PruneSpec.prefix_reuse"] == {"cli/x.py": {"option"}, "prune/state.py": {"record key"}}
    assert named["PruneSpec.span"] == {"core/y.py": {"keyword"}}
    # A spelling two specs declare: a third module names both; a declaration names its own spec's only.
    assert named["PruneSpec.unit"] == {"cli/z.py": {"option"}}
    assert named["PruneCurveSpec.unit"] == {"cli/z.py": {"option"}, "core/curve_spec.py": {"option"}}


# --- what is derived from the declarations ----------------------------------------------------------------

CLICK = typer.main.get_command(app)


def test_every_option_built_from_a_spec_is_its_declaration():
    """Each option a command takes through a SpecGroup has the declaration's spellings, help, panel, default."""
    seen = set()
    for command, function in COMMANDS.items():
        params = {p.name: p for p in CLICK.commands[command].params}
        for group in command_groups(function).values():
            if not issubclass(group, SpecGroup):
                continue
            for name in group.FIELDS:
                item = declared(group.SPEC)[name]
                if item.option.switches:  # one on/off option per value, its help naming the value
                    for flag, _, shown in item.option.switches:
                        param = params[flag.lstrip("-").replace("-", "_")]
                        assert param.opts == [flag] and param.default is False
                        assert param.help == item.option.help.format(shown=shown)
                    seen.add((command, group.SPEC.__name__, name))
                    continue
                param = params[item.param]
                assert {*param.opts, *param.secondary_opts} == {s for f in item.option.flags for s in f.split("/")}
                assert param.help == item.option.help
                assert param.rich_help_panel == (item.option.panel or group.PANEL or None)
                expected = item.default if item.option.cli_default is SAME else item.option.cli_default
                if expected is dataclasses.MISSING:  # a setting the spec requires: a required option
                    assert param.required and param.default is None, (command, name)
                else:
                    assert param.default == expected and not param.required, (command, name)
                seen.add((command, group.SPEC.__name__, name))
    prune_drop = {name for command, spec, name in seen if command == "prune-drop" and spec == "PruneSpec"}
    assert prune_drop == set(declared(PruneSpec))  # every PruneSpec setting is a prune-drop option
    for command, spec in [("prune-curve", PruneCurveSpec), ("prune", ExportSpec)]:  # and each of these one of its
        assert {name for c, s, name in seen if (c, s) == (command, spec.__name__)} == set(declared(spec))
    assert ("prune-curve", "PruneSpec", "precision") in seen and ("angular", "AngularSpec", "max_state_bytes") in seen
    for spec, command in [(ModelSpec, "angular"), (CorpusSpec, "heal"), (HealSpec, "heal"), (GainSpec, "gain")]:
        assert {name for c, s, name in seen if c == command and s == spec.__name__} == set(declared(spec)), spec
    # depth takes AngularSpec's declarations of the settings DepthSpec shares with it (one declaration each).
    assert {name for c, s, name in seen if c == "depth" and s in ("DepthSpec", "AngularSpec")} == set(
        declared(DepthSpec)
    )


def spec(**fields):
    return PruneSpec(model=ModelSpec("m"), tasks=("t",), **fields)


def test_the_fingerprint_and_the_settings_follow_the_declarations():
    full, sequential = spec(), spec(precision=0.05, layers="0-2", round_size=7)
    digest = lambda path: f"digest of {path}"  # noqa: E731
    assert fingerprint_values(full, digest) == {
        item.key: getattr(full, item.name)
        for item in declared(PruneSpec).values()
        if item.option.fingerprint and item.option.only_when is None
    }
    added = {
        k: v for k, v in fingerprint_values(sequential, digest).items() if k not in fingerprint_values(full, digest)
    }
    assert added == {"sequential_layers": "0-2", "precision": 0.05, "round_size": 7}
    assert fingerprint_values(spec(include_path="tasks"), digest)["include_path"] == "digest of tasks"
    assert "engine" not in fingerprint_values(full, digest)  # one engine's score equals the other's
    assert recorded_values(spec(prefix_reuse=False))["prefix_reuse"] is False
    assert set(recorded_values(sequential)) == set(recorded_options(PruneSpec))


def test_the_reader_checks_every_recorded_setting_from_its_declaration():
    from factories.results import prune_dict  # noqa: PLC0415

    base = prune_dict()
    assert PruneDropResult.from_dict(base)  # the factory's file reads
    older = PruneDropResult.from_dict({**base, "settings": {"limit": None}})
    assert older.settings == {"limit": None}  # an open record: what an older file lacks stays absent
    for key, bad in [("prefix_reuse", "yes"), ("max_state_bytes", 0), ("round_size", 1.5), ("span", 0)]:
        with pytest.raises(ResultError, match=f"settings.{key}"):
            PruneDropResult.from_dict({**base, "settings": {**base.get("settings", {}), key: bad}})


def test_a_prune_drop_run_records_what_the_declarations_say(tmp_path: Path):
    """The settings block of a run's result holds exactly its structure plus the recorded declarations."""
    from layerprobe.prune.assemble import prune_settings  # noqa: PLC0415

    class NoSublayers:
        def module_paths(self):
            return None

    written = prune_settings(spec(precision=0.1), [0, 1], NoSublayers())  # type: ignore[arg-type]
    assert set(written) == {"tasks", "layers", "sublayers", *recorded_options(PruneSpec)}


def test_a_prune_curve_run_records_what_the_declarations_say():
    """prune_curve.json's settings: the keys and values of every earlier version, now from the declarations."""
    from layerprobe.prune.curve import curve_settings  # noqa: PLC0415
    from layerprobe.prune.search import Driver  # noqa: PLC0415

    driver = Driver("t", "acc", True)
    sequential = PruneCurveSpec(spec(precision=0.1, round_size=5, seed=7), baseline_seeds=2)
    written = curve_settings(sequential, driver)
    assert list(written) == [  # the order the settings block was written in by hand
        *["tasks", "max_fraction", "methods", "metric", "unit", "prune_drop", "baseline_seeds", "angular"],
        *["corpus", "limit", "num_fewshot", "seed", "batch_size", "engine", "precision", "round_size"],
    ]
    assert set(recorded_options(PruneCurveSpec)) < set(written)
    assert written["methods"] == ["angular", "last", "random"]  # what ran: the default's methods, as a list
    assert written["baseline_seeds"] == [7, 8] and written["metric"] == driver.to_dict()
    assert [written[k] for k in ("unit", "angular", "precision", "round_size")] == ["block", None, 0.1, 5]
    full = curve_settings(PruneCurveSpec(spec(), methods=("last",), angular="a.json"), driver)
    assert "precision" not in full and "round_size" not in full  # recorded only by a sequential run, as before
    assert (full["methods"], full["baseline_seeds"], full["angular"]) == (["last"], [], "a.json")


def test_a_required_setting_is_a_required_option(tmp_path):
    """ExportSpec.save has no default: `prune` without --save is refused by the command line, exit 2."""
    from typer.testing import CliRunner  # noqa: PLC0415

    result = CliRunner().invoke(app, ["prune", str(tmp_path), "--remove", "1"])
    assert result.exit_code == 2 and "Missing option '--save'" in result.output, result.output


def test_the_schema_documents_every_recorded_setting():
    """docs/json-schema.md's prune-drop `settings` table has a row for every setting PruneSpec records."""
    text = (PACKAGE.parent / "docs" / "json-schema.md").read_text(encoding="utf-8")
    table = text.split("### `settings`", 1)[1].split("### `tasks.<name>`", 1)[0]
    rows = {line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")}
    assert set(recorded_options(PruneSpec)) | {"tasks", "layers", "sublayers", "corpus"} <= rows
