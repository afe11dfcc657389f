"""`layerprobe prune --save`: the smaller checkpoint, its config, and the files beside its weights."""
