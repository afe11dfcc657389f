"""The shared engine's answer journal: a run killed mid-evaluation resumes recomputing only the batch in
flight (prefix groups have their own test in tests/evaluate/test_prefix_cache.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import loaded_head, prune_spec
from watching import comparable

from layerprobe.core.errors import ResultError
from layerprobe.evaluate.journal import AnswerJournal
from layerprobe.model.progress import Progress
from layerprobe.prune.drop import run_prune_drop


def test_a_shared_engine_run_killed_in_its_baseline_pass_resumes_recomputing_only_the_batch_in_flight(
    tiny_checkpoints, tmp_path
):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    # The plain shared path journals per batch; prefix-reuse groups are not journaled yet (see the report).
    spec = prune_spec(
        path, tasks=("lp_arc_like",), layers="0-3", limit=3, batch_size=2, engine="shared", prefix_reuse=False
    )
    L = 4

    def batches_saved(out: Path) -> int:
        journal = out / "prune_drop.answers.jsonl"
        return len(journal.read_text().splitlines()) - 1 if journal.exists() else 0

    # The uninterrupted run, its block passes grouped by the batch they belong to (batches saved so far).
    out_full = tmp_path / "full"
    rows_by_batch: dict[int, int] = {}

    def tally(event) -> None:
        batch = batches_saved(out_full)
        rows_by_batch[batch] = rows_by_batch.get(batch, 0) + event.rows

    full = run_prune_drop(spec, out_full, loaded=loaded, progress=Progress(on_block=tally))
    assert len(rows_by_batch) >= 4  # 12 requests, 2 rows a batch: enough batches to kill one mid-way
    assert not (out_full / "prune_drop.answers.jsonl").exists()  # removed once the result is written

    # Killed during the third batch of the baseline evaluation (after a few of its block passes).
    out = tmp_path / "killed"
    passes_in_third = []

    def kill(event) -> None:
        if batches_saved(out) == 2:
            passes_in_third.append(event)
            if len(passes_in_third) == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(spec, out, loaded=loaded, progress=Progress(on_block=kill))
    assert batches_saved(out) == 2 and not (out / "prune_drop.json").exists()
    with pytest.raises(ResultError, match="unfinished prune-drop run"):  # no silent restart without --resume
        run_prune_drop(spec, out, loaded=loaded)

    resumed_rows = []
    resumed = run_prune_drop(
        spec, out, resume=True, loaded=loaded, progress=Progress(on_block=lambda e: resumed_rows.append(e.rows))
    )
    assert comparable(resumed) == comparable(full)
    # Every batch but the two saved ones is computed again, the one in flight included; the engine's
    # one-row probe of the blocks' output (L passes, made with the first batch it computes) moves along.
    assert sum(resumed_rows) == sum(rows_by_batch.values()) - rows_by_batch[0] - rows_by_batch[1] + L
    assert not list(out.glob("prune_drop.partial*")) and not list(out.glob("prune_drop.answers*"))


# ------------------------------------------------------------------------------ damaged journals
FINGERPRINT = {"model": "m"}


def keys(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The two requests of batch n (context and continuation token ids)."""
    return [((1, 2, n), (3,)), ((4, n), (5, 6))]


def batch(n: int) -> dict:
    """Scored batch n: the baseline's and block 1's answers to its two requests."""
    return {v: {k: (-1.5 - 10 * n - i - (v or 0), i == 0) for i, k in enumerate(keys(n))} for v in (None, 1)}


def answers_of(n: int) -> dict:
    """What the store holds for batch n: request → variant → answer."""
    return {k: {v: batch(n)[v][k] for v in (None, 1)} for k in keys(n)}


def written_journal(path: Path) -> list[str]:
    path.unlink(missing_ok=True)
    journal, store = AnswerJournal.open(path, FINGERPRINT, [1], resume=False)
    assert store == {}
    for n in range(3):
        journal.append(batch(n))
    return path.read_text().splitlines()


def damaged(line: str, change) -> str:
    data = json.loads(line)
    change(data)
    return json.dumps(data)


JOURNAL_DAMAGE = {
    "edited number": lambda d: d["answers"]["baseline"][0].__setitem__(0, -0.25),
    "string for a number": lambda d: d["answers"]["baseline"][0].__setitem__(0, "x"),
    "NaN for a number": lambda d: d["answers"]["baseline"][0].__setitem__(0, float("nan")),
    "fewer answers than keys": lambda d: d["answers"]["1"].pop(),
    "unknown variant": lambda d: d["answers"].__setitem__("7", d["answers"]["1"]),
    "wrong shape": lambda d: d.__setitem__("keys", {"a": 1}),
    "no checksum": lambda d: d.pop("check"),
}


@pytest.mark.parametrize("kind", list(JOURNAL_DAMAGE))
def test_a_damaged_journal_line_is_dropped_and_counted(tmp_path, kind):
    path = tmp_path / "prune_drop.answers.jsonl"
    header, first, second, third = written_journal(path)
    path.write_text("\n".join([header, first, damaged(second, JOURNAL_DAMAGE[kind]), third]) + "\n")
    journal, store = AnswerJournal.open(path, FINGERPRINT, [1], resume=True)
    assert (journal.dropped, journal.reused) == (1, 2)
    # The two intact batches are kept exactly; the damaged one's requests are absent, so computed again.
    assert store == {**answers_of(0), **answers_of(2)}


def test_random_bytes_a_directory_and_a_missing_header_never_give_a_traceback(tmp_path):
    path = tmp_path / "prune_drop.answers.jsonl"
    path.write_bytes(bytes(range(256)) * 8)
    journal, store = AnswerJournal.open(path, FINGERPRINT, [1], resume=True)
    assert store == {} and journal.dropped >= 1
    assert json.loads(path.read_text().splitlines()[0])["fingerprint"] == FINGERPRINT  # started over
    header, *batches = written_journal(path)
    path.write_text("\n".join(["garbage", *batches]) + "\n")
    journal, store = AnswerJournal.open(path, FINGERPRINT, [1], resume=True)
    assert store == {} and journal.dropped == 3
    path.unlink()
    path.mkdir()
    with pytest.raises(ResultError, match="is a directory"):
        AnswerJournal.open(path, FINGERPRINT, [1], resume=True)
