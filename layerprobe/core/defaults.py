"""Every default and every fixed set of choices, in one home.

The specs validate against these, the command line shows them in its help and uses them as its defaults, and
the library falls back to them; keeping them here means a choice or a default is changed in exactly one place.
"""

from __future__ import annotations

# Loading a model.
DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = ("4bit", "8bit")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")

# The neutral corpus.
DEFAULT_DATASET = "allenai/c4"
DEFAULT_DATASET_CONFIG = "en"  # C4's English split; used when the default dataset is read without a config
# Local corpus files by suffix → the `datasets` builder that reads them.
LOCAL_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
BUILTIN_CORPUS = "builtin:pydoc"
# A corpus given as a list of strings (the Python API): what results record as its dataset.
TEXTS_CORPUS = "texts"
# The most positions one run streams: every window is kept in memory as Python ints (tens of bytes per
# token), so 2^24 ≈ 16.8M positions is already ~1 GB — far beyond what distances need to settle.
MAX_TOKENS = 1 << 24

# Measuring and scoring.
POSITIONS = ("all", "last")
ENGINES = ("auto", "simple", "shared")
UNITS = ("block", "attention", "mlp")  # what a prune-drop variant removes (ablation.py)
SQUAD_TASK = "squad"
CORPUS_TASK = "corpus"  # task-free: NLL, KL and top-1 agreement on the angular corpus (evaluate/corpus_metric.py)

# prune-curve: the strategies that choose which units to remove (prune/strategies.py), the ones a run
# uses without --methods, and what a greedy or delta search may remove (--unit).
CURVE_METHODS = ("angular", "last", "influence", "delta", "greedy", "random")
DEFAULT_CURVE_METHODS = ("angular", "last")  # plus "random" when --baseline-seeds asks for draws
CURVE_UNITS = ("block", "sublayers")
CURVE_MAX_FRACTION = 0.5

# Every interval is a two-sided 95 % normal interval where it is not a bootstrap's: value ± Z95 · stderr.
Z95 = 1.959963984540054

# Bootstraps (stats): draws and seed of the paired ΔP bootstrap and of `stability`'s ranking intervals.
DEFAULT_DRAWS = 1000
DEFAULT_SEED = 1234

# Sequential prune-drop (--precision): documents scored per round before every unfinished variant's
# anytime-valid interval is looked at again. Small rounds stop closer to the earliest possible document;
# the interval does not depend on the round size (stats/sequential.py), only the overshoot does.
DEFAULT_ROUND_SIZE = 50
# Significance over many comparisons (stats/multiplicity.py): prune-drop's flags and compare's McNemar tests.
MULTIPLICITY_METHODS = ("holm", "bh", "none")  # family-wise error (Holm), false discovery rate (BH), unadjusted
DEFAULT_MULTIPLICITY = "holm"
SIGNIFICANCE_LEVEL = 0.05  # a flag is set where the (adjusted) p-value is below it
# A generating task's per-document answer after each filter, kept as the sample label "answer,<filter>"
# (aggregation "answer"): what flip rates (answers that differ from the full model's) are counted from.
ANSWER = "answer"

# Memory bounds.
DEFAULT_STATE_BYTES = 2 * 1024**3  # shared engine: recorded block inputs held at once (prune-drop)
DEFAULT_CHUNK_BYTES = 256 * 1024**2  # angular: fp32 states gathered on one device at once

# Secrets: what a result or the terminal shows instead of a token or password, and where they come from.
REDACTED = "<redacted>"
SECRET_KEYS = ("token", "password", "api_key", "secret")  # a --model-args key named so, or ending _<one of>
SECRET_SUFFIXES = ("_token", "_key", "_password", "_secret")
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # environment variables whose value is a secret
MIN_SECRET_LENGTH = 4  # shorter values (true, 1) are never searched for in text: they would match anything

# Launches of several processes: how long a rank waits for its peers to join before giving up.
RENDEZVOUS_SECONDS = 30

# The training-time monitor (integrations: LayerprobeCallback, Monitor): how often it measures and on how
# many calibration tokens. 32,768 positions keep a measurement a small share of 500 training steps.
MONITOR_EVERY = 500
MONITOR_TOKENS = 32_768

# `layerprobe heal` (heal/): how the removed blocks are stood in for, and the held-out measurement.
HEAL_METHODS = ("linear", "lora", "linear+lora")
HEAL_LOSSES = ("kl", "nll")  # LoRA's objective: KL to the unpruned model (the teacher), or next-token NLL
DEFAULT_HELD_OUT_TOKENS = 16_384  # positions after the calibration windows, never used to fit
DEFAULT_LORA_RANK = 8
DEFAULT_LORA_STEPS = 200
DEFAULT_LORA_LR = 1e-4
DEFAULT_LORA_TARGETS = "all-linear"  # peft's word: every linear layer of the kept blocks
LORA_WARMUP_SHARE = 0.1  # the first tenth of LoRA's steps raise the learning rate linearly, then it decays (cosine)
LORA_CHECK_SHARE = 8  # every 8th calibration window (at least one) is LoRA's check set, never trained on
LORA_CHECKS = 10  # times the check set is scored during training; the adapters kept are the best scored
DEFAULT_CHECKPOINT_EVERY = 50  # LoRA steps between two resumable checkpoints

# Metrics that are a share of 0/1 answers (lm-eval's accuracies and exact match, before any `,filter`
# suffix): their values lie in [0, 1], their intervals are Wilson's (stats), a file outside is refused (results).
PROPORTION_METRICS = frozenset({"acc", "acc_norm", "exact_match", "em"})
