"""`heal --method lora | linear+lora`: LoRA adapters on the kept blocks, trained to match the unpruned model.

Teacher and student are one model in memory: per step the teacher is the full model with its adapters
off (and the linear fold undone), the student the same weights with the removed blocks taken out, the
fold applied (linear+lora starts from it) and the adapters on. The loss is KL(teacher ‖ student) over
every next-token prediction (`--loss kl`, the default: it trains on the teacher's whole distribution, not
only the observed token) or the student's NLL (`--loss nll`). peft injects the adapters into the linear
layers of the kept blocks only (`--targets`: module names, or all-linear). After training, each adapted
weight's merged value W + (α/r)·B·A is read out, the adapters are removed again, and the healed model is
those values swapped in (`replaced`): one loaded model still serves original, pruned and healed.

Every `checkpoint_every` steps the adapters, the optimiser, the step and the losses are written
atomically to the state directory; `--resume` continues from there after a kill. Under `accelerate launch`
(parallel.py) every rank trains the same adapters on its share of each step's windows; the main rank alone
writes that state, and every rank reads it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprobe.core import LORA_CHECK_SHARE, LORA_CHECKS, LORA_WARMUP_SHARE, HealSpec, LayerprobeError
from layerprobe.data import Window, batches
from layerprobe.heal.parallel import DataParallel
from layerprobe.model import LayerStack, World, image_only_blocks, removed_blocks, takes_argument
from layerprobe.results import atomic_write

if TYPE_CHECKING:
    import torch
    from torch import nn

_STATE = "lora_state.pt"


@contextlib.contextmanager
def replaced(values: Mapping[torch.nn.Parameter, torch.Tensor]) -> Iterator[None]:
    """Parameters set to the given values in place, their own values put back on exit."""
    import torch

    saved = []
    try:
        with torch.no_grad():
            for parameter, value in values.items():
                saved.append((parameter, parameter.detach().clone()))
                parameter.copy_(value)
        yield
    finally:
        with torch.no_grad():
            for parameter, original in reversed(saved):
                parameter.copy_(original)


def target_modules(stack: LayerStack, removed: Sequence[int], targets: str, prefix: str) -> list[str]:
    """Full names of the linear layers of the kept blocks that `--targets` names (all-linear: every one).

    Blocks that run only with an image (mllama) get none: a text-only pass never calls them, so an adapter
    there would get no gradient (and under a launch DDP refuses parameters that take no part in the loss).
    """
    from torch import nn

    wanted = {t.strip() for t in targets.split(",") if t.strip()}
    left_out = set(removed) | set(image_only_blocks(stack))  # a block a text-only pass skips never trains
    names = []
    for index, block in enumerate(stack.blocks):
        if index in left_out:
            continue
        for name, module in block.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if isinstance(module, nn.Linear) and ("all-linear" in wanted or leaf in wanted or name in wanted):
                names.append(f"{prefix}{stack.path}.{index}.{name}")
    if not names:
        raise LayerprobeError(
            f"--targets {targets!r} names no linear layer of the kept blocks.",
            hint="Use all-linear, or leaf names such as q_proj,v_proj,down_proj.",
        )
    return names


def split_check(windows: list[Window]) -> tuple[list[Window], list[Window]]:
    """The windows LoRA trains on, and its check set: every LORA_CHECK_SHARE-th window (none with one window)."""
    if len(windows) < 2:
        return windows, []
    check = windows[LORA_CHECK_SHARE - 1 :: LORA_CHECK_SHARE] or windows[-1:]
    chosen = {id(w) for w in check}
    return [w for w in windows if id(w) not in chosen], check


def learning_rate_factor(step: int, steps: int) -> float:
    """The share of --lr used at 0-based `step`: a linear warm-up over the first tenth, then a cosine decay."""
    warm = max(1, round(LORA_WARMUP_SHARE * steps))
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def train_lora(
    model: nn.Module,
    stack: LayerStack,
    removed: Sequence[int],
    start: Mapping[torch.nn.Parameter, torch.Tensor],
    windows: list[Window],
    spec: HealSpec,
    device: torch.device | None,
    state_dir: Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
    parallel: DataParallel | None = None,
) -> tuple[dict[torch.nn.Parameter, torch.Tensor], dict[str, Any]]:
    """Train adapters; return every healed parameter's value (the fold's `start` values included) and a record.

    The adapters kept are those with the lowest loss on the check set (calibration windows never trained
    on), scored before the first step (the adapters are zero: the start itself) and LORA_CHECKS times
    during training, so the result is never worse than the start on that set.

    Under a launch (`parallel` over several ranks) each rank takes its round-robin share of every step's
    `--batch-size` windows and of the check set; the ranks' sums are added, so every loss recorded and every
    choice made is the same on all ranks, and only the main rank writes the resumable state.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import Linear as LoraLinear

    parallel = parallel or DataParallel(World())
    share = parallel.world.share
    torch.manual_seed(spec.seed)
    prefix = _prefix(model, stack)
    names = target_modules(stack, removed, spec.targets, prefix)
    config = LoraConfig(r=spec.rank, lora_alpha=2 * spec.rank, lora_dropout=0.0, target_modules=names)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    with warnings.catch_warnings():  # peft asks transformers a deprecated question (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(model, config)
    lora = peft_model.base_model
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(trainable, lr=spec.lr, weight_decay=0.0)
    student, stepped = parallel.prepare(model, optimiser)  # under a launch: DDP, the gradients all-reduced
    train, check = split_check(windows)
    extra = {"use_cache": False} if takes_argument(model, "use_cache") else {}

    def teacher_of(ids: torch.Tensor) -> torch.Tensor:
        """The unpruned model's log-probabilities: adapters off, no fold, every block."""
        with torch.no_grad(), peft_model.disable_adapter():
            return torch.log_softmax(model(input_ids=ids, **extra).logits[:, :-1].float(), -1)

    def window_losses(ids: torch.Tensor, teacher: torch.Tensor, forward: Callable[..., Any]) -> torch.Tensor:
        """Each window's mean loss over its positions; called inside the swap (the pruned, folded student)."""
        student = torch.log_softmax(forward(input_ids=ids, **extra).logits[:, :-1].float(), -1)
        if spec.loss == "kl":
            return (teacher.exp() * (teacher - student)).sum(-1).mean(-1)
        return -student.gather(-1, ids[:, 1:, None]).squeeze(-1).mean(-1)

    def learn(group: list[Window]) -> float:
        """One step's gradients on this rank's share of `group`; the global batch's mean loss (all ranks)."""
        mine = share.of(group)
        weight = parallel.world.size / len(group) if mine else 0.0  # DDP averages: Σ ranks = the global mean
        ids = torch.tensor([w.input_ids for w in mine or group[:1]], device=device)
        teacher = teacher_of(ids)
        with replaced(start), removed_blocks(stack, list(removed)):  # autograd reads the fold inside the swap
            losses_ = window_losses(ids, teacher, student)
            optimiser.zero_grad(set_to_none=True)
            parallel.backward(losses_.sum() * weight)
        return parallel.total(losses_.detach().sum() * (1.0 if mine else 0.0)) / len(group)

    def check_loss() -> float | None:
        """The mean of the check windows' losses, each rank scoring its share (the same value on all ranks)."""
        if not check:
            return None
        found = torch.zeros((), dtype=torch.float64, device=device)
        for group in batches(share.of(check), spec.batch_size):
            ids = torch.tensor([w.input_ids for w in group], device=device)
            teacher = teacher_of(ids)
            with torch.no_grad(), replaced(start), removed_blocks(stack, list(removed)):
                found += window_losses(ids, teacher, model).double().sum()
        return parallel.total(found) / len(check)

    def adapters() -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in peft_model.state_dict().items() if "lora_" in k}

    losses: list[float] = []
    checks: list[list[float]] = []
    step = 0
    best: dict[str, Any] = {}
    state_path = state_dir / _STATE if state_dir is not None else None
    if spec.resume and state_path is not None and state_path.is_file():
        state = torch.load(state_path, weights_only=False, map_location="cpu")  # every rank reads the one file
        peft_model.load_state_dict(state["adapters"], strict=False)
        optimiser.load_state_dict(state["optimiser"])
        step, losses = int(state["step"]), list(state["losses"])
        checks, best = list(state.get("checks", [])), dict(state.get("best", {}))
    every = max(1, spec.steps // LORA_CHECKS)
    cycle = itertools.cycle(list(batches(train, spec.batch_size)))
    for _ in range(step):  # the batches the steps before the checkpoint used
        next(cycle)
    model.train(False)
    try:
        if not best:
            first = check_loss()
            if first is not None:
                checks.append([0, first])
            best = {"step": 0, "loss": first, "adapters": adapters()}
        while step < spec.steps:
            for group_ in optimiser.param_groups:
                group_["lr"] = spec.lr * learning_rate_factor(step, spec.steps)
            value = learn(next(cycle))
            stepped.step()
            step += 1
            losses.append(value)
            if on_step:
                on_step(step, value)
            if check and (step % every == 0 or step == spec.steps):
                scored = check_loss()
                assert scored is not None
                checks.append([step, scored])
                if scored < best["loss"]:
                    best = {"step": step, "loss": scored, "adapters": adapters()}
            saving = step % spec.checkpoint_every == 0 or step == spec.steps
            if state_path is not None and saving and parallel.world.is_main:
                _save_state(state_path, peft_model, optimiser, step, losses, checks, best)
        if check:
            peft_model.load_state_dict(best["adapters"], strict=False)
        healed = dict(start)
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, LoraLinear):
                    weight: Any = module.base_layer.weight
                    base = start.get(weight, weight.detach())
                    delta: Any = module.get_delta_weight("default")
                    healed[weight] = (base.float() + delta.float()).to(weight.dtype)
    finally:
        parallel.release()
        unload: Any = lora.unload
        unload()  # the model's own modules back, weights untouched
        for parameter in model.parameters():
            parameter.requires_grad_(False)
    record = {
        "rank": spec.rank,
        "alpha": 2 * spec.rank,
        "targets": spec.targets,
        "modules": len(names),
        "steps": spec.steps,
        "lr": spec.lr,
        "schedule": f"linear warm-up over {max(1, round(LORA_WARMUP_SHARE * spec.steps))} steps, then cosine to 0",
        "loss": spec.loss,
        "batch_size": spec.batch_size,
        "processes": parallel.world.size,
        "losses": losses,
        "check": {
            "windows": len(check),
            "losses": checks,
            "kept_step": best["step"] if check else spec.steps,
        },
    }
    return healed, record


def _prefix(model: nn.Module, stack: LayerStack) -> str:
    """The name of the stack's root inside `model` with a trailing dot ("" when the root is the model)."""
    for name, module in model.named_modules():
        if module is stack.root:
            return f"{name}." if name else ""
    return ""


def _save_state(
    path: Path,
    peft_model: nn.Module,
    optimiser: Any,
    step: int,
    losses: list[float],
    checks: list[list[float]],
    best: dict[str, Any],
) -> None:
    import torch

    adapters = {k: v.detach().cpu() for k, v in peft_model.state_dict().items() if "lora_" in k}
    state = {
        "adapters": adapters,
        "optimiser": optimiser.state_dict(),
        "step": step,
        "losses": losses,
        "checks": checks,
        "best": best,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(state, tmp))
