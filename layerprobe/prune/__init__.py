"""The pruning experiments: prune-drop (each unit removed in turn), its resume state and shards, the curve."""
