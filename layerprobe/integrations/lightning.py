"""`LayerprobeLightningCallback`: the monitor inside a Lightning `Trainer`, logging through `LightningModule.log`.

Thin on purpose: `Monitor` does the work (monitor.py); this says when. Every `every` optimizer steps it reads
the block gradient norms of the step's own backward (`on_before_optimizer_step`: accumulated over
micro-batches, not yet applied) and measures once the step is taken (`on_train_batch_end`, once per optimizer
step however many micro-batches it took), logging the scalars with `pl_module.log_dict`, so whatever logger
the Trainer has (TensorBoard, CSV, W&B, …) receives them. Under DDP every rank measures (they share the angular
pass) and rank 0 logs and writes, as with the transformers callback.

Lightning is optional: `pip install 'layerprobe[lightning]'` (either `lightning` or `pytorch_lightning`).
"""

from __future__ import annotations

import os
from typing import Any

from layerprobe.core import MONITOR_EVERY, MONITOR_TOKENS, CorpusSpec, LayerprobeError
from layerprobe.integrations.monitor import Monitor

try:
    import lightning.pytorch as pl
except ImportError:
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise LayerprobeError(
            "LayerprobeLightningCallback needs Lightning, which is not installed.",
            hint="pip install 'layerprobe[lightning]'",
        ) from None


class LayerprobeLightningCallback(pl.Callback):
    """Measure layer effectiveness while a Lightning `Trainer` trains (module docstring).

    Args:
        tokenizer: the model's tokenizer.
        every: measure after every `every` optimizer steps.
        tokens: calibration positions (the first `tokens` of `corpus`, the same at every step).
        corpus: a dataset id, a file, `builtin:pydoc`, or a list of strings.
        out: where `step-N/` run directories go (None: nothing written); `track` and `report` read them.
        model: the attribute of the LightningModule that holds the transformers model (default: the first
            `PreTrainedModel` among its submodules).
        grad: log per-block gradient norms of the measured steps.
        **options: `Monitor`'s other keywords (seq_len, positions, batch_size, depth, layers_path, …).

    Example:
        >>> trainer = pl.Trainer(max_steps=10_000, callbacks=[
        ...     LayerprobeLightningCallback(tokenizer, every=500, corpus="builtin:pydoc", out="runs/x")])
    """

    def __init__(
        self,
        tokenizer: Any,
        every: int = MONITOR_EVERY,
        tokens: int = MONITOR_TOKENS,
        corpus: Any = CorpusSpec.dataset,
        out: str | os.PathLike[str] | None = None,
        *,
        model: str | None = None,
        grad: bool = True,
        **options: Any,
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise LayerprobeError(f"every must be a positive number of steps, got {every!r}.")
        self.tokenizer, self.every, self.tokens, self.corpus, self.out = tokenizer, every, tokens, corpus, out
        self.model_attribute, self.grad, self.options = model, grad, options
        self.monitor: Monitor | None = None
        self.measured = 0  # the last optimizer step measured (a step's micro-batches all end in on_train_batch_end)
        self.history: list[tuple[int, dict[str, float]]] = []

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is None:
            model = _transformers_model(pl_module, self.model_attribute)
            self.monitor = Monitor(model, self.tokenizer, self.corpus, self.out, tokens=self.tokens, **self.options)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.grad and self.monitor is not None and (trainer.global_step + 1) % self.every == 0:
            self.monitor.record_gradients()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.monitor is None or step == 0 or step % self.every or step == self.measured:
            return
        self.measured = step
        values = self.monitor.step(step)
        if values:
            self.history.append((step, values))
            pl_module.log_dict(values, on_step=True, on_epoch=False, rank_zero_only=True)


def _transformers_model(pl_module: Any, attribute: str | None) -> Any:
    """The transformers model inside the LightningModule: `attribute`, else the first PreTrainedModel found."""
    from transformers import PreTrainedModel

    if attribute is not None:
        found = getattr(pl_module, attribute, None)
        if not isinstance(found, PreTrainedModel):
            raise LayerprobeError(
                f"The LightningModule has no transformers model at .{attribute}.",
                hint="Pass model= the attribute that holds the PreTrainedModel (e.g. model='model').",
            )
        return found
    for module in pl_module.modules():
        if isinstance(module, PreTrainedModel):
            return module
    raise LayerprobeError(
        "The LightningModule holds no transformers model (PreTrainedModel) to measure.",
        hint="Keep the model as an attribute of the LightningModule (self.model = AutoModelForCausalLM...).",
    )
