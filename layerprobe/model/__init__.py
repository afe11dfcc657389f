"""Loading a checkpoint and knowing its block stack: find, capture, remove, trace, sublayers, norm placement."""

from layerprobe.model.ablation import Ablation, Remover, zeroed_sublayers
from layerprobe.model.demo import DEMO_NAME, demo_model_dir
from layerprobe.model.describe import StackDescription, describe_stack
from layerprobe.model.devices import module_device
from layerprobe.model.facts import (
    CAUSAL_LM,
    ENCODER,
    EXTRACTIVE_QA,
    MASKED_LM,
    context_length,
    model_kind,
    takes_argument,
)
from layerprobe.model.hub import quiet_hub_logs, quiet_transformers, translate_load_error
from layerprobe.model.info import model_info
from layerprobe.model.load import (
    LoadedModel,
    check_skeleton_weights,
    load_config,
    load_model,
    load_skeleton,
    load_tokenizer,
    skeleton_stack,
)
from layerprobe.model.load_options import check_loadable
from layerprobe.model.placement import detect_placement
from layerprobe.model.progress import BlockEvent, EvaluationEvent, Progress
from layerprobe.model.ranks import World, world
from layerprobe.model.removal import removed_blocks
from layerprobe.model.skeleton import placement_without_weights
from layerprobe.model.stack import (
    LayerStack,
    base_of,
    capture_block_states,
    find_layers,
    hidden_from_input,
    hidden_from_output,
)
from layerprobe.model.sublayers import BlockSublayers
from layerprobe.model.towers import (
    TEXT,
    VISION,
    Tower,
    run_tower,
    skeleton_tower,
    stack_role,
    tower_config_name,
    tower_of,
    vision_paths,
)
from layerprobe.model.weights import check_loading_info, translate_weights_error

__all__ = [
    "Ablation",
    "base_of",
    "BlockEvent",
    "BlockSublayers",
    "capture_block_states",
    "CAUSAL_LM",
    "check_loadable",
    "check_loading_info",
    "check_skeleton_weights",
    "context_length",
    "demo_model_dir",
    "describe_stack",
    "DEMO_NAME",
    "detect_placement",
    "ENCODER",
    "EvaluationEvent",
    "EXTRACTIVE_QA",
    "find_layers",
    "hidden_from_input",
    "hidden_from_output",
    "LayerStack",
    "load_config",
    "load_model",
    "load_skeleton",
    "load_tokenizer",
    "LoadedModel",
    "MASKED_LM",
    "model_info",
    "model_kind",
    "module_device",
    "placement_without_weights",
    "Progress",
    "quiet_hub_logs",
    "quiet_transformers",
    "removed_blocks",
    "Remover",
    "skeleton_stack",
    "StackDescription",
    "stack_role",
    "skeleton_tower",
    "run_tower",
    "TEXT",
    "Tower",
    "tower_config_name",
    "tower_of",
    "VISION",
    "vision_paths",
    "takes_argument",
    "translate_load_error",
    "translate_weights_error",
    "world",
    "World",
    "zeroed_sublayers",
]
