"""Loading a checkpoint and knowing its block stack: find, capture, remove, trace, sublayers, norm placement."""

from layerprobe.model.ablation import Ablation, Remover, zeroed_sublayers
from layerprobe.model.demo import DEMO_NAME, demo_model_dir
from layerprobe.model.describe import StackDescription, describe_stack
from layerprobe.model.designs import (
    Design,
    design_config_changes,
    exported_state,
    memory_refusal,
    position_attributes,
    register_design,
)
from layerprobe.model.designs import refusal as design_refusal
from layerprobe.model.devices import module_device
from layerprobe.model.encdec import count_field, side_of
from layerprobe.model.facts import (
    CAUSAL_LM,
    ENCODER,
    EXTRACTIVE_QA,
    IMAGE_CLASSIFIER,
    MASKED_LM,
    SEQ2SEQ,
    context_length,
    model_kind,
    takes_argument,
)
from layerprobe.model.fingerprint import weights_fingerprint
from layerprobe.model.hub import quiet_hub_logs, quiet_transformers, translate_load_error
from layerprobe.model.info import model_info
from layerprobe.model.kinds import (
    CLASS_LOGITS,
    CORPUS_RULE,
    MASKED_TOKEN,
    NEXT_TOKEN,
    POOLED_OUTPUT,
    CorpusEstimator,
    HeadKind,
    Loader,
    corpus_estimator,
    head_class,
    loader_for,
    register_kind,
    shipped_head,
)
from layerprobe.model.live import LIVE_NAME, is_live_model, live_model, live_name, untouched
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
from layerprobe.model.renumber import blocks_text, spans_text
from layerprobe.model.skeleton import placement_without_weights
from layerprobe.model.stack import (
    LayerStack,
    base_of,
    capture_block_states,
    find_layers,
    hidden_from_input,
    hidden_from_output,
)
from layerprobe.model.streams import (
    AltUpStream,
    altup_stream,
    image_only_blocks,
    residual_view,
    skipped_note,
    stream_note,
    untraceable_image_block,
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
    "is_live_model",
    "LIVE_NAME",
    "live_model",
    "live_name",
    "untouched",
    "Ablation",
    "AltUpStream",
    "altup_stream",
    "image_only_blocks",
    "residual_view",
    "skipped_note",
    "untraceable_image_block",
    "blocks_text",
    "spans_text",
    "stream_note",
    "base_of",
    "BlockEvent",
    "BlockSublayers",
    "capture_block_states",
    "CAUSAL_LM",
    "check_loadable",
    "check_loading_info",
    "check_skeleton_weights",
    "context_length",
    "count_field",
    "demo_model_dir",
    "Design",
    "design_config_changes",
    "design_refusal",
    "describe_stack",
    "DEMO_NAME",
    "detect_placement",
    "ENCODER",
    "EvaluationEvent",
    "EXTRACTIVE_QA",
    "exported_state",
    "find_layers",
    "hidden_from_input",
    "head_class",
    "HeadKind",
    "hidden_from_output",
    "LayerStack",
    "load_config",
    "load_model",
    "load_skeleton",
    "load_tokenizer",
    "LoadedModel",
    "Loader",
    "loader_for",
    "MASKED_LM",
    "IMAGE_CLASSIFIER",
    "CLASS_LOGITS",
    "CORPUS_RULE",
    "MASKED_TOKEN",
    "NEXT_TOKEN",
    "POOLED_OUTPUT",
    "CorpusEstimator",
    "corpus_estimator",
    "shipped_head",
    "model_info",
    "model_kind",
    "module_device",
    "placement_without_weights",
    "position_attributes",
    "Progress",
    "quiet_hub_logs",
    "quiet_transformers",
    "register_design",
    "memory_refusal",
    "register_kind",
    "removed_blocks",
    "side_of",
    "SEQ2SEQ",
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
    "weights_fingerprint",
    "world",
    "World",
    "zeroed_sublayers",
]
