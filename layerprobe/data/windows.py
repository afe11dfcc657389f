"""Token windows from a neutral corpus, with an exact token budget and no padding.

Documents are tokenized without special tokens, joined with the end-of-text separator, and packed into
windows of `seq_len` positions; each window then gets the special tokens the tokenizer normally adds
(LLaMA's BOS, BERT's [CLS] … [SEP]). With `--chat-template` each document is first rendered as one user
turn of the tokenizer's chat template (`chat_turns`). Window lengths are planned so that they add up to exactly the
requested number of positions, so padding never exists and never needs to be masked out. The whole
plan is built before the model runs: a corpus that is too small fails in seconds, not after an hour.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from layerprobe.core import CorpusError, CorpusSpec, EmptyCorpus, LayerprobeError, ModelSpec
from layerprobe.data.corpus import iter_documents
from layerprobe.data.images import ImageWindow
from layerprobe.model import context_length, load_config, load_tokenizer, quiet_transformers

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_TOKENIZE_BATCH = 64
# Documents longer than this many characters are tokenized in pieces (see `split_long`), a few at a time.
PIECE_CHARS = 4096
_PIECES_PER_CALL = 8
_BOUNDARY = re.compile(r"\s(?=\S)")


@dataclass(frozen=True)
class Window:
    """One model input: token ids, and the position of its last text (non-special) token."""

    input_ids: list[int]
    last_text_position: int


AnyWindow = TypeVar("AnyWindow", bound="Window | ImageWindow")


@dataclass(frozen=True)
class SpecialLayout:
    """The special tokens a tokenizer puts before and after a sequence, and the document separator."""

    prefix: list[int]
    suffix: list[int]
    separator: list[int]

    @property
    def count(self) -> int:
        return len(self.prefix) + len(self.suffix)


def special_layout(tokenizer: PreTrainedTokenizerBase) -> SpecialLayout:
    """Learn where the tokenizer adds special tokens by encoding one probe text both ways."""
    probe = "layerprobe probe text"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            prefix, suffix = full[:start], full[start + len(plain) :]
            break
    else:  # the tokenizer merges specials into the text: add none rather than guess
        prefix, suffix = [], []
    separator_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    return SpecialLayout(list(prefix), list(suffix), [] if separator_id is None else [separator_id])


def plan_window_lengths(tokens: int, seq_len: int, specials: int) -> list[int]:
    """Window lengths (in positions, specials included) that add up to exactly `tokens`.

    Every window needs room for its special tokens plus at least one text token; a remainder too short
    for that borrows from the window before it.
    """
    minimum = specials + 1
    if seq_len < minimum:
        raise CorpusError(f"--seq-len {seq_len} leaves no room for text after {specials} special tokens.")
    if tokens < minimum:
        raise CorpusError(f"--tokens {tokens} is too few: each window needs {minimum} positions.")
    lengths = [seq_len] * (tokens // seq_len)
    rest = tokens % seq_len
    if rest:
        if rest < minimum:
            lengths[-1] -= minimum - rest
            rest = minimum
        lengths.append(rest)
    return lengths


def check_chat_template(tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse `--chat-template` for a tokenizer that has none (called before any weight is read)."""
    if not getattr(tokenizer, "chat_template", None):
        raise LayerprobeError(
            "--chat-template: this model's tokenizer has no chat template.",
            hint="Use a chat (instruct) checkpoint, or add a chat_template to its tokenizer_config.json "
            "(or chat_template.jinja); without the option the documents are measured as plain text.",
        )


def chat_turns(tokenizer: PreTrainedTokenizerBase, documents: Iterable[str]) -> Iterator[str]:
    """Each document as one user turn of the tokenizer's chat template, without a generation prompt.

    The rendered text is tokenized like any document, without special tokens added (`_encode`); a BOS
    the template writes at its start is removed, because every window starts with the special tokens the
    tokenizer adds (`special_layout`): a window never holds two BOS in a row. Likewise an EOS the template
    writes at its very end is left to the separator that follows every document, so none is doubled.
    """
    check_chat_template(tokenizer)
    bos, eos = (
        token if isinstance(token, str) and token else None for token in (tokenizer.bos_token, tokenizer.eos_token)
    )
    for text in documents:
        try:
            rendered = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=False
            )
        except Exception as exc:  # jinja2's TemplateError (the template's raise_exception), or a bad template
            raise CorpusError(
                f"--chat-template: the tokenizer's chat template failed on a document: {exc}",
                hint="The template may not accept a single user turn; run without --chat-template.",
            ) from exc
        if not isinstance(rendered, str):
            raise CorpusError("--chat-template: the tokenizer's chat template did not render to text.")
        if bos and rendered.startswith(bos):
            rendered = rendered[len(bos) :]
        if eos and rendered.endswith(eos):
            rendered = rendered[: -len(eos)]
        yield rendered


def build_windows(
    tokenizer: PreTrainedTokenizerBase,
    documents: Iterable[str],
    tokens: int,
    seq_len: int,
    on_tokens: Callable[[int], None] | None = None,
    chat_template: bool = False,
) -> list[Window]:
    """Pack documents into windows whose lengths add up to exactly `tokens` positions.

    `on_tokens(n)` is called as text tokens are gathered, to drive a progress bar. With `chat_template`,
    each document is one user turn of the tokenizer's chat template (`chat_turns`).
    Raises EmptyCorpus, saying how many tokens were found, when the corpus is too small.
    """
    if chat_template:
        documents = chat_turns(tokenizer, documents)
    layout = special_layout(tokenizer)
    lengths = plan_window_lengths(tokens, seq_len, layout.count)
    needed = sum(lengths) - layout.count * len(lengths)
    keep_space = piece_rule(tokenizer)
    stream: list[int] = []
    batch: list[str] = []
    for text in documents:
        if len(stream) >= needed:
            break
        if len(text) <= PIECE_CHARS:
            batch.append(text)
            if len(batch) == _TOKENIZE_BATCH:
                _extend(stream, tokenizer, batch, layout, on_tokens)
                batch = []
            continue
        if batch:  # a long document: the short ones before it first, to keep the order
            _extend(stream, tokenizer, batch, layout, on_tokens)
            batch = []
            if len(stream) >= needed:
                break
        _extend_long(stream, tokenizer, text, layout, needed, keep_space, on_tokens)
    if batch and len(stream) < needed:
        _extend(stream, tokenizer, batch, layout, on_tokens)
    if len(stream) < needed:
        found = len(stream) + layout.count * len(lengths)
        raise EmptyCorpus(
            f"The corpus holds about {len(stream):,} text tokens; {tokens:,} positions need "
            f"{needed:,} (with {layout.count} special tokens per window).",
            hint=f"Lower --tokens to at most ~{found:,} or give a larger corpus.",
        )
    windows, offset = [], 0
    for length in lengths:
        text_len = length - layout.count
        ids = layout.prefix + stream[offset : offset + text_len] + layout.suffix
        windows.append(Window(ids, len(layout.prefix) + text_len - 1))
        offset += text_len
    return windows


def piece_rule(tokenizer: PreTrainedTokenizerBase) -> bool:
    """How to cut long documents so that tokenizing the pieces gives the tokens of the whole text.

    Pieces are cut before a whitespace character that precedes a word. Byte-level BPE (GPT-2, LLaMA-3) and
    WordPiece (BERT) give identical tokens when the whitespace starts the next piece (True); SentencePiece
    tokenizers that prepend "▁" to every call agree when it is dropped instead (False). A probe text
    decides; if neither rule reproduces it, the first is used and tokens may differ at piece boundaries
    (one boundary per PIECE_CHARS characters of a long document).
    """
    probe = "layerprobe reads very long documents in pieces, cut at whitespace,\nso memory follows --tokens."
    whole = _encode(tokenizer, [probe])[0]
    for keep_space in (True, False):
        pieces = list(split_long(probe, 24, keep_space))
        if [t for ids in _encode(tokenizer, pieces) for t in ids] == whole:
            return keep_space
    return True


def split_long(text: str, size: int = 0, keep_space: bool = True) -> Iterator[str]:
    """Cut `text` into pieces of at most `size` characters (default PIECE_CHARS), ending at whitespace.

    Each piece ends before a whitespace character that precedes a word, searched in its second half. With
    `keep_space` that whitespace starts the next piece, so the pieces join back to `text`; without it
    the single character is dropped. A stretch with no whitespace at all is cut hard at `size`.
    """
    size = size or PIECE_CHARS
    start = 0
    while len(text) - start > size:
        low = start + size // 2
        cut = None
        for match in _BOUNDARY.finditer(text, low, start + size):
            cut = match.start()
        end = cut if cut is not None else start + size
        yield text[start:end]
        start = end if cut is None or keep_space else end + 1
    yield text[start:]


def _extend_long(
    stream: list[int],
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    layout: SpecialLayout,
    needed: int,
    keep_space: bool,
    on_tokens: Callable[[int], None] | None,
) -> None:
    """Tokenize one long document piece by piece, stopping once the stream holds `needed` tokens.

    A 20 MB single-line file then costs a few pieces for --tokens 1024, not the whole text at once (which
    took 4.2 GB and 149 s): memory and time follow --tokens, not the file.
    """
    pieces = split_long(text, PIECE_CHARS, keep_space)
    while True:
        group = [piece for _, piece in zip(range(_PIECES_PER_CALL), pieces, strict=False)]
        if not group:
            break
        before = len(stream)
        for ids in _encode(tokenizer, group):
            stream.extend(ids)
        if on_tokens:
            on_tokens(len(stream) - before)
        if len(stream) >= needed:
            return  # the windows end inside this document: no separator needed
    stream.extend(layout.separator)


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens."""
    with quiet_transformers():  # silences "sequence longer than the model's maximum": we pack, not truncate
        return tokenizer(texts, add_special_tokens=False)["input_ids"]


def windows_before_loading(
    model: ModelSpec,
    corpus: CorpusSpec,
    on_tokens: Callable[[int], None] | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> tuple[PreTrainedTokenizerBase, list[Window], int]:
    """Config, tokenizer and every window of the corpus, read before any weight is: (tokenizer, windows, seq_len).

    Streaming until the budget is met is cheap next to loading a large model, so a corpus that is
    unreachable, lacks its text field or holds too little text fails in seconds. `seq_len` is capped by
    the model's usable context (read from the config and tokenizer). The windows are kept, so the
    corpus is streamed once.
    """
    config = load_config(model)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
    seq_len = min(corpus.seq_len, context_length(config, tokenizer) or corpus.seq_len)
    return tokenizer, pack_corpus(tokenizer, corpus, seq_len, on_tokens), seq_len


def pack_corpus(
    tokenizer: PreTrainedTokenizerBase,
    corpus: CorpusSpec,
    seq_len: int,
    on_tokens: Callable[[int], None] | None = None,
) -> list[Window]:
    """The windows of `corpus`: its documents (chat turns with `corpus.chat_template`) in `corpus.tokens` positions.

    `seq_len` is the window length the caller settled on (the corpus's, capped by the model's context);
    every command that reads a corpus packs it here, so an option such as `--chat-template` applies alike.
    """
    documents = iter_documents(corpus)
    return build_windows(tokenizer, documents, corpus.tokens, seq_len, on_tokens, chat_template=corpus.chat_template)


def _extend(
    stream: list[int],
    tokenizer: PreTrainedTokenizerBase,
    texts: list[str],
    layout: SpecialLayout,
    on_tokens: Callable[[int], None] | None,
) -> None:
    """Tokenize a batch of short documents onto the stream, each followed by the separator."""
    encoded = _encode(tokenizer, texts)
    before = len(stream)
    for ids in encoded:
        stream.extend(ids)
        stream.extend(layout.separator)
    if on_tokens:
        on_tokens(len(stream) - before)


def batches(windows: Sequence[AnyWindow], batch_size: int) -> Iterator[list[AnyWindow]]:
    """Group consecutive windows of equal length, at most `batch_size` at a time (so nothing is padded).

    Images (`images.ImageWindow`) of one corpus all have the size their processor gives them.
    """
    group: list[AnyWindow] = []
    for window in windows:
        if group and (len(group) == batch_size or _length(window) != _length(group[0])):
            yield group
            group = []
        group.append(window)
    if group:
        yield group


def _length(window: Window | ImageWindow) -> int:
    return len(window.input_ids) if isinstance(window, Window) else window.patches
