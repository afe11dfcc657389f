"""Loading a checkpoint and knowing its block stack: find, capture, remove, trace, sublayers, norm placement."""
