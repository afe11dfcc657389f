"""The `layerprobe` command line: options in, one library call, a rich summary out."""
