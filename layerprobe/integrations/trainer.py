"""`LayerprobeCallback`: the monitor inside `transformers.Trainer`, logging through the Trainer's own logging.

Every `every` optimizer steps (and at each checkpoint save, with `on_save=True`) it measures the model on the
monitor's fixed calibration windows (`monitor.py`) and hands the scalars (`layerprobe/lazy_blocks`,
`layerprobe/adjacent_d/block_7`, …) to the Trainer's log of that step, so whatever `report_to` names
(TensorBoard, W&B, MLflow, …) receives them with no code of ours per dashboard.

Per-block gradient norms come from the training step's own backward: at `on_pre_optimizer_step` of a
measured step `.grad` holds the gradient the optimizer is about to apply (accumulated over micro-batches,
averaged across DDP ranks, clipped to `max_grad_norm`; clipping scales every block alike). No second
backward is run.

Under DDP (`accelerate launch`) every rank holds a monitor and measures at the same steps, sharing the angular
pass as the `angular` command shares it; rank 0 alone logs and writes `out/step-N/`. Every rank asks for a
log at a measured step, since the Trainer's log gathers the loss across ranks: asked on rank 0 alone, the
ranks would fall out of step.

How the scalars reach the dashboards: the Trainer puts the reporting callbacks before the user's, and a
step's `logs` dict is handed to each in turn (`on_log`). So when the Trainer builds its callback handler
(`on_init_end`), this callback moves itself to the front of the handler's list, adds its scalars to the
`logs` dict in `on_log`, and asks for a log at each measured step (`control.should_log`). If the handler
cannot be found (a Trainer that calls callbacks differently), the scalars still reach `state.log_history`
and `out/`, and one warning says that dashboards miss them.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

from transformers import TrainerCallback

from layerprobe.core import MONITOR_EVERY, MONITOR_TOKENS, CorpusSpec, LayerprobeError
from layerprobe.integrations.monitor import Monitor, log


class LayerprobeCallback(TrainerCallback):
    """Measure layer effectiveness while `transformers.Trainer` trains (module docstring).

    Args:
        every: measure after every `every` optimizer steps.
        tokens: calibration positions (the first `tokens` of `corpus`, the same at every step).
        corpus: a dataset id, a file, `builtin:pydoc`, or a list of strings.
        out: where `step-N/` run directories go (None: nothing written); `track` and `report` read them.
        on_save: also measure at each checkpoint save (`save_strategy="steps"`).
        grad: log per-block gradient norms of the measured steps.
        tokenizer: the model's tokenizer (default: the Trainer's `processing_class`).
        **options: `Monitor`'s other keywords (seq_len, positions, batch_size, depth, layers_path, …).

    Example:
        >>> trainer = Trainer(model=model, args=args, train_dataset=data,
        ...                   callbacks=[LayerprobeCallback(every=500, corpus="builtin:pydoc", out="runs/x")])
    """

    def __init__(
        self,
        every: int = MONITOR_EVERY,
        tokens: int = MONITOR_TOKENS,
        corpus: Any = CorpusSpec.dataset,
        out: str | os.PathLike[str] | None = None,
        *,
        on_save: bool = False,
        grad: bool = True,
        tokenizer: Any = None,
        **options: Any,
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise LayerprobeError(f"every must be a positive number of steps, got {every!r}.")
        self.every, self.tokens, self.corpus, self.out = every, tokens, corpus, out
        self.on_save_too, self.grad, self.options, self.tokenizer = on_save, grad, options, tokenizer
        self.monitor: Monitor | None = None
        self.pending: dict[str, float] = {}
        self.history: list[tuple[int, dict[str, float]]] = []
        self.moved = False

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.moved = _move_to_front(self)
        if not self.moved:
            log.warning("layerprobe: the Trainer's callback list was not found; dashboards will miss the scalars")

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.monitor is None:  # on every rank: under DDP the ranks share the measurement
            tokenizer = self.tokenizer or kwargs.get("processing_class") or kwargs.get("tokenizer")
            self.monitor = Monitor(model, tokenizer, self.corpus, self.out, tokens=self.tokens, **self.options)

    def due(self, args: Any, step: int) -> bool:
        """Whether optimizer step `step` (counted from 1) is measured."""
        if step % self.every == 0:
            return True
        saves = self.on_save_too and str(getattr(args, "save_strategy", "")).lower().endswith("steps")
        return bool(saves and args.save_steps and step % int(args.save_steps) == 0)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.grad and self.monitor is not None and self.due(args, state.global_step + 1):
            self.monitor.record_gradients()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.monitor is None or not self.due(args, state.global_step):
            return control
        values = self.monitor.step(state.global_step)
        control.should_log = True  # on every rank alike (module docstring); the scalars exist on rank 0 only
        if values:
            self.history.append((state.global_step, values))
            self.pending = values
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if self.pending and logs is not None and "loss" in logs:
            logs.update(self.pending)
            history = state.log_history  # the Trainer filed this log before calling us: file the scalars too
            if history and history[-1].get("step") == state.global_step and "loss" in history[-1]:
                history[-1].update(self.pending)
            self.pending = {}


def _move_to_front(callback: TrainerCallback) -> bool:
    """Put `callback` first in the handler that is calling it now (see the module docstring)."""
    frame: FrameType | None = sys._getframe(2)  # on_init_end ← CallbackHandler.call_event
    for _ in range(4):
        if frame is None:
            return False
        handler = frame.f_locals.get("self")
        callbacks = getattr(handler, "callbacks", None)
        if isinstance(callbacks, list) and any(c is callback for c in callbacks):
            callbacks.remove(callback)
            callbacks.insert(0, callback)
            return True
        frame = frame.f_back
    return False
