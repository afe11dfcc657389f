"""The weights fingerprint of the model block: the same files give the same string, other weights another.

Checked against an independent computation of the recipe (docs/json-schema.md, model/fingerprint.py):
sha256 over the recipe line, the hub commit, and per weight file in name order its name and size, its
tensor layout (safetensors header without `__metadata__`, or the .bin's names and shapes) and 16 evenly
spaced 4 KiB slices.
"""

import hashlib
import json
import shutil
import struct

import pytest
import torch

from layerprobe.core import ModelSpec
from layerprobe.model.fingerprint import weights_fingerprint
from layerprobe.results import ModelInfo, load_result


def independent(files, commit=None) -> str:
    digest = hashlib.sha256(b"layerprobe-weights-fingerprint/1\n")
    if commit:
        digest.update(f"commit {commit}\n".encode())
    for path in sorted(files, key=lambda p: p.name):
        raw = path.read_bytes()
        digest.update(f"file {path.name} {len(raw)}\n".encode())
        if path.suffix == ".safetensors":
            (length,) = struct.unpack("<Q", raw[:8])
            header = json.loads(raw[8 : 8 + length])
            header.pop("__metadata__", None)
        else:
            state = torch.load(path, map_location="meta", weights_only=True)
            header = {name: list(t.shape) for name, t in state.items()}
        digest.update(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
        if len(raw) <= 16 * 4096:
            digest.update(raw)
        else:
            for i in range(16):
                offset = i * (len(raw) - 4096) // 15
                digest.update(raw[offset : offset + 4096])
    return "sha256:" + digest.hexdigest()


def fingerprint(path, commit=None):
    return weights_fingerprint(ModelSpec(str(path), device="cpu"), commit)


def test_the_recipe_computed_independently(stability_models):
    path = stability_models["llama"]
    files = list(path.glob("*.safetensors"))
    assert fingerprint(path) == independent(files)
    assert fingerprint(path, "abc123") == independent(files, "abc123") != fingerprint(path)


def test_same_files_same_fingerprint_other_weights_another(stability_models):
    assert fingerprint(stability_models["llama"]) == fingerprint(stability_models["llama_copy"])  # a copy elsewhere
    # The same architecture and config, other weights: the safetensors headers are identical, the bytes not.
    assert fingerprint(stability_models["llama_other"]) != fingerprint(stability_models["llama"])
    assert fingerprint(stability_models["gpt2"]) not in (None, fingerprint(stability_models["llama"]))


def test_sharded_and_bin_checkpoints(stability_models, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(stability_models["llama"])
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) > 1 and (sharded / "model.safetensors.index.json").exists()
    assert fingerprint(sharded) == independent(shards)
    missing = tmp_path / "missing"
    shutil.copytree(sharded, missing)
    (missing / shards[0].name).unlink()
    assert fingerprint(missing) is None  # a shard not at hand: nothing rather than part of the files

    binary = tmp_path / "bin"
    binary.mkdir()
    torch.save(model.state_dict(), binary / "pytorch_model.bin")
    assert fingerprint(binary) == independent([binary / "pytorch_model.bin"])


def test_no_weight_files_no_fingerprint(tmp_path):
    assert fingerprint(tmp_path) is None


def test_every_result_records_it_and_older_files_read_as_none(stability_runs, stability_models):
    for name in ("pydoc", "corpus"):
        result = load_result(stability_runs[name])
        assert result.model.weights_fingerprint == fingerprint(stability_models["llama"])
        assert result.model.weights_fingerprint.startswith("sha256:")
    block = json.loads(stability_runs["pydoc"].read_text())["model"]
    assert block["weights_fingerprint"] == fingerprint(stability_models["llama"])
    del block["weights_fingerprint"]
    assert ModelInfo.from_dict(block).weights_fingerprint is None


def test_a_bad_fingerprint_is_refused(stability_runs):
    from layerprobe.core import ResultError

    block = json.loads(stability_runs["pydoc"].read_text())["model"]
    block["weights_fingerprint"] = 12
    with pytest.raises(ResultError, match="weights_fingerprint must be a string"):
        ModelInfo.from_dict(block, "x.json")
