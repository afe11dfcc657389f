"""`Monitor`: layer effectiveness measured while a model trains, on a fixed calibration set.

The calibration windows are packed once, when the monitor is made: the first `tokens` positions of the
corpus, in the corpus's own order (no sampling, so the set is the same on every run and at every step, and
`layerprobe angular --tokens N --seq-len S --dataset D` on a saved checkpoint measures the very same
windows). Each `step(n)` measures the live model in place (`model.untouched`: eval mode, random states
forked, everything given back), returns the scalars of `scalars.py` and, with `out`, writes `out/step-n/`
(angular.json, depth.json) that `track` and `report` read. The run's `model` block records the revision
`step-n`, which is how `track` orders the steps.

A failure inside a measurement is one warning line (the `layerprobe` logger), never an exception into the
training loop. Under DDP (`accelerate launch`, torchrun: a torch.distributed process group is up) the angular
measurement is shared across the ranks as the `angular` command shares it: every rank runs every
world-size-th batch of the calibration windows and the totals are gathered, so each rank holds the whole,
one-process result; rank 0 alone then measures depth, writes `step-n/` and returns the scalars to log,
the others return nothing. So every rank must call `step(n)` at the same steps (the Trainer callback
does); a process of a launch without a process group leaves the measurement to rank 0.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from layerprobe.api import corpus_spec, without_fingerprint
from layerprobe.core import MONITOR_TOKENS, AngularSpec, CorpusSpec, DepthSpec, ModelSpec, check_output_dir
from layerprobe.data import Window, pack_corpus
from layerprobe.integrations.scalars import block_grad_norms, scalars
from layerprobe.measure import run_angular, run_depth
from layerprobe.model import World, find_layers, live_model, live_name, untouched
from layerprobe.results import AngularResult, DepthResult, RunDir, write_json

log = logging.getLogger("layerprobe")


def process_rank() -> int:
    """This process's rank in a torchrun / accelerate launch (0 when not launched), from the environment."""
    return int(os.environ.get("RANK", "0") or 0)


def training_world() -> World:
    """The ranks that measure together: the training run's process group when one is up, else this process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return World(dist.get_rank(), dist.get_world_size())
    return World()


class Monitor:
    """Measure a live model during training: `monitor.step(n)` at the steps you choose (see the module docstring).

    Args:
        model: the model being trained (a transformers model; DDP's `.module`, not the wrapper).
        tokenizer: its tokenizer.
        corpus: a dataset id, a file, `builtin:pydoc`, or a list of strings.
        out: where `step-n/` run directories go (None: nothing written).
        tokens, seq_len, positions, batch_size, dataset_config, split, text_field: as `layerprobe angular`.
        depth: also measure residual growth (`depth.json`); one more pass over the windows.
        layers_path: the block stack, if it cannot be found by itself (`--layers-path`).

    Example:
        >>> monitor = lp.Monitor(model, tokenizer, corpus="builtin:pydoc", out="runs/x")
        >>> for step, batch in enumerate(loader, 1):
        ...     loss = model(**batch).loss; loss.backward()
        ...     monitor.record_gradients()  # optional: before the optimizer step
        ...     optimizer.step(); optimizer.zero_grad()
        ...     if step % 500 == 0:
        ...         print(monitor.step(step))
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        corpus: Any = CorpusSpec.dataset,
        out: str | os.PathLike[str] | None = None,
        *,
        tokens: int = MONITOR_TOKENS,
        seq_len: int = CorpusSpec.seq_len,
        positions: str = AngularSpec.positions,
        batch_size: int = AngularSpec.batch_size,
        dataset_config: str | None = None,
        split: str = CorpusSpec.split,
        text_field: str = CorpusSpec.text_field,
        depth: bool = True,
        layers_path: str | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.out = Path(out) if out is not None else None
        self.depth = depth
        self.rank = process_rank()
        self.corpus = corpus_spec(
            corpus,
            tokens=tokens,
            seq_len=seq_len,
            dataset_config=dataset_config,
            split=split,
            text_field=text_field,
        )
        self.spec = AngularSpec(
            ModelSpec(live_name(model), layers_path=layers_path), self.corpus, positions, batch_size
        )
        if self.out is not None:
            check_output_dir(self.out)
        self.stack = find_layers(live_model(model, tokenizer, self.spec.model).model, layers_path)
        launched = int(os.environ.get("WORLD_SIZE", "1") or 1) > 1  # every rank of a launch may share the work
        self.windows: list[Window] = self._calibration_windows() if self.rank == 0 or launched else []
        self.world = World()  # the ranks of the last measurement
        self.gradients: list[float] | None = None
        self.last: tuple[AngularResult, DepthResult | None] | None = None

    def _calibration_windows(self) -> list[Window]:
        loaded = live_model(self.model, self.tokenizer, self.spec.model)
        seq_len = min(self.corpus.seq_len, loaded.context_length or self.corpus.seq_len)
        return pack_corpus(self.tokenizer, self.corpus, seq_len)

    def record_gradients(self) -> list[float] | None:
        """Each block's gradient norm from `.grad` as it is now (call between backward and optimizer step).

        Kept for the next `step()`, which logs and clears it; no second backward is run.
        """
        if not self._main():
            return None
        try:
            self.gradients = block_grad_norms(self.stack)
        except Exception as exc:  # noqa: BLE001 - a monitor never stops training
            log.warning("layerprobe: gradient norms not recorded: %s", one_line(exc))
            self.gradients = None
        return self.gradients

    def step(self, step: int) -> dict[str, float]:
        """Measure now, as training step `step`; the logged scalars (empty on other ranks or after a failure).

        Under DDP every rank calls it at the same step: they share the angular measurement (module docstring).
        """
        world = self.world = training_world()
        if world.size == 1 and self.rank != 0:  # launched without a process group: rank 0 measures alone
            return {}
        grads, self.gradients = self.gradients, None
        try:
            if not self.windows:  # a rank of a process group made by hand, without WORLD_SIZE
                self.windows = self._calibration_windows()
            angular, depth = self.measure(step, world)
            if not world.is_main:
                return {}
            self.last = (angular, depth)
            if self.out is not None:
                self.write(step, angular, depth)
            return scalars(angular, depth, grads)
        except Exception as exc:  # noqa: BLE001 - a failed measurement is one warning line, never a crash
            log.warning("layerprobe: measurement at step %d failed: %s", step, one_line(exc))
            return {}

    def _main(self) -> bool:
        """Whether this process logs and writes: rank 0 of the process group, or of the launch without one."""
        world = training_world()
        return world.is_main if world.size > 1 else self.rank == 0

    def measure(self, step: int, world: World | None = None) -> tuple[AngularResult, DepthResult | None]:
        """The angular (and depth) results of the model as it is at `step`, on the calibration windows.

        Angular is shared across the ranks of `world` (default: this process alone); depth is measured by its
        rank 0 alone (None elsewhere).
        """
        world = world or World()
        model_spec = ModelSpec(live_name(self.model), revision=f"step-{step}", layers_path=self.spec.model.layers_path)
        angular_spec = AngularSpec(model_spec, self.corpus, self.spec.positions, self.spec.batch_size)
        with untouched(self.model):
            loaded = live_model(self.model, self.tokenizer, model_spec)
            angular = run_angular(angular_spec, loaded=loaded, world=world, windows=self.windows)
            depth = None
            if self.depth and world.is_main:
                depth_spec = DepthSpec(model_spec, self.corpus, self.spec.positions, self.spec.batch_size)
                depth = without_fingerprint(run_depth(depth_spec, loaded=loaded, windows=self.windows))
        return without_fingerprint(angular), depth

    def write(self, step: int, angular: AngularResult, depth: DepthResult | None) -> list[Path]:
        """`out/step-<step>/angular.json` (and depth.json); a file already there is kept, with a warning."""
        assert self.out is not None
        run = RunDir(self.out / f"step-{step}")
        written = []
        for path, result in ((run.angular_json, angular), (run.depth_json, depth)):
            if result is None:
                continue
            if path.exists():
                log.warning("layerprobe: %s exists and is kept (not overwritten)", path)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            written.append(write_json(path, result.to_dict()))
        return written


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
