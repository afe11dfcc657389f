"""The README's Python snippets run as written, on a tiny model, a tokenizer, Trainer arguments and data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def snippets() -> list[str]:
    return PYTHON_BLOCK.findall(README.read_text(encoding="utf-8"))


def test_the_readme_shows_the_notebook_in_four_lines_and_the_callback_in_three():
    notebook, callback = snippets()
    lines = [[line for line in block.splitlines() if line.strip()] for block in (notebook, callback)]
    assert len(lines[0]) == 4 and "import layerprobe as lp" in notebook
    assert len(lines[1]) == 3 and "LayerprobeCallback(" in callback


@pytest.mark.slow  # loads a model and measures 32,768 tokens
def test_the_readme_snippets_run(tmp_path, monkeypatch):
    import torch
    import transformers as tf
    from factories import build_checkpoint
    from matplotlib.figure import Figure

    path = build_checkpoint("llama", tmp_path / "tiny", num_layers=4)
    model = tf.AutoModelForCausalLM.from_pretrained(path)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    ids = tokenizer("A line of text for one training step. " * 4)["input_ids"][:32]
    data = [{"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)}] * 2
    args = tf.TrainingArguments(output_dir=str(tmp_path / "trainer"), report_to=[], use_cpu=True, max_steps=1)
    monkeypatch.chdir(tmp_path)  # the callback's runs/x lands here
    namespace = {"model": model, "tokenizer": tokenizer, "Trainer": tf.Trainer, "args": args, "data": data}
    notebook, callback = snippets()
    exec(notebook.replace("result.plot()", "figure = result.plot()"), namespace)
    frame = namespace["result"].to_frame()
    assert len(frame) == 4 and isinstance(namespace["figure"], Figure)
    exec(callback, namespace)
    assert namespace["callback"] in namespace["trainer"].callback_handler.callbacks
    assert namespace["trainer"].train().global_step == 1
