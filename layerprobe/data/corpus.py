"""The texts of a corpus, streamed: the standard library's pydoc topics, a local file, or a hub dataset.

Hub datasets are streamed, never downloaded whole, and stop being read once the windows are full. Whatever
goes wrong while opening or reading one (unreachable offline, a missing text field, a corrupt file) becomes a
`CorpusError` naming the corpus, raised before any model work.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from layerprobe.core import BUILTIN_CORPUS, LOCAL_BUILDERS, CorpusError, CorpusSpec, hub_offline
from layerprobe.data.files import iter_jsonl_rows, iter_paragraphs
from layerprobe.model import quiet_hub_logs

Row = dict[str, object]  # one record of a corpus: its fields by name (JSON values)


def iter_documents(spec: CorpusSpec) -> Iterator[str]:
    """Texts of the corpus, streamed: hub datasets are never downloaded whole."""
    if spec.texts is not None:  # the Python API's list of strings
        yield from spec.texts
        return
    if spec.dataset == BUILTIN_CORPUS:
        from pydoc_data.topics import topics

        yield from (topics[key] for key in sorted(topics))
        return

    with quiet_hub_logs():  # restored when the stream is exhausted or closed
        yield from _texts(spec)


def _texts(spec: CorpusSpec) -> Iterator[str]:
    rows = _open_rows(spec)
    first = True
    for row in _guarded(rows, spec):
        if first:
            first = False
            if spec.text_field not in row:
                columns = ", ".join(sorted(row)) or "none"
                raise CorpusError(
                    f"The corpus has no field {spec.text_field!r} (fields: {columns}).",
                    hint="Pick the text column with --text-field.",
                )
        text = row.get(spec.text_field)  # rows without text are skipped, not fatal
        if isinstance(text, str) and text.strip():
            yield text


def _open_rows(spec: CorpusSpec) -> Iterable[Row]:
    suffix = Path(spec.dataset).suffix.lower()
    try:
        if spec.is_local:
            if not os.path.isfile(spec.dataset):
                raise CorpusError(f"No corpus file at {spec.dataset}.", hint="Check the path.")
            if suffix not in LOCAL_BUILDERS:
                raise CorpusError(
                    f"Cannot read {spec.dataset}: unknown file type {suffix!r}.",
                    hint="Use a .txt, .jsonl or .parquet file.",
                )
            if suffix == ".txt":  # read here: bad bytes named with the file, not a pyarrow traceback
                return ({"text": paragraph} for paragraph in iter_paragraphs(Path(spec.dataset)))
            if suffix == ".jsonl":
                return iter_jsonl_rows(Path(spec.dataset))
            import datasets  # only here: importing it costs seconds that a .txt/.jsonl corpus does not need

            builder = LOCAL_BUILDERS[suffix]
            extra = {"sample_by": "paragraph"} if builder == "text" else {}
            return datasets.load_dataset(builder, data_files=spec.dataset, split="train", streaming=True, **extra)
        import datasets

        return datasets.load_dataset(spec.dataset, spec.dataset_config, split=spec.split, streaming=True)
    except CorpusError:
        raise
    except Exception as exc:  # datasets raises many unrelated types for "not reachable"
        where = spec.dataset + (f" ({spec.dataset_config}, {spec.split})" if not spec.is_local else "")
        offline = " (offline mode is set: HF_DATASETS_OFFLINE / HF_HUB_OFFLINE)" if _datasets_offline() else ""
        raise CorpusError(
            f"Cannot open corpus {where}{offline}: {str(exc).splitlines()[0] if str(exc) else exc!r}",
            hint="Without network access pass a local .txt/.jsonl/.parquet file with --dataset "
            f"(or builtin:pydoc), or fetch it once with `hf download --repo-type dataset {spec.dataset}` and run "
            "with HF_HUB_OFFLINE=1; for hub datasets check --dataset-config and --split.",
        ) from exc


def _guarded(rows: Iterable[Row], spec: CorpusSpec) -> Iterator[Row]:
    """Rows of a corpus; a failure while streaming them (a corrupt parquet or JSON file) is a `CorpusError`."""
    iterator = iter(rows)
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except CorpusError:
            raise
        except Exception as exc:  # datasets/pyarrow raise many types for "this file is broken"
            first = str(exc).splitlines()[0] if str(exc) else repr(exc)
            raise CorpusError(
                f"Cannot read corpus {spec.dataset}: {first}",
                hint="Check that the file is what its extension says (.txt, .jsonl, .json, .parquet).",
            ) from exc
        if not isinstance(row, dict):
            raise CorpusError(f"Cannot read corpus {spec.dataset}: a row is {type(row).__name__}, not an object.")
        yield row


def _datasets_offline() -> bool:
    """Whether `datasets` runs offline (HF_DATASETS_OFFLINE, or the hub's own offline mode)."""
    return hub_offline() or os.environ.get("HF_DATASETS_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
