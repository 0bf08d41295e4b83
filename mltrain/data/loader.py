"""`load_tokens(cfg.data)`: the train and validation token arrays of the configured source.

* `prose`: the English prose corpus shipped with mltrain (see prose.py), split by document: the same
  bytes on every machine.
* `embedded`: the Python documentation corpus (see embedded.py), split by document.
* `text`: local files (see text.py); several files are split by document, a single file by position
  (its last `val_fraction` of tokens is validation).
* `shards`: a folder of llm.c-format shards (see shards.py), one array per shard.

Document splits: documents are ordered by the SHA-1 of their name (stable across runs, machines and
Python processes) and taken into validation in that order until they hold `val_fraction` of the
text's bytes; a document that would carry the held-out side past 1.5 x `val_fraction` is passed over
(it stays in training), so one document much larger than the rest cannot make the held-out share far
from the one asked; at least one document goes to each side (when every document is too large, the
smallest is held out). Documents keep their corpus order inside each
split, each followed by the tokenizer's separator (end-of-text, or "\\n\\n" for `bytes`).

`prose`, `embedded` and `text` are tokenized once and cached (see cache.py); `shards` are used
in place. Every source's `TokenSplits.corpus` is its identity record (corpus.py), written into summary.json.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np
from omegaconf import OmegaConf

from mltrain.data import cache, corpus, embedded, inputs, prepare, prose, shards, text
from mltrain.data.config import DataConfig, Source
from mltrain.core.errors import DataError
from mltrain.data.tokenizers import Tokenizer, get_tokenizer

log = logging.getLogger(__name__)


@dataclass
class TokenSplits:
    train: Sequence[np.ndarray]  # 1-D token arrays (uint16 when the vocabulary fits, else uint32)
    val: Sequence[np.ndarray]
    vocab_size: int  # the tokenizer's n_vocab
    tokenizer: str
    description: str  # one human line: source, tokenizer and token counts
    corpus: dict = field(default_factory=dict)  # the text's identity: name, sha256, documents, bytes (corpus.py)


def data_config(data: DataConfig | Mapping[str, Any]) -> DataConfig:
    """`data` (a DataConfig, or a mapping of its fields) as a DataConfig with interpolations resolved: a
    DataConfig made in Python holds its defaults as written (`cache_dir` is `${oc.env:MLTRAIN_CACHE,...}`)."""
    fields: Any = data
    if dataclasses.is_dataclass(data):
        fields = OmegaConf.to_container(OmegaConf.structured(data), resolve=True)
    elif OmegaConf.is_config(data):
        fields = OmegaConf.to_container(data, resolve=True)
    return cast(DataConfig, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(DataConfig), fields)))


MAX_VAL_OVERSHOOT = 1.5  # a document is held out only while the held-out side stays under this x its target


def validation_documents(names: Sequence[str], sizes: Sequence[int], val_fraction: float) -> list[bool]:
    """is_val flag per document: see the module docstring. Needs at least two documents."""
    if len(names) < 2:
        raise DataError("a split by document needs at least two documents")
    order = sorted(range(len(names)), key=lambda i: hashlib.sha1(names[i].encode("utf-8")).hexdigest())
    sizes = [max(int(s), 1) for s in sizes]
    target = val_fraction * sum(sizes)
    is_val = [False] * len(names)
    taken = 0
    for i in order[:-1]:  # the last one always stays in train
        if taken >= target and taken > 0:
            break
        if taken + sizes[i] <= MAX_VAL_OVERSHOOT * target:
            is_val[i] = True
            taken += sizes[i]
    if not taken:  # every document is too large: the smallest one (the first in order among equals)
        is_val[min(order[:-1], key=lambda i: sizes[i])] = True
    return is_val


def _key(*parts: Any) -> str:
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()


def _describe(meta: dict, tok: Tokenizer) -> str:
    t = meta["tokens"]
    return f"{meta['what']}, {tok.name}: {t['train']:,} train / {t['val']:,} val tokens"


def _write_documents(
    writers: Mapping[str, cache.TokenWriter], tok: Tokenizer, docs: Any, names: Sequence[str], is_val: Sequence[bool], hasher: corpus.Hasher
) -> int:
    """Tokenize and write each document to its split; `hasher` hashes its text (the corpus record)."""
    for name, flag, body in zip(names, is_val, docs, strict=True):
        tokens, _ = tok.encode_documents([body], separator="after")
        writers["val" if flag else "train"].write(tokens)
        hasher.add(name, body)
    return hasher.bytes


def _load_documents(c: Any, tok: Tokenizer, source: str, key: str, read: Callable[[], Sequence[tuple[str, str]]],
                    what: Callable[[Sequence[tuple[str, str]], int], str],
                    record: Callable[[dict], dict] = lambda r: r) -> TokenSplits:
    """A corpus of named documents (`read()`, sorted by name), split by document, tokenized once into the
    token cache under `key`; `what(docs, n_bytes)` is its description, `record(hashed)` its corpus record
    given the one hashed from its documents."""
    store = cache.TokenCache(c.cache_dir, source, tok.name, key)
    found = store.load()
    if found is None:
        store.check_writable()  # before reading the corpus, which can take a while
        docs = read()
        log.info("tokenizing the %s corpus (%d documents) with %s, once", source, len(docs), tok.name)
        names = [n for n, _ in docs]
        is_val = validation_documents(names, [len(t.encode("utf-8")) for _, t in docs], c.val_fraction)

        def fill(writers: Mapping[str, cache.TokenWriter]) -> dict:
            hasher = corpus.Hasher()
            n_bytes = _write_documents(writers, tok, (t for _, t in docs), names, is_val, hasher)
            return {"what": what(docs, n_bytes), "val_documents": [n for n, v in zip(names, is_val) if v],
                    "corpus": record(hasher.record(source))}

        found = store.build(tok.dtype, fill)
    arrays, meta = _checked(found, store, tok)
    return _splits(arrays, meta, tok)


def _splits(arrays: dict, meta: dict, tok: Tokenizer) -> TokenSplits:
    return TokenSplits([arrays["train"]], [arrays["val"]], tok.n_vocab, tok.name, _describe(meta, tok),
                       dict(meta.get("corpus") or {}))


def _load_prose(c: Any, tok: Tokenizer) -> TokenSplits:
    key = _key("prose", cache.CACHE_VERSION, prose.fingerprint(), tok.name, c.val_fraction)

    def record(hashed: dict) -> dict:  # the shipped text's own sha256 (prose.py), checked as it was read
        return {**prose.record(), "documents": hashed["documents"], "bytes": hashed["bytes"]}

    return _load_documents(
        c, tok, "prose", key, prose.documents,
        lambda docs, n_bytes: f"prose (State of the Union addresses 1790-2026 and the World English Bible: "
                              f"{len(docs)} documents, {n_bytes / 1e6:.2f} MB, sha256 {prose.fingerprint()[:16]})",
        record,
    )  # fmt: skip


def _load_embedded(c: Any, tok: Tokenizer) -> TokenSplits:
    version = embedded.python_version()
    key = _key("embedded", cache.CACHE_VERSION, embedded.fingerprint(), tok.name, c.val_fraction)
    return _load_documents(
        c, tok, "embedded", key, embedded.documents,
        lambda docs, n_bytes: f"embedded (Python {version} docs: {len(docs)} documents, {n_bytes / 1e6:.2f} MB)",
    )  # fmt: skip


def _checked(found: tuple[dict, dict], store: cache.TokenCache, tok: Tokenizer) -> tuple[dict, dict]:
    """A cache entry's token arrays checked against the tokenizer's vocabulary (data/inputs.py): a cached
    file changed under its meta would otherwise crash the run mid-way."""
    arrays, meta = found
    for split, tokens in arrays.items():
        inputs.check_token_ids(tokens, tok.n_vocab, f"{store.split_path(split)} (the token cache)", tok.name)
    return arrays, meta


def _load_text(c: Any, tok: Tokenizer) -> TokenSplits:
    if not c.path:
        raise DataError("data.source=text needs data.path: a text file, a folder of *.txt/*.md files, or a glob")
    files = text.resolve_files(c.path)
    names = text.document_names(files)
    key = _key("text", cache.CACHE_VERSION, text.fingerprint(files), tok.name, c.val_fraction, len(files) == 1)
    store = cache.TokenCache(c.cache_dir, "text", tok.name, key)
    found = store.load()
    if found is None:
        log.info("tokenizing %d text file(s) from %s with %s, once", len(files), c.path, tok.name)
        sizes = [f.stat().st_size for f in files]
        what = f"text ({c.path}: {len(files)} file{'s' if len(files) > 1 else ''}, {sum(sizes) / 1e6:.2f} MB)"
        not_text: list[str] = []  # files allowed by data.allow_binary, remembered in the cache entry

        def checked(docs: Any) -> Any:
            for f, name, body in zip(files, names, docs):
                if not text.check_is_text(body, f, c.allow_binary):
                    not_text.append(name)
                yield body

        def fill(writers: Mapping[str, cache.TokenWriter]) -> dict:
            docs = checked(text.read_documents(files, c.cache_dir))
            hasher = corpus.Hasher()
            if len(files) == 1:  # one document: its last val_fraction is validation
                body = next(iter(docs))
                hasher.add(names[0], body)
                tokens = tok.encode_array(body)
                n_val = max(1, int(round(len(tokens) * c.val_fraction)))
                if len(tokens) < 2:
                    raise DataError(f"data.path={c.path!r}: {files[0]} is too short to split ({len(tokens)} tokens)")
                writers["train"].write(tokens[:-n_val])
                writers["val"].write(tokens[-n_val:])
                return {"what": what, "not_text": not_text, "corpus": hasher.record("text")}
            is_val = validation_documents(names, sizes, c.val_fraction)
            _write_documents(writers, tok, docs, names, is_val, hasher)
            return {"what": what, "val_documents": [n for n, v in zip(names, is_val) if v], "not_text": not_text,
                    "corpus": hasher.record("text")}

        found = store.build(tok.dtype, fill)
    arrays, meta = _checked(found, store, tok)
    if meta.get("not_text") and not c.allow_binary:  # tokenized earlier under data.allow_binary=true
        raise DataError(
            f"data.path={c.path!r}: {', '.join(meta['not_text'][:3])} is not UTF-8 text (more than "
            f"{text.MAX_NOT_TEXT:.0%} undecodable or control bytes); set data.allow_binary=true to train on it anyway"
        )
    return _splits(arrays, meta, tok)


def _load_shards(c: Any, tok: Tokenizer) -> TokenSplits:
    if not c.dir:
        raise DataError("data.source=shards needs data.dir: a folder of llm.c-format .bin shards")
    reason = shards.missing_reason(c.dir)
    if reason:  # preparing missing data is the loader's decision; shards.py only reads and writes files
        if not c.prepare_if_missing:
            raise DataError(prepare.missing_shards_message(c.dir, tok.name, reason))
        log.warning("data.dir=%s %s and data.prepare_if_missing=true: preparing it now", c.dir, reason)
        prepare.run_prepare(prepare.PrepareConfig(out_dir=str(c.dir), tokenizer=tok.name))
    train, val, desc = shards.load_shard_splits(c.dir, tok.name, tok.n_vocab)
    return TokenSplits(train, val, tok.n_vocab, tok.name, desc, corpus.shards_record([*train, *val]))


_LOADERS = {Source.prose: _load_prose, Source.embedded: _load_embedded, Source.text: _load_text, Source.shards: _load_shards}


# The prose and embedded corpora of each data config this process has loaded: their content (the shipped
# corpus, Python's docs) does not change while the process lives, so the jobs of a sweep in one
# process (Hydra's basic launcher, a joblib worker, mltrain-study) hash and load them once. Text files and
# shards are looked at again.
_INSTALLED = (Source.prose, Source.embedded)
_INSTALLED_LOADED: dict[str, TokenSplits] = {}


def load_tokens(data: DataConfig | Mapping[str, Any]) -> TokenSplits:
    """Train/validation token arrays for the `data` section (or a mapping of its fields). DataError on bad
    or missing data."""
    c = data_config(data)
    key = repr(c)
    if Source(c.source) in _INSTALLED and key in _INSTALLED_LOADED:
        return _INSTALLED_LOADED[key]
    splits = _LOADERS[Source(c.source)](c, get_tokenizer(c.tokenizer))
    if Source(c.source) in _INSTALLED:
        _INSTALLED_LOADED[key] = splits
    log.debug("data: %s", splits.description)  # the caller logs splits.description
    return splits
