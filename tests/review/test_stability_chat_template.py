"""`--chat-template`: each corpus document as one user turn of the tokenizer's chat template.

The windows are compared with an independent construction (render each document, drop the template's
own BOS and closing EOS, encode without special tokens, separate with EOS, prefix the tokenizer's BOS);
a tokenizer without a template is refused before any weight is read (a spy on from_pretrained); the
option is recorded in the results and declared once for every command that reads a corpus.
"""

import json
import re
import shutil

import pytest
import transformers as tf
from factories.stability import SEQ, TOKENS, corpus
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, LayerprobeError, ModelSpec
from layerprobe.data import build_windows
from layerprobe.measure import run_angular
from layerprobe.results import RunDir

# Writes the BOS at its start and an EOS after every turn, like LLaMA-3's and Mistral's templates do.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
runner = CliRunner()


@pytest.fixture(scope="module")
def chat_model(stability_models, tmp_path_factory):
    """The 6-block LLaMA whose tokenizer has a chat template (its tokenizer adds a BOS to every input)."""
    path = shutil.copytree(stability_models["llama"], tmp_path_factory.mktemp("chat") / "llama-chat")
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def expected_stream(tokenizer, texts):
    stream = []
    for text in texts:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False)
        assert rendered.startswith("<s>") and rendered.endswith("</s>")  # what the template writes
        body = rendered[len("<s>") : -len("</s>")]
        stream += tokenizer(body, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return stream


def test_windows_hold_each_document_as_a_user_turn_with_one_bos(chat_model):
    tokenizer = tf.AutoTokenizer.from_pretrained(chat_model)
    texts = ["The first document.", "A second one, a little longer than the first.", "Third."] * 20
    windows = build_windows(tokenizer, texts, 256, 32, chat_template=True)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    stream, offset = expected_stream(tokenizer, texts), 0
    for window in windows:
        text = window.input_ids[1:]
        assert window.input_ids[0] == bos and bos not in text  # the tokenizer's BOS, once, at the start
        assert text == stream[offset : offset + len(text)]
        assert all(a != eos or b != eos for a, b in zip(text, text[1:], strict=False))  # no doubled EOS
        offset += len(text)
    assert sum(len(w.input_ids) for w in windows) == 256
    joined = tokenizer.decode(stream[:offset])
    assert "<|user|>\nThe first document." in joined and "<|assistant|>" not in joined  # no generation prompt
    plain = build_windows(tokenizer, texts, 256, 32)
    assert [w.input_ids for w in plain] != [w.input_ids for w in windows]


def test_a_tokenizer_without_a_template_is_one_line(stability_models):
    tokenizer = tf.AutoTokenizer.from_pretrained(stability_models["llama"])
    assert not tokenizer.chat_template
    with pytest.raises(LayerprobeError, match="tokenizer has no chat template"):
        build_windows(tokenizer, ["text"], 64, 32, chat_template=True)


def test_recorded_in_the_angular_data_block(chat_model, tmp_path):
    spec = AngularSpec(ModelSpec(str(chat_model), device="cpu"), corpus(chat_template=True), batch_size=4)
    result = run_angular(spec)
    assert result.data["chat_template"] is True
    written = json.loads(json.dumps(result.to_dict()))
    assert written["data"]["chat_template"] is True
    # The windows measured are the chat-templated ones: the per-window rows differ from plain text.
    plain = run_angular(AngularSpec(ModelSpec(str(chat_model), device="cpu"), corpus(), batch_size=4))
    assert "chat_template" not in plain.data  # off: results as before the option existed
    assert plain.adjacent_windows != result.adjacent_windows


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_recorded_in_prune_drop_corpus_settings(chat_model, tmp_path):
    out = tmp_path / "pd"
    args = ["prune-drop", str(chat_model), "--task", "corpus", "--dataset", BUILTIN_CORPUS, "--split", "train"]
    args += ["--tokens", str(TOKENS), "--seq-len", str(SEQ), "--device", "cpu", "--quiet", "--out", str(out)]
    done = runner.invoke(app, [*args, "--chat-template"])
    assert done.exit_code == 0, done.output
    settings = json.loads(RunDir(out).prune_drop_json.read_text())["settings"]
    assert settings["corpus"]["chat_template"] is True


class WeightsRead(Exception):
    """Raised by the spy: a weight load was attempted."""


@pytest.fixture
def weight_spy(monkeypatch):
    calls = []

    def spy(cls, *args, **kwargs):
        calls.append(cls.__name__)
        raise WeightsRead(cls.__name__)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(spy))
    return calls


def flat(text):
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


CORPUS_ARGS = ["--dataset", BUILTIN_CORPUS, "--split", "train", "--tokens", str(TOKENS), "--seq-len", str(SEQ)]


@pytest.mark.parametrize(
    ("command", "extra", "message"),
    [
        ("angular", [], "tokenizer has no chat template"),
        ("depth", [], "tokenizer has no chat template"),
        ("prune-drop", ["--task", "corpus"], "tokenizer has no chat template"),
        ("prune-curve", ["--task", "corpus"], "tokenizer has no chat template"),
        ("prune-drop", ["--task", "lp_arc_like"], "--chat-template wraps the documents of --task corpus"),
    ],
)
def test_refused_before_any_weight_is_read(stability_models, tmp_path, weight_spy, command, extra, message):
    args = [command, str(stability_models["llama"]), *CORPUS_ARGS, *extra, "--chat-template", "--quiet"]
    done = runner.invoke(app, [*args, "--device", "cpu", "--out", str(tmp_path / "out")])
    assert done.exit_code == 2, done.output
    assert message in flat(done.output) and "Traceback" not in done.output
    assert weight_spy == [], "weights were read before the mistake was reported"


def test_the_spy_sees_weights_with_a_template(chat_model, tmp_path, weight_spy):
    done = runner.invoke(app, ["angular", str(chat_model), *CORPUS_ARGS, "--chat-template", "--quiet"])
    assert isinstance(done.exception, WeightsRead) and weight_spy


def test_declared_once_on_every_command_that_reads_a_corpus():
    import typer

    click = typer.main.get_command(app)
    declared = {}
    for name in ("angular", "depth", "prune-drop", "prune-curve"):
        (param,) = [p for p in click.commands[name].params if "--chat-template" in p.opts]
        declared[name] = (tuple(param.opts), param.help, param.default, param.is_flag)
    assert len(set(declared.values())) == 1
    assert declared["angular"][2] is False and "chat template" in declared["angular"][1]
