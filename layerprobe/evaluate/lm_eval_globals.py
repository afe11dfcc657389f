"""What lm-eval does to the whole process, held in check: its logging, tqdm bars and prints, and the global RNGs.

lm-eval is written for one evaluation per process, run from its own command line: it logs at INFO, draws
a tqdm bar per request type, prints on stdout, and reads python's, numpy's and torch's global random
state. layerprobe runs it again and again in one process, with its own progress bar on stderr and
results on stdout, so every call into lm-eval goes through `quiet_lm_eval`, and every evaluation starts
from `seed_everything`, exactly as `lm_eval --seed N` would start it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_lm_eval() -> Iterator[None]:
    """Silence lm-eval's INFO/WARNING logging, every tqdm bar and its stray prints, then restore them.

    layerprobe draws one rich progress bar per evaluation; lm-eval would interleave a tqdm bar per request
    type, "Building contexts" lines and `print`s (bootstrap, batch-size detection) on stdout, where
    layerprobe writes results. lm-eval creates its bars with no way to turn them off, so tqdm's
    constructor is made to disable every bar while the context lasts (not thread-safe: bars of other
    threads are silenced too). Errors are still logged.
    """
    import tqdm.std

    logger = logging.getLogger("lm_eval")
    level, init = logger.level, tqdm.std.tqdm.__init__

    def silent_init(self: tqdm.std.tqdm, *args: object, **kwargs: object) -> None:  # tqdm's own arguments
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    logger.setLevel(logging.ERROR)
    tqdm.std.tqdm.__init__ = silent_init
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        tqdm.std.tqdm.__init__ = init
        logger.setLevel(level)


def seed_everything(seed: int) -> None:
    """Seed python's `random`, numpy and torch with one seed, as `lm_eval --seed N` does.

    (`simple_evaluate`'s own defaults differ: random 0, numpy and torch 1234; tasks that shuffle with the
    global `random` then see other prompts than a default lm-eval run. Every variant sees the same ones.)
    """
    import numpy as np
    from lm_eval.utils import set_torch_seed

    random.seed(seed)
    np.random.seed(seed)
    set_torch_seed(seed)
