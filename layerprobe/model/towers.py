"""Which tower a block stack belongs to, what it reads, and which module runs it on its own.

A checkpoint may hold several stacks: CLIP and SigLIP a text and a vision tower, a vision-language model a
language model and a vision encoder, ViT a vision stack only. The stack measured is named by its path
(`stack.find_layers`, `--layers-path`) and its *role* read from the code, never from names:

- **vision**: some module on the way from the model to the blocks takes `pixel_values` and no `input_ids`
  (ViT itself, CLIP's `vision_model`, PaliGemma's `vision_tower`); that module, the one nearest the blocks,
  is run on images (the tower's *runner*);
- **text**: otherwise. A dual encoder's model (text and vision towers side by side: its forward needs
  both) cannot run on text alone, so its text tower (the outermost module on the path that takes
  `input_ids` and no `pixel_values`) is the runner; every other model runs whole, as it always has.

The default stack (no `--layers-path`) is the one that reads text where there is one (a VLM's language
model, a dual encoder's text tower) and the only stack otherwise (ViT): `stack.KNOWN_PATHS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprobe.core import ModelSpec, UnsupportedModel
from layerprobe.model.facts import takes_argument
from layerprobe.model.load import load_skeleton
from layerprobe.model.stack import LayerStack, find_layers, is_dual_encoder

if TYPE_CHECKING:
    import torch
    from torch import nn

TEXT, VISION = "text", "vision"
TRACE_IMAGES = 2  # images in the random batch `layers` traces a vision stack with


@dataclass(frozen=True)
class Tower:
    """The stack's role (`TEXT` or `VISION`) and its runner: the module called with the inputs.

    `runner_path` is the runner's path below `stack.root` ("" for the root itself). `runner` is None
    when the caller's own model runs the stack (any text stack outside a dual encoder).
    """

    role: str
    runner: nn.Module | None
    runner_path: str

    @property
    def reads(self) -> str:
        """What the stack's inputs are, in words for messages: "images" or "text"."""
        return "images" if self.role == VISION else "text"


def tower_of(stack: LayerStack) -> Tower:
    """The role and runner of `stack` (see the module docstring)."""
    ancestors = _ancestors(stack)
    readers = [(path, m) for path, m in ancestors if _takes(m, "pixel_values") and not _takes(m, "input_ids")]
    if readers:
        path, runner = readers[-1]
        return Tower(VISION, runner, path)
    if is_dual_encoder(stack.root):
        for path, module in ancestors[1:]:
            if _takes(module, "input_ids") and not _takes(module, "pixel_values"):
                return Tower(TEXT, module, path)
        raise UnsupportedModel(
            f"{stack.path!r} of {type(stack.root).__name__} reads neither text nor images on its own.",
            hint="Point --layers-path at text_model.encoder.layers or vision_model.encoder.layers.",
        )
    return Tower(TEXT, None, "")


def stack_role(stack: LayerStack) -> str:
    """What a result records as `model.stack_role`: the tower the measured stack belongs to."""
    return tower_of(stack).role


def vision_paths(model: nn.Module) -> list[str]:
    """Every repeated-block list of `model` that reads images, as paths `--layers-path` accepts."""
    from torch import nn

    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 1 and len({type(b) for b in module}) == 1:
            if tower_of(LayerStack(model, name, module)).role == VISION:
                found.append(name)
    return found


def trace_inputs(
    model: nn.Module, stack: LayerStack, vocab_size: int, shape: tuple[int, int]
) -> dict[str, torch.Tensor]:
    """Random inputs that run `stack` once, for tracing without weights (`layers`).

    Text: token ids from [0, vocab_size), never an id the config reserves for an image (a VLM would look
    for the image it stands for). Vision: `TRACE_IMAGES` images of the tower's size, pixels N(0, 1).
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    tower = tower_of(stack)
    if tower.role == VISION:
        config = getattr(tower.runner, "config", None)
        size = _image_size(config)
        channels = getattr(config, "num_channels", 3)
        return {"pixel_values": torch.randn((TRACE_IMAGES, channels, size, size), generator=generator)}
    ids = torch.randint(0, max(2, vocab_size), shape, generator=generator)
    reserved = image_token_ids(getattr(model, "config", None))
    if reserved:
        usable = torch.tensor([i for i in range(min(vocab_size, 4096)) if i not in reserved] or [0])
        ids = torch.where(torch.isin(ids, torch.tensor(sorted(reserved))), usable[ids % len(usable)], ids)
    return {"input_ids": ids}


def image_token_ids(config: object) -> set[int]:
    """Ids a VLM's config reserves for images (image_token_index, image_token_id, boi/eoi tokens, ...)."""
    reserved = set()
    for name in dir(config) if config is not None else ():
        if ("image" in name or name.startswith(("boi", "eoi", "vision"))) and name.endswith(
            ("token_id", "token_index")
        ):
            value = getattr(config, name, None)
            if isinstance(value, int):
                reserved.add(value)
    return reserved


def run_tower(model: nn.Module, tower: Tower, inputs: dict[str, torch.Tensor]) -> object:
    """Call the tower's runner (or `model`) with the inputs its forward takes (and no KV cache)."""
    runner = tower.runner if tower.runner is not None else model
    kept: dict[str, object] = {name: value for name, value in inputs.items() if _takes(runner, name)}
    if _takes(runner, "use_cache"):
        kept["use_cache"] = False
    return runner(**kept)


def tower_config_name(config: object, stack: LayerStack) -> str | None:
    """The attribute of `config` that describes a vision stack (`vision_config`), None for a text stack.

    CLIP's towers may have equal depths, so the sub-config is matched by the class of the tower's own
    config, never by its `num_hidden_layers`; a vision stack whose config is the whole config (ViT) has none.
    """
    tower = tower_of(stack)
    own = getattr(tower.runner, "config", None)
    if tower.role != VISION or own is None or type(own) is type(config):
        return None
    for name in sorted(vars(config)) if hasattr(config, "__dict__") else ():
        if name.endswith("_config") and type(getattr(config, name)) is type(own):
            return name
    return None


def _image_size(config: object) -> int:
    size = getattr(config, "image_size", 224)
    return int(size[0] if isinstance(size, (list, tuple)) else size)


def _ancestors(stack: LayerStack) -> list[tuple[str, nn.Module]]:
    """(path, module) from the root down to the module that holds the block list (the list excluded)."""
    found = [("", stack.root)]
    parts = stack.path.split(".")[:-1]
    for depth in range(1, len(parts) + 1):
        path = ".".join(parts[:depth])
        found.append((path, stack.root.get_submodule(path)))
    return found


def _takes(module: nn.Module, name: str) -> bool:
    try:
        return takes_argument(module, name)
    except (TypeError, ValueError):  # a forward without a readable signature
        return False


def skeleton_tower(spec: ModelSpec) -> tuple[nn.Module, LayerStack, Tower]:
    """The weightless skeleton, the stack `--layers-path` (or the default rule) names in it, and its tower.

    Read before any weight, so a corpus of the wrong kind (text for a vision tower, images for a text
    stack) is refused first.
    """
    skeleton, _, _ = load_skeleton(spec)
    stack = find_layers(skeleton, spec.layers_path)
    return skeleton, stack, tower_of(stack)
