"""Few-shot contexts computed once: prefix reuse scores exactly what the plain path and lm-eval score.

Three ways of scoring the same MMLU-shaped 5-shot task (every question of a subject starts with the
subject's description and the same five worked examples) are compared request by request:
- the simple engine (lm-eval's own path, one full evaluation per variant: the reference),
- the shared engine with `prefix_reuse=False` (the plain path),
- the shared engine with prefix reuse (the default),
for the baseline and blocks 0, a middle one and L-1 removed: log-likelihoods within 1e-5, greedy flags and
accuracies identical. The block work is counted by hooks on the blocks, independently of the engine.
"""

from __future__ import annotations

import json

import pytest
import torch
from command_line import RESULT, invoke_prune_drop
from factories import TASKS_DIR, loaded_head, prune_spec
from watching import assert_same_answers

from layerprobe.core.errors import ResultError
from layerprobe.evaluate.prefix_cache import MIN_PREFIX, PrefixReuse, find_groups
from layerprobe.evaluate.shared import SharedPrefixLM
from layerprobe.model.info import model_info
from layerprobe.model.progress import Progress
from layerprobe.model.stack import find_layers, hidden_from_input
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.state import fingerprint

FEWSHOT_TASKS = ("lp_mmlu", "lp_arc_like")  # MMLU-shaped group (5 dev questions per subject), ARC-shaped


WAYS = {
    "simple": dict(engine="simple"),
    "plain": dict(engine="shared", prefix_reuse=False),
    "reuse": dict(engine="shared"),
}


# ------------------------------------------------------------------------------------ finding groups
def test_groups_are_the_longest_common_token_prefixes_that_save_work():
    shots = tuple(range(100, 140))  # 40 tokens every question of "subject A" starts with
    a = [(*shots, 7, 8, 9), (*shots, 7, 5), (*shots, 3, 3, 3, 3)]
    other = (*shots[:10], 1, 2, 3, 4)  # shares only 10 tokens with them: fewer than MIN_PREFIX
    b = [(*range(500, 520), 1, 2), (*range(500, 520), 1, 3)]  # "subject B": 21 tokens in common
    capped = [(*range(600, 640), 1), (*range(600, 640), 2)]  # scored from token 30 on: prefix ≤ 30
    alone = (9, 9, 9)
    rooms = {row: len(row) - 1 for row in [*a, other, *b, alone]}
    rooms.update({row: 30 for row in capped})
    groups, rest = find_groups(rooms)

    found = {group.rows: group.length for group in groups}
    assert found == {tuple(sorted(a)): 40, tuple(sorted(b)): 21, tuple(sorted(capped)): 30}
    assert sorted(rest) == sorted([other, alone])
    for group in groups:  # every row starts with the prefix, and the prefix never reaches a scored token
        assert all(row[: group.length] == group.prefix and group.length <= rooms[row] for row in group.rows)
    assert MIN_PREFIX > 10

    # A row that would shrink the group's prefix so far that the group saves less is left out, wherever
    # it sorts (here first: a lone question of another subject sharing only its description).
    long = [(*range(40), k) for k in (1, 2, 3)]
    short = (*range(20), 5, 5)
    groups, rest = find_groups({row: len(row) - 1 for row in [*long, short]})
    assert [(g.rows, g.length) for g in groups] == [(tuple(sorted(long)), 40)] and rest == [short]
    # ... but joins when that saves more: 4 rows sharing 20 tokens save 3 × 20 > 21 + 30 as two pairs.
    wide = [(*range(30), k) for k in (1, 2)] + [(*range(20), 5, k) for k in (1, 2)]
    groups, rest = find_groups({row: len(row) - 1 for row in wide})
    assert [(g.rows, g.length) for g in groups] == [(tuple(sorted(wide)), 20)] and rest == []


# -------------------------------------------------------------------- equal to the plain path and lm-eval
def _run_all_ways(path, tmp_path, spy, layers: str, **settings):
    loaded = loaded_head(path)
    blocks = list(find_layers(loaded.model).blocks)
    work = {"tokens": 0}

    def count(_module, args, kwargs):
        hidden = hidden_from_input(args, kwargs)
        work["tokens"] += hidden.shape[0] * hidden.shape[1]

    handles = [block.register_forward_pre_hook(count, with_kwargs=True) for block in blocks]
    results, answers, tokens, lms = {}, {}, {}, {}
    try:
        for way, engine in WAYS.items():
            spy.reset()
            work["tokens"] = 0
            spec = prune_spec(path, tasks=FEWSHOT_TASKS, layers=layers, **{**settings, **engine})
            results[way] = run_prune_drop(spec, tmp_path / way, loaded=loaded, progress=spy.progress)
            answers[way], tokens[way] = dict(spy.answers), work["tokens"]
            lms[way] = spy.scorers[0].lm
    finally:
        for handle in handles:
            handle.remove()
    return results, answers, tokens, lms


@pytest.mark.parametrize("arch", ["llama", "qwen3", pytest.param("gpt2", marks=pytest.mark.slow)])
@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_prefix_reuse_equals_the_plain_path_and_lm_eval_on_a_5_shot_mmlu_task(arch, long_context, tmp_path, spy):
    path = long_context[arch]
    L = 4
    results, answers, tokens, lms = _run_all_ways(path, tmp_path, spy, "0,2,3", limit=4, num_fewshot=5, batch_size=3)
    assert results["simple"].engine == "simple" and results["plain"].engine == results["reuse"].engine == "shared"
    assert results["reuse"].run.prefix_reuse == "on" and results["plain"].run.prefix_reuse == "off"
    assert results["simple"].run.prefix_reuse is None
    written = json.loads((tmp_path / "reuse" / RESULT).read_text())
    assert written["settings"]["prefix_reuse"] is True and written["run"]["prefix_reuse"] == "on"
    assert json.loads((tmp_path / "plain" / RESULT).read_text())["settings"]["prefix_reuse"] is False

    # Every request, every variant (baseline, blocks 0, 2 and L-1 = 3): the same log-likelihoods and
    # greedy flags as lm-eval's own path, and as the plain shared path (its full store, request by request).
    for way in ("plain", "reuse"):
        assert answers[way].keys() == answers["simple"].keys()
        for key, want in answers["simple"].items():
            assert_same_answers(answers[way][key], want)
    plain, reuse = lms["plain"].store, lms["reuse"].store
    assert plain.keys() == reuse.keys()
    for request, by_variant in plain.items():
        assert by_variant.keys() == reuse[request].keys() == {None, 0, 2, 3}
        for variant, (loglikelihood, greedy) in by_variant.items():
            assert reuse[request][variant][0] == pytest.approx(loglikelihood, rel=1e-5, abs=1e-6)
            assert reuse[request][variant][1] == greedy
    for task in FEWSHOT_TASKS:
        for metric, want in results["simple"].tasks[task].metrics.items():
            for way in ("plain", "reuse"):
                got = results[way].tasks[task].metrics[metric]
                assert [got.baseline, *got.pruned] == [want.baseline, *want.pruned], (way, task, metric)
    # The removal changed the model (a comparison of a model with itself would prove nothing).
    stem = [v[None][0] for k, v in plain.items()]
    assert any(abs(v[3][0] - v[None][0]) > 1e-3 for v in plain.values()) and stem

    # The few-shot prefix was run once per subject and variant, not once per question: the reused run
    # did far less block work than the plain one (which itself does (L+1)/(2L) of the simple engine's).
    assert tokens["reuse"] < 0.6 * tokens["plain"] < 0.6 * tokens["simple"]
    assert find_layers(lms["reuse"].model).num_layers == L  # the model is left as it was


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_a_model_whose_cache_cannot_be_reused_falls_back_to_the_plain_path(long_context, tmp_path, spy, monkeypatch):
    """A model that ignores a prefilled cache is caught by the probe; the run scores on the plain path."""
    path = long_context["llama"]

    def forgetful(self, ids, cache):  # as if the model dropped the past keys/values it was given
        return self.lm.model.base_model(input_ids=ids, use_cache=True)

    monkeypatch.setattr(PrefixReuse, "_forward", forgetful)
    loaded = loaded_head(path)
    spec = prune_spec(path, tasks=("lp_mmlu",), layers="0,3", limit=3, num_fewshot=5, engine="shared")
    fallen = run_prune_drop(spec, tmp_path / "fallen", loaded=loaded, progress=spy.progress)
    assert fallen.run.prefix_reuse.startswith("unavailable: with a reused prefix, the baseline gives log-prob")
    fallen_store = spy.scorers[0].lm.store
    spy.reset()
    plain = run_prune_drop(
        prune_spec(path, tasks=("lp_mmlu",), layers="0,3", limit=3, num_fewshot=5, engine="shared", prefix_reuse=False),
        tmp_path / "plain",
        loaded=loaded,
        progress=spy.progress,
    )
    assert fallen_store == spy.scorers[0].lm.store  # the very same arithmetic: the plain path ran
    assert fallen.tasks["lp_mmlu"].to_dict() == plain.tasks["lp_mmlu"].to_dict()

    def broken(self, ids, cache):
        raise TypeError("no cache here")

    monkeypatch.setattr(PrefixReuse, "_forward", broken)
    spy.reset()
    failed = run_prune_drop(spec, tmp_path / "failed", loaded=loaded, progress=spy.progress)
    assert failed.run.prefix_reuse == "unavailable: its key/value cache cannot be reused (TypeError: no cache here)"
    assert failed.tasks["lp_mmlu"].to_dict() == plain.tasks["lp_mmlu"].to_dict()


def test_the_probe_passes_on_a_model_that_reuses_its_cache_correctly(long_context, monkeypatch):
    """The probe is not a rubber stamp: it accepts the real model and rejects wrongly numbered positions."""
    loaded = loaded_head(long_context["qwen3"])
    stack = find_layers(loaded.model)
    lm = SharedPrefixLM(loaded.model, loaded.tokenizer, stack, [0, 1, 3], batch_size=2)
    assert lm.prefixes._probe() is None

    def numbered_from_zero(self, ids, cache):  # a subtle bug: suffix positions restart at 0 after the prefix
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.lm.model.base_model(input_ids=ids, past_key_values=cache, use_cache=True, position_ids=positions)

    monkeypatch.setattr(PrefixReuse, "_forward", numbered_from_zero)
    shifted = PrefixReuse(lm)
    assert "away from the plain pass" in shifted._probe()


def test_no_prefix_reuse_is_a_cli_flag_recorded_in_the_result_and_the_fingerprint(long_context, tmp_path):
    path = long_context["llama"]
    args = ["--task", "lp_mmlu", "--include-path", TASKS_DIR, "--layers", "3", "--limit", 2, "--num-fewshot", 5]
    args += ["--device", "cpu", "--quiet", "--out", tmp_path / "off"]
    done = invoke_prune_drop(path, *args, "--no-prefix-reuse")
    assert done.exit_code == 0, done.output
    data = json.loads((tmp_path / "off" / RESULT).read_text())
    assert data["settings"]["prefix_reuse"] is False and data["run"]["prefix_reuse"] == "off"
    # Part of the resume fingerprint: a run with prefix reuse is not continued without it (and back).
    assert fingerprint(prune_spec(path, prefix_reuse=False), _info(path))["prefix_reuse"] is False
    assert fingerprint(prune_spec(path), _info(path))["prefix_reuse"] is True


def _info(path):
    loaded = loaded_head(path)
    return model_info(loaded, find_layers(loaded.model))


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_prefix_groups_are_journaled_so_a_killed_run_resumes_without_redoing_them(long_context, tmp_path):
    """With prefix reuse on (the default), each scored group is saved: a resumed run redoes only what was lost."""
    path = long_context["llama"]
    loaded = loaded_head(path)
    spec = prune_spec(path, tasks=("lp_mmlu",), layers="0-1", engine="shared", num_fewshot=5, limit=4)
    full_rows: list[int] = []
    full = run_prune_drop(
        spec, tmp_path / "full", loaded=loaded, progress=Progress(on_block=lambda e: full_rows.append(e.rows))
    )

    out = tmp_path / "killed"
    journal = out / "prune_drop.answers.jsonl"

    def kill(_event) -> None:  # once the first group (one subject) is durable, stop mid-way through the next
        if journal.exists() and len(journal.read_text().splitlines()) >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(spec, out, loaded=loaded, progress=Progress(on_block=kill))
    with pytest.raises(ResultError):
        run_prune_drop(spec, out, loaded=loaded)
    resumed_rows: list[int] = []
    resumed = run_prune_drop(
        spec, out, resume=True, loaded=loaded, progress=Progress(on_block=lambda e: resumed_rows.append(e.rows))
    )
    assert resumed.tasks["lp_mmlu"].metrics == full.tasks["lp_mmlu"].metrics
    assert 0 < sum(resumed_rows) < sum(full_rows)  # the saved group is not scored again


@pytest.mark.filterwarnings("error::FutureWarning")  # pyproject ignores FutureWarning globally: not here
def test_a_shared_prune_drop_uses_the_supported_cache_argument_and_warns_nothing(long_context, tmp_path, spy):
    """transformers 5 renamed `past_key_values` to `cache` (the old name "will be removed in version 5.40.0")."""
    import warnings

    path = long_context["llama"]
    spec = prune_spec(path, tasks=("lp_mmlu",), layers="3", limit=2, num_fewshot=5, engine="shared")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        result = run_prune_drop(spec, tmp_path / "run", loaded=loaded_head(path), progress=spy.progress)
    assert result.run.prefix_reuse == "on"  # the cached passes ran
