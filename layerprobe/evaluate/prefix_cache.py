"""Few-shot contexts computed once: the shared-prefix engine's key/value cache of a common prompt prefix.

In loglikelihood tasks many inputs start with the same long run of tokens (MMLU 5-shot: every question
of a subject starts with the subject's description and the same five worked examples, ~80 % of its
tokens). Attention is causal, so the keys and values of those tokens do not depend on what follows
them: computed once, they serve every input that starts with them, and only the remaining tokens
(the suffix) run through the blocks.

The shared-prefix engine (`shared.py`) scores the baseline and every variant "block l removed". Both
reuse a prefix here:
- baseline: one pass over the prefix fills the model's own cache (a transformers `Cache`) and records the
  prefix's x^l; each batch of suffixes then runs with that cache (copied and repeated over the batch)
  and records the suffixes' x^l as the plain engine does;
- variant l: blocks 0 … l-1 are unchanged, so the prefix's x^l is the baseline's; blocks l+1 … L-1 see
  different inputs, so their prefix keys/values are computed once per (prefix, variant), by replaying
  the prefix's x^l into block l+1 with a fresh cache, and every suffix batch of the group reuses them.

Groups are found on the exact token ids the plain path scores (lm-eval tokenizes context and
continuation separately; rows are built from those ids, never re-tokenized): rows sorted
lexicographically, a group grown while its longest common token prefix, times the rows that share it,
still saves work. A prefix never reaches a scored position, so every scored logit comes from a suffix
pass. Positions and masks are the model's own: with the cache holding P tokens the model numbers the
suffix P, P+1, … and builds its causal mask over P + suffix keys; suffixes are right-padded, which
causal attention cannot see from earlier positions, exactly as in the plain path.

Before first use a probe compares, on a two-row input, prefix reuse with the plain path for the
baseline and every selected variant; a model whose cache cannot be reused this way (an error, or
log-probabilities that differ) falls back to the plain path, and the reason is recorded.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from layerprobe.evaluate.journal import Answer, AnswerJournal, Key, Store
from layerprobe.evaluate.replay import BlockOutput, cache_keyword, filled_cache, mirror_attributes
from layerprobe.model import LayerStack, capture_block_states, image_only_blocks, removed_blocks

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

MIN_PREFIX = 16  # shared tokens below which a group is not worth its own prefix passes
_PROBE_LENGTH, _PROBE_PREFIX = 24, 16
_PROBE_TEXT = (
    "The following are multiple choice questions (with answers) about science. "
    "Which gas do plants take in? A. oxygen B. carbon dioxide C. helium D. neon Answer: B"
)

Row = tuple[int, ...]  # one model input: the token ids of a request's context and continuation, minus the last


class PrefixEngine(Protocol):
    """What `PrefixReuse` needs of the engine it serves (`shared.SharedPrefixLM`): its model, plain path and store.

    The prefix passes reuse the engine's own pieces, so that a suffix is scored exactly as the plain
    path scores a whole input: its batch size and memory chunks, its replay of x^l (`block_arity`), and
    its head (`answers_of`, `logprobs`). Answers go into its `store` and `journal` as its own do.
    """

    stack: LayerStack
    layers: list[int]  # the selected blocks, sorted: variant l removes block l
    store: Store
    journal: AnswerJournal | None
    block_arity: int | None

    @property
    def model(self) -> PreTrainedModel: ...

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase: ...

    @property
    def device(self) -> torch.device: ...

    def rows_per_batch(self, longest: Row) -> int: ...

    def memory_chunks(self, batch: list[Row]) -> Iterator[list[Row]]: ...

    def baseline_pass(self, ids: torch.Tensor) -> tuple[dict[int, torch.Tensor], torch.Tensor]: ...

    def final_without(self, layer: int, ids: torch.Tensor, x_layer: torch.Tensor) -> torch.Tensor: ...

    def answers_of(
        self, final: torch.Tensor, chunk: list[Row], requests: dict[Row, list[Key]]
    ) -> dict[Key, Answer]: ...

    def logprobs(self, final: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class CachedPass:
    """What the model without its head returns with `use_cache=True`: the final states and the filled cache."""

    last_hidden_state: torch.Tensor
    cache: Cache


@dataclass(frozen=True)
class PrefixGroup:
    """Rows (whole inputs) that start with the same `length` tokens."""

    rows: tuple[Row, ...]
    length: int

    @property
    def prefix(self) -> Row:
        """The tokens every row of the group starts with."""
        return self.rows[0][: self.length]


def find_groups(rooms: dict[Row, int], min_prefix: int = MIN_PREFIX) -> tuple[list[PrefixGroup], list[Row]]:
    """Split rows into shared-prefix groups and the rest, from their token ids alone.

    `rooms[row]` is how many leading tokens of `row` a prefix may cover: up to the first position a
    request scores (a prefix holds no scored position and leaves at least one token to run). Rows are
    sorted, so rows with long common prefixes are neighbours and any run of neighbours shares the
    smallest common length of its adjacent pairs. A group of n rows sharing p tokens saves (n-1)·p token
    passes; a run is kept whole or split where its common length is smallest, whichever saves more
    (recursively: the tree of longest common prefixes), and only groups of p ≥ `min_prefix` are kept.
    Returns the groups (two rows or more) and the rows left to the plain path.
    """
    rows = sorted(rooms)
    links = [min(_common_length(a, b), rooms[a], rooms[b]) for a, b in zip(rows, rows[1:], strict=False)]
    groups: list[PrefixGroup] = []
    for lo, hi, length in _best_runs(links, 0, len(rows), min_prefix, 0)[1]:
        groups.append(PrefixGroup(tuple(rows[lo:hi]), length))
    grouped = {row for group in groups for row in group.rows}
    return groups, [row for row in rows if row not in grouped]


def _best_runs(
    links: list[int], lo: int, hi: int, min_prefix: int, depth: int
) -> tuple[int, list[tuple[int, int, int]]]:
    """(tokens saved, [(lo, hi, prefix length)]) of the best grouping of rows lo … hi-1."""
    if hi - lo < 2:
        return 0, []
    shared = min(links[lo : hi - 1])
    whole = (hi - lo - 1) * shared if shared >= min_prefix else 0
    if depth > 200:  # a pathological chain of ever longer prefixes: stop refining
        return whole, [(lo, hi, shared)] if whole else []
    saved, start = 0, lo
    runs: list[tuple[int, int, int]] = []
    for i in range(lo, hi):
        if i == hi - 1 or links[i] == shared:  # the run splits after row i
            piece = _best_runs(links, start, i + 1, min_prefix, depth + 1)
            saved, runs, start = saved + piece[0], runs + piece[1], i + 1
    if whole and whole >= saved:
        return whole, [(lo, hi, shared)]
    return saved, runs


def _common_length(a: Row, b: Row) -> int:
    """How many leading tokens two rows share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class _CachedReplay(nn.Module):
    """Stands in for the removed block l in a cached pass: returns the recorded x^l.

    It also appends a placeholder of the right length to its cache slot, so that the cache reports
    the true number of past tokens (models number positions and size masks from slot 0).
    """

    def __init__(self, states: torch.Tensor, output_arity: int | None, like: nn.Module) -> None:
        super().__init__()
        mirror_attributes(self, like)
        self.states, self.output_arity = states, output_arity

    def forward(self, *args: object, **kwargs: object) -> BlockOutput:  # whatever the replaced block was given
        """The recorded states, in the block's output shape, after a placeholder entry in the cache's slot."""
        cache = next((a for a in (*args, *kwargs.values()) if isinstance(a, Cache)), None)
        if cache is not None:
            rows, length = self.states.shape[:2]
            blank = self.states.new_zeros(rows, 1, length, 1)
            cache.update(blank, blank, 0)
        if self.output_arity is None:
            return self.states
        return (self.states,) + (None,) * (self.output_arity - 1)


class _ReadOnlyLayer(DynamicLayer):
    """A prefix's keys/values (one row) lent to a batch: `update` returns prefix + new and stores nothing."""

    def __init__(self, layer: DynamicLayer) -> None:
        super().__init__()
        assert layer.keys is not None and layer.values is not None  # the prefix pass filled every layer
        self.prefix = (layer.keys, layer.values)  # (1, heads, prefix, head_dim) each
        self.keys, self.values = layer.keys, layer.values
        self.dtype, self.device, self.is_initialized = layer.keys.dtype, layer.keys.device, True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prefix's keys and values broadcast over the batch, then the batch's own; nothing is stored."""
        rows = key_states.shape[0]
        prefix_keys, prefix_values = self.prefix
        keys = torch.cat([prefix_keys.expand(rows, -1, -1, -1), key_states], dim=-2)
        values = torch.cat([prefix_values.expand(rows, -1, -1, -1), value_states], dim=-2)
        return keys, values


class PrefixReuse:
    """Scores the shared-prefix groups of a `SharedPrefixLM`'s rows; hands the other rows back.

    `status` is recorded with every evaluation: "on", "off" (`--no-prefix-reuse`), or
    "unavailable: <why>" when the probe found the model's cache not reusable (plain path used).
    """

    def __init__(self, lm: PrefixEngine, enabled: bool = True) -> None:
        self.lm = lm
        self.status = "on" if enabled else "off"
        self._probed = False

    def score(self, rows: dict[Row, list[Key]]) -> dict[Row, list[Key]]:
        """Compute every group's answers into the LM's store; return the rows left for the plain path."""
        if self.status != "on" or not rows:
            return rows
        rooms = {row: len(row) - max(len(key[1]) for key in keys) for row, keys in rows.items()}
        groups, rest = find_groups(rooms)
        if groups and not self._probed:
            self._probed = True
            reason = self._probe()
            if reason is not None:
                self.status = f"unavailable: {reason}"
                return rows
        for group in groups:
            self._score_group(group, rows)
        return {row: rows[row] for row in rest}

    # one group ------------------------------------------------------------------------------------
    def _score_group(self, group: PrefixGroup, rows: dict[Row, list[Key]]) -> None:
        """Answer every request of the group's rows, for every variant, into the engine's store and journal."""
        lm = self.lm
        requests = {row[group.length :]: rows[row] for row in group.rows}
        scored: dict[int | None, dict[Key, Answer]] = {}
        for variant, suffixes, final in self._finals(group, lm.layers):
            for key, answer in lm.answers_of(final, suffixes, requests).items():
                lm.store.setdefault(key, {})[variant] = answer
                scored.setdefault(variant, {})[key] = answer
        if lm.journal is not None and scored:  # durable once every variant of the group is scored
            lm.journal.append(scored)

    @torch.inference_mode()
    def _finals(self, group: PrefixGroup, layers: list[int]) -> Iterator[tuple[int | None, list[Row], torch.Tensor]]:
        """(variant, suffix batch, final hidden states of the batch) for the baseline and each of `layers`.

        The baseline's prefix pass runs once per group; each variant's once per wave (the suffix rows
        whose recorded states fit the engine's memory budget at once). A suffix batch holds as many
        tokens as a batch of whole inputs would (more rows, as suffixes are shorter): the prefix's keys
        and values are read, never copied per row, so its memory is that of a plain batch.
        """
        lm = self.lm
        prefix_ids = torch.tensor([group.prefix], device=lm.device)
        with capture_block_states(lm.stack, image_only_blocks(lm.stack)) as states:
            out = self._forward(prefix_ids, None)
        base_cache = out.cache
        prefix_states = {layer: states[layer] for layer in layers}
        del states
        suffixes = sorted((row[group.length :] for row in group.rows), key=lambda s: (-len(s), s))
        longest = max(group.rows, key=len)
        per_batch = lm.rows_per_batch(longest) * max(1, len(longest) // len(suffixes[0]))
        for wave in lm.memory_chunks(suffixes):
            batches = [wave[i : i + per_batch] for i in range(0, len(wave), per_batch)]
            recorded = []
            for batch in batches:
                ids = _padded(batch, lm)
                with capture_block_states(lm.stack, image_only_blocks(lm.stack)) as states:
                    final = self._forward(ids, _for_batch(base_cache, len(batch))).last_hidden_state
                recorded.append((ids, {layer: states[layer] for layer in layers}))
                del states
                yield None, batch, final
            for layer in layers:
                with removed_blocks(lm.stack, list(range(layer))) as shrunk:
                    cache = self._replayed(shrunk, prefix_ids, prefix_states[layer], None).cache
                    for batch, (ids, kept) in zip(batches, recorded, strict=True):
                        output = self._replayed(shrunk, ids, kept[layer], _for_batch(cache, len(batch)))
                        yield layer, batch, output.last_hidden_state

    def _replayed(
        self, shrunk: LayerStack, ids: torch.Tensor, x_layer: torch.Tensor, cache: Cache | None
    ) -> CachedPass:
        """A cached pass with the shrunk stack's first block (block l) replaying the recorded x^l."""
        block = shrunk.blocks[0]
        shrunk.blocks[0] = _CachedReplay(x_layer, self.lm.block_arity, like=block)
        try:
            return self._forward(ids, cache)
        finally:
            shrunk.blocks[0] = block

    def _forward(self, ids: torch.Tensor, cache: Cache | None) -> CachedPass:
        """The model without its head, on `ids` after the tokens `cache` holds (None: from the start)."""
        root = self.lm.stack.root  # the model without its head
        out = root(input_ids=ids, use_cache=True, **{cache_keyword(root): cache})
        return CachedPass(out.last_hidden_state, filled_cache(out))

    # the probe ------------------------------------------------------------------------------------
    def _probe(self) -> str | None:
        """Why prefix reuse cannot be trusted on this model (None: it matches the plain path).

        Checked for the baseline and the first and last selected variants (the replayed block first
        in the stack, and as few blocks after it as are run): a cache that is not reused correctly shows
        in any of them. A share with no removed block (`--shard 0/8` of a few variants) checks the baseline.
        """
        lm = self.lm
        layers = sorted({lm.layers[0], lm.layers[-1]}) if lm.layers else []  # a share of the baseline alone
        try:
            ids = _probe_ids(lm.tokenizer)
            rows = (ids, ids[:_PROBE_PREFIX] + ids[: _PROBE_LENGTH - _PROBE_PREFIX])
            full = torch.tensor(list(rows), device=lm.device)
            with torch.inference_mode():
                recorded, final = lm.baseline_pass(full)
                plain: dict[int | None, torch.Tensor] = {
                    None: final,
                    **{layer: lm.final_without(layer, full, recorded[layer]) for layer in layers},
                }
            reused: dict[int | None, list[torch.Tensor]] = {}
            for variant, _batch, got in self._finals(PrefixGroup(tuple(sorted(rows)), _PROBE_PREFIX), layers):
                reused.setdefault(variant, []).append(got)
        except Exception as exc:  # a model whose blocks or cache do not take a prefilled cache
            return f"its key/value cache cannot be reused ({type(exc).__name__}: {exc})"
        order = [rows.index(row) for row in sorted(rows)]
        tolerance = 1e-4 if next(lm.model.parameters()).dtype in (torch.float32, torch.float64) else 5e-2
        for variant, want in plain.items():
            got = torch.cat(reused[variant])
            expected = want[order, _PROBE_PREFIX:]
            if got.shape != expected.shape:
                return f"a reused prefix gives final states of shape {tuple(got.shape)}, not {tuple(expected.shape)}"
            difference = float((_logprobs(lm, got) - _logprobs(lm, expected)).abs().max())
            if not difference <= tolerance:
                label = "the baseline" if variant is None else f"block {variant} removed"
                return (
                    f"with a reused prefix, {label} gives log-probabilities {difference:.1e} away from the plain pass"
                )
        return None


def _logprobs(lm: PrefixEngine, final: torch.Tensor) -> torch.Tensor:
    """The engine's fp32 log-probabilities of `final`, outside autograd."""
    with torch.inference_mode():
        return lm.logprobs(final)


def _probe_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """The probe's token ids: `_PROBE_TEXT` tokenized, repeated as needed, cut to `_PROBE_LENGTH`."""
    ids: list[int] = []
    while len(ids) < _PROBE_LENGTH:
        ids += tokenizer(_PROBE_TEXT)["input_ids"]
    return tuple(ids[:_PROBE_LENGTH])


def _padded(batch: list[Row], lm: PrefixEngine) -> torch.Tensor:
    """The rows right-padded to the longest (rows are sorted longest first), on the engine's device."""
    width = len(batch[0])
    pad = lm.tokenizer.pad_token_id or 0
    return torch.tensor([list(row) + [pad] * (width - len(row)) for row in batch], device=lm.device)


def _for_batch(cache: Cache, rows: int) -> Cache:
    """The one-row prefix cache, for a batch of `rows` suffixes; the prefix's own cache stays as it is.

    A cache of plain full-attention layers is shared read-only: each layer hands its attention the
    prefix's keys/values broadcast over the batch, joined with the suffix's, and keeps nothing, so no
    copy of the prefix is made or held per batch. Other caches (sliding windows, …) are copied and
    repeated over the batch, and the model updates the copy as it always does.
    """
    layers = getattr(cache, "layers", None)
    if type(cache) is DynamicCache and layers and all(type(layer) is DynamicLayer for layer in layers):
        shared = DynamicCache()
        shared.layers = [_ReadOnlyLayer(layer) for layer in layers]
        return shared
    copied = copy.deepcopy(cache)
    if rows > 1:
        copied.batch_repeat_interleave(rows)
    return copied
