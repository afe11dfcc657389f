"""The shared-prefix engine: every "block l removed" variant of a batch from one baseline pass.

With block l removed, blocks 0 … l-1 see exactly the inputs they see in the baseline, so their work
need not be redone. Per batch of requests, the baseline pass records x^l (the input of each selected
block l); the variant "block l removed" then starts from that recorded x^l and runs only blocks
l+1 … L-1 and the head. Total cost ≈ (L+2)/2 forward passes instead of L+1.

Only the model side changes: `SharedPrefixLM` is an lm-eval `HFLM` whose `_loglikelihood_tokens` fills
a store of (log-likelihood, is-greedy) for every variant at once; lm-eval is then run once per variant,
as in the simple engine, and computes metrics and stderrs itself from the stored answers. The LM head
and log-softmax run only at the positions a request scores, never over sequence × vocabulary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from lm_eval.models.huggingface import HFLM
from torch import nn

from layerprobe.core import DEFAULT_STATE_BYTES
from layerprobe.evaluate.harness import HarnessScorer
from layerprobe.evaluate.journal import Answer, AnswerJournal, Key, Store
from layerprobe.evaluate.lm_eval_globals import quiet_lm_eval
from layerprobe.evaluate.prefix_cache import PrefixReuse, Row
from layerprobe.evaluate.replay import Replay, head_logits, output_arity, verify_head
from layerprobe.evaluate.tasks import is_generation_task
from layerprobe.model import (
    Ablation,
    LayerStack,
    Remover,
    capture_block_states,
    image_only_blocks,
    module_device,
    removed_blocks,
    zeroed_sublayers,
)
from layerprobe.results import BASELINE, Evaluation

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from layerprobe.evaluate.tasks import TaskSet
    from layerprobe.model import LoadedModel

# lm-eval's loglikelihood request: ((context, continuation) as text, or None; their token ids).
Request = tuple[tuple[str, str] | None, list[int], list[int]]
# A forward pre-hook with kwargs: (module, args, kwargs) → the (args, kwargs) the module runs with.
Arguments = tuple[tuple[object, ...], dict[str, object]]
PreHook = Callable[[nn.Module, tuple[object, ...], dict[str, object]], Arguments]


class SharedPrefixLM(HFLM):
    """An HFLM that answers loglikelihood requests for the baseline and every selected variant at once.

    Set `active` to the removed block's index (None: the baseline) before each lm-eval evaluation;
    requests seen before are answered from the store, new ones computed for all variants together.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        stack: LayerStack,
        layers: list[int],
        batch_size: int | str = 8,
        state_bytes: int = DEFAULT_STATE_BYTES,  # recorded block inputs held at once (--max-state-memory)
        remover: Remover | None = None,
        prefix_reuse: bool = True,
    ) -> None:
        with quiet_lm_eval():
            super().__init__(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
        self.stack, self.layers, self.state_bytes = stack, sorted(layers), state_bytes
        self.remover = remover or Remover(stack)
        self.active: int | None = BASELINE
        self.store: Store = {}
        self._rows_per_batch: int | None = None
        self._detected_at = 0  # input length the auto batch size was detected for
        self.block_arity: int | None = None  # how a block returns its states (`replay.output_arity`)
        self._arity_known = False  # None is a valid arity (a bare tensor), so it cannot mean "not probed"
        # Few-shot contexts computed once (prefix_cache.py). Its replay knows "one block removed" only, so
        # sublayer (--unit) and span (--span) variants take the plain path, which handles them.
        plain_blocks = self.remover.ablation == Ablation()
        self.prefixes = PrefixReuse(self, prefix_reuse and plain_blocks)
        self.journal: AnswerJournal | None = None  # every scored batch is also saved there (`keep_answers`)

    # lm-eval entry point ---------------------------------------------------------------------------
    def _loglikelihood_tokens(
        self, requests: list[Request], disable_tqdm: bool = False, override_bs: int | None = None
    ) -> list[Answer]:
        # A sequential run narrows `layers` as variants stop: a request stored for fewer variants is recomputed.
        missing = list(dict.fromkeys(_key(r) for r in requests if self.active not in self.store.get(_key(r), {})))
        if missing:
            self._compute(missing)
        return [self.store[_key(r)][self.active] for r in requests]

    # the work --------------------------------------------------------------------------------------
    def _compute(self, keys: list[Key]) -> None:
        """Score `keys` for every variant. Requests sharing an input (one-token answers) share a row."""
        rows: dict[Row, list[Key]] = {}
        for context, continuation in keys:
            inp = (context + continuation)[-(self.max_length + 1) :][:-1]
            rows.setdefault(inp, []).append((context, continuation))
        rows = self.prefixes.score(rows)  # rows sharing a long prefix are scored there; the rest here
        if not rows:
            return
        ordered = sorted(rows, key=lambda inp: (-len(inp), inp))  # longest first: least padding
        per_batch = self.rows_per_batch(ordered[0])
        for start in range(0, len(ordered), per_batch):
            batch = ordered[start : start + per_batch]
            for chunk in self.memory_chunks(batch):
                self._score_chunk(chunk, {inp: rows[inp] for inp in chunk})

    def rows_per_batch(self, longest: Row) -> int:
        """Rows per batch; with "auto", lm-eval's detection at the longest input seen so far.

        Detecting without requests would probe at the model's whole context (40K tokens for Qwen3) and
        settle on a batch of one or two; the longest real input is what has to fit.
        """
        if self.batch_size != "auto":
            return max(1, int(self.batch_size))
        if self._rows_per_batch is None or len(longest) > self._detected_at:
            probe = [(None, list(longest), [self.tokenizer.eos_token_id or 0])]
            self._rows_per_batch = max(1, int(self._detect_batch_size(probe, 0)))
            self._detected_at = len(longest)
        return self._rows_per_batch

    def memory_chunks(self, batch: list[Row]) -> Iterator[list[Row]]:
        """Split a batch so the recorded inputs of all selected blocks fit the memory budget."""
        hidden = getattr(self.model.config, "hidden_size", None) or self.model.get_input_embeddings().embedding_dim
        # States have the embedding's dtype (quantized linear weights are packed bytes: not the states' size).
        itemsize = self.model.get_input_embeddings().weight.element_size()
        # The capture hooks hold every block's input (L+1 states) until the baseline pass returns.
        per_row = (self.stack.num_layers + 1) * len(batch[0]) * hidden * itemsize
        rows = max(1, self.state_bytes // per_row)
        for start in range(0, len(batch), rows):
            yield batch[start : start + rows]

    @torch.inference_mode()
    def _score_chunk(self, chunk: list[Row], requests: dict[Row, list[Key]]) -> None:
        """Score a chunk's requests for the baseline and every variant: one baseline pass, one replay each."""
        width = len(chunk[0])
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.tensor([list(inp) + [pad] * (width - len(inp)) for inp in chunk], device=self.device)
        wanted = _positions(chunk, requests)
        plan = _Gather.of(chunk, requests, wanted, self.device)  # the same for every variant: built once
        recorded, final = self.baseline_pass(ids)
        answers: dict[int | None, dict[Key, Answer]] = {BASELINE: self._head_answers(final, wanted, plan)}
        for layer in self.layers:
            answers[layer] = self._head_answers(self.final_without(layer, ids, recorded[layer]), wanted, plan)
        for variant, scored in answers.items():
            for key, answer in scored.items():
                self.store.setdefault(key, {})[variant] = answer
        if self.journal is not None:
            self.journal.append(answers)

    def baseline_pass(self, ids: torch.Tensor) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
        """Run all blocks once, keeping the input of each selected block and the normed final states."""
        with capture_block_states(self.stack, image_only_blocks(self.stack)) as states:
            final = self._base_forward(ids)
        # x^l is the input of block l; nothing beyond the selected blocks is kept.
        if not self._arity_known:
            self.block_arity = output_arity(self.stack, ids, self._base_forward)
            self._arity_known = True
        return {layer: states[layer] for layer in self.layers}, final

    def final_without(self, layer: int, ids: torch.Tensor, x_layer: torch.Tensor) -> torch.Tensor:
        """Final hidden states with unit `layer` removed, starting from the recorded x^layer.

        Blocks before `layer` are unchanged by any ablation, so they are taken out and x^layer stands in
        for their output. A span [l, l+n) (n = 1: one block) makes x^l the input of block l+n: the last
        removed block is replaced by a replay of x^l. A sublayer keeps block l, fed x^l, with that
        sublayer's output zeroed (`model.zeroed_sublayers`).
        """
        ablation = self.remover.ablation
        last = layer + ablation.span - 1  # the last removed block (block `layer` itself for a sublayer)
        # Under --device-map the recorded x^layer stays where it was made; only the copy replayed now moves,
        # to where the next block that runs computes (accelerate's hooks would move it too; this also covers
        # no hooks).
        first_run = layer if ablation.is_sublayer else last + 1
        target = module_device(self.stack.blocks[min(first_run, self.stack.num_layers - 1)])
        if target is not None and x_layer.device != target:
            x_layer = x_layer.to(target)
        if ablation.is_sublayer:
            assert self.remover.sublayers is not None  # traced by `Remover.for_model` for every sublayer unit
            with removed_blocks(self.stack, list(range(layer))) as shrunk:
                handle = shrunk.blocks[0].register_forward_pre_hook(_feed(x_layer), with_kwargs=True)
                try:
                    with zeroed_sublayers([shrunk.blocks[0]], [self.remover.sublayers[layer]], ablation.unit):
                        return self._base_forward(ids)
                finally:
                    handle.remove()
        with removed_blocks(self.stack, list(range(last))) as shrunk:
            block = shrunk.blocks[0]  # block `last`, now first (for last = 0 the list is the model's own)
            shrunk.blocks[0] = Replay(x_layer, self.block_arity, like=block)
            try:
                return self._base_forward(ids)
            finally:
                shrunk.blocks[0] = block

    def answers_of(self, final: torch.Tensor, chunk: list[Row], requests: dict[Row, list[Key]]) -> dict[Key, Answer]:
        """The answers of a chunk's requests from its final hidden states (prefix_cache.py scores suffixes so)."""
        wanted = _positions(chunk, requests)
        return self._head_answers(final, wanted, _Gather.of(chunk, requests, wanted, self.device))

    def logprobs(self, final: torch.Tensor) -> torch.Tensor:
        """fp32 log-probabilities of the head at every position of `final` (the prefix probe compares them)."""
        return nn.functional.log_softmax(head_logits(self.model, final).float(), dim=-1)

    def _base_forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The final hidden states of the model as it stands (blocks removed or replayed included)."""
        return self.stack.root(input_ids=ids, use_cache=False).last_hidden_state  # the model without its head

    def _head_answers(self, final: torch.Tensor, wanted: torch.Tensor, plan: _Gather) -> dict[Key, Answer]:
        """Log-likelihood and greedy match of every request, from the head at the wanted positions only.

        One gather for all requests of the chunk (no per-request tensors, two host transfers in all).
        """
        rows, cols = wanted[:, 0].to(final.device), wanted[:, 1].to(final.device)
        hidden = final[rows, cols]
        head_device = module_device(self.model.get_output_embeddings())  # final norm and head may differ
        if head_device is not None and hidden.device != head_device:
            hidden = hidden.to(head_device)
        logprobs = nn.functional.log_softmax(head_logits(self.model, hidden), dim=-1, dtype=self.softmax_dtype)
        index, target, real = (t.to(logprobs.device) for t in (plan.index, plan.target, plan.real))
        totals = logprobs[index, target].masked_fill(~real, 0).sum(dim=-1)  # (requests,)
        greedy = ((logprobs.argmax(dim=-1)[index] == target) | ~real).all(dim=-1)
        return {
            key: (total, bool(hit)) for key, total, hit in zip(plan.keys, totals.tolist(), greedy.tolist(), strict=True)
        }


@dataclass(frozen=True)
class _Gather:
    """Where each request of a chunk reads its continuation's log-probabilities, as padded tensors.

    `index[i, k]` is the row, among the chunk's wanted positions, of the logits that predict token k of
    request i's continuation, `target[i, k]` that token; `real[i, k]` is False on padding.
    """

    keys: list[Key]
    index: torch.Tensor  # (requests, longest continuation)
    target: torch.Tensor
    real: torch.Tensor

    @classmethod
    def of(
        cls, chunk: list[Row], requests: dict[Row, list[Key]], wanted: torch.Tensor, device: torch.device
    ) -> _Gather:
        """The plan for a chunk, given its wanted positions (`_positions`), on `device`."""
        where = {(r, c): i for i, (r, c) in enumerate(wanted.tolist())}
        keys: list[Key] = []
        index: list[list[int]] = []
        target: list[list[int]] = []
        for row, inp in enumerate(chunk):
            for key in requests[inp]:
                continuation = key[1]
                start = len(inp) - len(continuation)
                keys.append(key)
                index.append([where[(row, start + k)] for k in range(len(continuation))])
                target.append(list(continuation))
        width = max(len(t) for t in target)
        real = torch.tensor([[k < len(t) for k in range(width)] for t in target], dtype=torch.bool)
        index_t = torch.tensor([i + [0] * (width - len(i)) for i in index], dtype=torch.long)
        target_t = torch.tensor([t + [0] * (width - len(t)) for t in target], dtype=torch.long)
        return cls(keys, index_t.to(device), target_t.to(device), real.to(device))


def _positions(chunk: list[Row], requests: dict[Row, list[Key]]) -> torch.Tensor:
    """(row, column) of every position any request of the chunk scores, each once: (N, 2)."""
    wanted: set[tuple[int, int]] = set()
    for row, inp in enumerate(chunk):
        longest = max(len(key[1]) for key in requests[inp])
        wanted.update((row, len(inp) - longest + k) for k in range(longest))
    return torch.tensor(sorted(wanted), dtype=torch.long)


def _feed(states: torch.Tensor) -> PreHook:
    """A forward pre-hook that makes a block read `states` as its hidden-state input."""

    def hook(_module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> Arguments:
        if args:
            return (states, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": states}

    return hook


def _key(request: Request) -> Key:
    """A loglikelihood request's store key: its context and continuation token ids (lm-eval's 2nd and 3rd)."""
    return tuple(request[1]), tuple(request[2])


class SharedPrefixScorer(HarnessScorer):
    """prune-drop's scorer for the shared-prefix engine: the model is never changed, variants are looked up."""

    engine = "shared"

    def make_lm(self) -> SharedPrefixLM:
        return SharedPrefixLM(
            self.loaded.model,
            self.loaded.tokenizer,
            self.stack,
            self.layers,
            self.spec.batch_size,
            remover=self.remover,
            prefix_reuse=self.spec.prefix_reuse,
            state_bytes=self.spec.max_state_bytes,
        )

    def score(self, task: str) -> Evaluation:
        return replace(super().score(task), prefix_reuse=self.lm.prefixes.status)

    def restrict(self, layers: list[int]) -> None:
        self.lm.layers = sorted(layers)

    def reuse_status(self) -> str | None:
        return self.lm.prefixes.status

    def keep_answers(self, path: Path, fingerprint: dict[str, object], resume: bool) -> AnswerJournal:
        """Save every scored batch to `path` (and, resuming, start from the answers already there)."""
        journal, store = AnswerJournal.open(path, fingerprint, self.layers, resume)
        self.lm.store.update(store)
        self.lm.journal = journal
        return journal

    @contextlib.contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        self.lm.active = layer
        try:
            yield
        finally:
            self.lm.active = BASELINE


def unsupported_reason(loaded: LoadedModel, task_sets: dict[str, TaskSet]) -> str | None:
    """Why the shared engine cannot score this run (generation tasks, an unusual head), or None."""
    for task, task_set in task_sets.items():
        if is_generation_task(task_set, task):
            return f"task {task} generates text (only loglikelihood-type tasks share prefixes)"
    return verify_head(loaded.model, loaded.tokenizer)
