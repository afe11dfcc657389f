"""Any result file → its typed result object: the one place result JSON becomes something to compute with.

The gate and the plots never see raw JSON: `load_result` reads the file (io.py), picks the kind by its
schema and validates every field on the way in (validate.py), so a bad file is one line naming the file
and the field, never a traceback further down.
"""

from __future__ import annotations

import os

from layerprobe.core import ResultError
from layerprobe.results.angular import AngularResult
from layerprobe.results.curve import PruneCurveResult
from layerprobe.results.depth import DepthResult
from layerprobe.results.heal import HealResult
from layerprobe.results.io import (
    ANGULAR_SCHEMA,
    COMPARE_SCHEMA,
    DEPTH_SCHEMA,
    HEAL_SCHEMA,
    PARTIAL_SCHEMA,
    PRUNE_CURVE_SCHEMA,
    PRUNE_DROP_SCHEMA,
    SHARD_SCHEMA,
    read_json,
    schema_family,
)
from layerprobe.results.prune_drop import PruneDropResult

AnyResult = AngularResult | PruneDropResult | DepthResult | PruneCurveResult | HealResult
GatedResult = AngularResult | PruneDropResult | DepthResult | HealResult  # what `compare` gates (RESULT_FILES)
# What a file that is not a result is, and what to pass instead.
NOT_A_RESULT = {
    schema_family(COMPARE_SCHEMA): "That is compare's verdict; pass the result files it compared "
    "(angular.json, prune_drop.json, …).",
    schema_family(PARTIAL_SCHEMA): "That is an unfinished prune-drop run; finish it with prune-drop --resume first.",
    schema_family(
        SHARD_SCHEMA
    ): "That is one shard of a prune-drop run; join the shards with `layerprobe merge` first.",
}


def load_result(path: str | os.PathLike[str]) -> AnyResult:
    """Read any layerprobe result file into its result object, validated field by field (validate.py).

    This is the one place a result file becomes a typed object: the gate and the plots never see raw JSON.
    """
    data = read_json(path)
    schema = str(data["schema"])
    kind = schema_family(schema)
    if kind == schema_family(ANGULAR_SCHEMA):
        return AngularResult.from_dict(data, str(path))
    if kind == schema_family(PRUNE_DROP_SCHEMA):
        return PruneDropResult.from_dict(data, str(path))
    if kind == schema_family(DEPTH_SCHEMA):
        return DepthResult.from_dict(data, str(path))
    if kind == schema_family(PRUNE_CURVE_SCHEMA):
        return PruneCurveResult.from_dict(data, str(path))
    if kind == schema_family(HEAL_SCHEMA):
        return HealResult.from_dict(data, str(path))
    raise ResultError(f"{path}: unknown result schema {schema!r}.", hint=NOT_A_RESULT.get(kind))


def load_gated_result(path: str | os.PathLike[str]) -> GatedResult:
    """`load_result` for `compare`: a kind it gates (angular, prune-drop, depth, heal), anything else refused.

    A pruning curve has no rules: comparing two would otherwise be read as one of the gated kinds.
    """
    result = load_result(path)
    if isinstance(result, PruneCurveResult):
        raise ResultError(
            f"{path}: compare gates angular, prune-drop, depth and heal results, not a pruning curve.",
            hint="Compare the runs' prune_drop.json (or their run directories); `layerprobe plot` draws a curve.",
        )
    return result
