"""`mltrain-prepare`: FineWeb-Edu (or local files) -> llm.c-format uint16 token shards.

    mltrain-prepare                                    # the ~10B-token sample-10BT, streamed from the Hub
    mltrain-prepare prepare.max_tokens=20000000        # a small sample of it
    mltrain-prepare prepare.data_files='dump/*.parquet' prepare.out_dir=/data/mine

Documents are streamed with `datasets` (Hub, or local json/jsonl/parquet/text files through the same
`load_dataset` call), tokenized in `workers` processes (ordered, so the output never depends on the
worker count), and written as in llm.c's fineweb.py: the end-of-text token comes BEFORE each document,
documents run on across shard boundaries, and the shards are

    {prefix}_val_000000.bin     the first `val_tokens` tokens (validation)
    {prefix}_train_000001.bin   then `shard_tokens` tokens per shard (the last one may be shorter)
    ...

Validation size rule: `val_tokens`, but at most a tenth of `max_tokens` when that is set (so a small
sample still gets >= 90% training tokens), and at least 1.

Every file is written atomically. After each shard, `prepare_state.json` records the shards done, the
documents consumed and how many tokens of the next document were already written (plus `datasets`'
own stream position when streaming). An interrupted run, restarted with the same settings, resumes
there; its shards are byte-identical to an uninterrupted run's. A file lock allows one preparation per
folder at a time: a concurrent one (another rank with data.prepare_if_missing) waits, then finds it done.

Hydra: `conf/prepare.yaml` writes the run's config and log under `<out_dir>/.prepare_logs/<time>/`,
never into the current directory.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generator, Iterator, Mapping, Optional, cast

import hydra
import numpy as np
from hydra.core.config_store import ConfigStore
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from mltrain.core import atomic
from mltrain.data import inputs, shards
from mltrain.core.interrupts import CtrlC
from mltrain.core.errors import DataError, MltrainError, first_line, report
from mltrain.data.text import datasets_local_only
from mltrain.data.tokenizers import Tokenizer, encode_batch_before, get_tokenizer, init_worker

log = logging.getLogger(__name__)

DEFAULT_OUT_DIR = "${oc.env:MLTRAIN_DATA,${oc.env:HOME,.}/.cache/mltrain/data}/fineweb_edu_sample-10BT"
STATE_FILE = "prepare_state.json"
LOCK_FILE = ".prepare.lock"
STATE_VERSION = 1
BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".txt": "text", ".md": "text"}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".lz4")


@dataclass
class PrepareConfig:
    dataset: str = "HuggingFaceFW/fineweb-edu"  # Hub dataset (ignored when data_files is set)
    name: Optional[str] = "sample-10BT"  # its configuration: sample-10BT | sample-100BT | sample-350BT | CC-MAIN-...
    split: str = "train"
    # Local json/jsonl/parquet/text files instead of the Hub: a file, a folder or a glob. The builder
    # (json, parquet, text) follows the extension; a text file is one document.
    data_files: Optional[str] = None
    text_field: str = "text"  # column holding each document's text
    # A text file (.txt/.md) whose bytes are more than 1% undecodable or control characters is refused, as
    # data=text refuses it (data/inputs.py); true: tokenize it anyway, its undecodable bytes as U+FFFD.
    allow_binary: bool = False
    tokenizer: str = "gpt2"  # tiktoken encoding (<= 65,536 ids: shards are uint16)
    out_dir: str = DEFAULT_OUT_DIR
    prefix: str = "fineweb_edu"  # shard names: {prefix}_val_000000.bin, {prefix}_train_000001.bin, ...
    shard_tokens: int = 100_000_000  # tokens per training shard (llm.c: 1e8)
    val_tokens: int = 100_000_000  # the validation shard (first shard); at most max_tokens/10
    max_tokens: Optional[int] = None  # cap on all tokens written (null: the whole dataset)
    workers: int = max(1, (os.cpu_count() or 2) - 1)  # tokenizer processes; 1 = in the main process
    docs_per_task: int = 256  # documents per worker task
    streaming: bool = True  # stream (Hub: no full download); false = datasets' Arrow cache first
    cache_dir: Optional[str] = None  # datasets' cache folder (null: its default, ~/.cache/huggingface)
    progress: bool = True  # tqdm bar with tokens/s


@dataclass
class PrepareRoot:
    prepare: PrepareConfig = field(default_factory=PrepareConfig)


def register_configs() -> None:
    ConfigStore.instance().store(name="prepare_schema", node=PrepareRoot)


register_configs()


def prepare_config(prepare: PrepareConfig | Mapping[str, Any]) -> PrepareConfig:
    """`prepare` (a PrepareConfig, or a mapping of its fields or of the root holding them under
    `prepare`: the composed config) as a PrepareConfig with interpolations resolved."""
    fields: Any = prepare
    if isinstance(prepare, PrepareConfig):
        fields = OmegaConf.to_container(OmegaConf.structured(prepare), resolve=True)
    elif "prepare" in prepare:
        fields = prepare["prepare"]
    if OmegaConf.is_config(fields):
        fields = OmegaConf.to_container(fields, resolve=True)
    return cast(PrepareConfig, OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PrepareConfig), fields)))


def validation_tokens(c: PrepareConfig) -> int:
    """Size of the validation shard: val_tokens, capped at max_tokens // 10 (at least 1)."""
    if c.max_tokens is None:
        return c.val_tokens
    return max(1, min(c.val_tokens, c.max_tokens // 10))


def shard_name(c: PrepareConfig, index: int) -> str:
    return f"{c.prefix}_{'val' if index == 0 else 'train'}_{index:06d}.bin"


# ---------------------------------------------------------------------------------------------
# Input documents


def resolve_data_files(spec: str) -> tuple[list[Path], str]:
    """(files sorted by name, datasets builder) for prepare.data_files; DataError naming it if none."""
    p = Path(os.path.expanduser(spec))

    def builder_of(f: Path) -> str | None:
        name = f.name.lower()
        for comp in COMPRESSIONS:
            name = name.removesuffix(comp)
        return BUILDERS.get(Path(name).suffix)

    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = [f for f in p.rglob("*") if f.is_file() and builder_of(f)]
    else:
        files = [Path(f) for f in glob.glob(str(p), recursive=True) if Path(f).is_file()]
    if not files:
        raise DataError(f"prepare.data_files={spec!r} matches no files (give a file, a folder or a quoted glob)")
    bad = next((f for f in files if builder_of(f) is None), None)
    if bad is not None:
        raise DataError(f"prepare.data_files: {bad} is not .json/.jsonl/.parquet/.txt/.md (optionally compressed)")
    kinds = {str(builder_of(f)) for f in files}
    if len(kinds) > 1:
        raise DataError(f"prepare.data_files={spec!r} mixes file types ({', '.join(sorted(kinds))}); use one type")
    files = sorted(f.resolve() for f in files)
    inputs.check_files(files, "prepare.data_files")  # an empty file: named, not datasets' StopIteration
    return files, kinds.pop()


def _offline_message(c: PrepareConfig, err: BaseException | None) -> str:
    why = f" ({type(err).__name__}: {str(err)[:200]})" if err else ""
    return (
        f"cannot reach the Hugging Face Hub to stream {c.dataset} ({c.name}): this machine looks offline{why}. "
        f"Run mltrain-prepare where the Hub is reachable, or tokenize local files instead: "
        f"prepare.data_files=/path/to/*.parquet (json, jsonl, parquet or text; column prepare.text_field={c.text_field})."
    )


def _check_hub_reachable(c: PrepareConfig) -> None:
    """Fail in seconds, not after datasets' minute of retries, when the Hub cannot be reached."""
    import datasets

    if datasets.config.HF_HUB_OFFLINE:  # the user asked for offline mode: datasets may serve its cache
        return
    import requests
    from huggingface_hub import constants

    try:
        requests.head(constants.ENDPOINT, timeout=10, allow_redirects=False)
    except requests.RequestException as err:
        raise DataError(_offline_message(c, err)) from err


def open_dataset(c: PrepareConfig) -> tuple[Any, str]:
    """(dataset: an IterableDataset when streaming, else a Dataset; a description for the log)."""
    import datasets

    if c.data_files:
        files, builder = resolve_data_files(c.data_files)
        kwargs = {"sample_by": "document", "encoding_errors": "replace"} if builder == "text" else {}
        try:
            with datasets_local_only():
                ds = datasets.load_dataset(
                    builder, data_files=[str(f) for f in files], split="train", streaming=c.streaming,
                    cache_dir=c.cache_dir, **kwargs,
                )  # fmt: skip
        except Exception as err:
            raise DataError(
                f"datasets could not read prepare.data_files={c.data_files!r} as {builder}: {type(err).__name__}: {str(err)[:300]}"
            ) from err
        return ds, f"{len(files)} local {builder} file(s) from {c.data_files}"
    _check_hub_reachable(c)
    log.warning(
        "downloading (streaming=%s) %s, name=%s, split=%s from the Hugging Face Hub%s",
        c.streaming, c.dataset, c.name, c.split,
        "" if c.max_tokens else " - all of it (sample-10BT: ~10B tokens, ~27 GB of parquet)",
    )  # fmt: skip
    try:
        ds = datasets.load_dataset(c.dataset, name=c.name, split=c.split, streaming=c.streaming, cache_dir=c.cache_dir)
    except (ConnectionError, OSError) as err:
        raise DataError(_offline_message(c, err)) from err
    except Exception as err:  # e.g. a misspelt dataset, configuration name or split
        raise DataError(
            f"cannot open prepare.dataset={c.dataset} (prepare.name={c.name}, prepare.split={c.split}) on the "
            f"Hugging Face Hub: {type(err).__name__}: {str(err)[:300]}"
        ) from err
    return ds, f"{c.dataset} ({c.name}, {c.split})"


def _source(c: PrepareConfig) -> str:
    return f"prepare.data_files={c.data_files!r}" if c.data_files else f"prepare.dataset={c.dataset} ({c.name}, {c.split})"


@dataclass
class _Batch:
    first_doc: int  # index of texts[0] in the document stream
    texts: list[str] | None
    stream_state: dict | None  # datasets' stream position at document stream_state_doc (streaming only)
    stream_state_doc: int


def _batches(ds: Any, c: PrepareConfig, start_doc: int, resume: dict | None) -> Generator[_Batch, None, None]:
    """The documents from index start_doc on, in lists of about docs_per_task, with stream positions.

    Only the text column is read, a batch at a time (Arrow -> Python per column, not per row): the main
    process then reads ~60M tokens/s of parquet, so it keeps up with many tokenizer workers.
    """
    import datasets

    streaming = isinstance(ds, datasets.IterableDataset)
    if ds.column_names == [] and c.data_files:  # None: not known before reading (text files)
        raise DataError(f"prepare.data_files={c.data_files!r} holds no documents (no records in it)")
    try:
        ds = ds.select_columns([c.text_field])
    except ValueError:
        raise DataError(
            f"prepare.text_field={c.text_field!r} is not a column of the data (columns: {', '.join(ds.column_names or [])})"
        ) from None
    pos = 0
    if streaming and resume and resume.get("stream_state") is not None:
        ds.load_state_dict(resume["stream_state"])  # datasets' own resumable position (no re-reading)
        pos = int(resume["stream_state_doc"])
    elif not streaming and start_doc:
        ds = ds.select(range(min(start_doc, len(ds)), len(ds)))
        pos = start_doc
    chunks = ds.iter(batch_size=c.docs_per_task)
    try:
        while True:
            state = ds.state_dict() if streaming else None
            state_doc = pos
            try:
                chunk = next(chunks, None)
            except (KeyboardInterrupt, MltrainError):
                raise
            except Exception as err:  # a malformed line or file, a broken stream: one line, not a traceback
                raise DataError(
                    f"cannot read document {pos:,} onwards of {_source(c)}: {type(err).__name__}: "
                    f"{first_line(err)[:300]}"
                ) from None
            if chunk is None:
                return
            texts = [t or "" for t in chunk[c.text_field]]
            _check_texts(texts, c, pos)
            pos += len(texts)
            if pos <= start_doc:  # resuming: documents the finished shards already hold
                continue
            drop = max(0, start_doc - state_doc)
            yield _Batch(state_doc + drop, texts[drop:], state, state_doc)
    finally:
        close = getattr(chunks, "close", None)  # stop datasets' reader now, not at interpreter exit
        if close is not None:
            close()


def _check_texts(texts: list, c: PrepareConfig, first_doc: int) -> None:
    """DataError naming the document (for local .jsonl files: the file and line) whose text field holds no
    text: a number, a list, an object (a missing or null field counts as an empty document)."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            where = _document_place(c, first_doc + i)
            raise DataError(f"{where}: prepare.text_field={c.text_field!r} is {json.dumps(text)[:80]} "
                            f"({type(text).__name__}), not a string: every document's text must be a JSON string")


def _document_place(c: PrepareConfig, doc: int) -> str:
    """Where document number `doc` (from 0) of the stream is: `file, line N` when the source is local
    uncompressed .jsonl files (one document per non-blank line), else its number in the source."""
    files, builder = resolve_data_files(c.data_files) if c.data_files else ([], None)
    if builder == "json" and all(f.suffix.lower() == ".jsonl" for f in files):
        left = doc
        for f in files:
            with open(f, "rb") as lines:
                for n, line in enumerate(lines, 1):
                    if line.strip():
                        if left == 0:
                            return f"{f}, line {n}"
                        left -= 1
    return f"document {doc:,} of {_source(c)}"


def _judged(batches: Generator[_Batch, None, None], c: PrepareConfig) -> Generator[_Batch, None, None]:
    """Local text files (one document each, read with undecodable bytes as U+FFFD) judged as data=text
    judges them (data/inputs.py): not text is refused naming the file unless prepare.allow_binary, a
    few undecodable bytes are said in one warning. Other sources pass as they are (their readers refuse
    bytes that are not UTF-8)."""
    files, builder = resolve_data_files(c.data_files) if c.data_files else ([], None)
    try:
        for b in batches:
            if builder == "text":
                for i, body in enumerate(b.texts or []):
                    inputs.judge_text(body, files[b.first_doc + i], c.allow_binary, key="prepare.data_files",
                                      allow_key="prepare.allow_binary")
            yield b
    finally:
        batches.close()


def _encoded(batches: Iterator[_Batch], tok: Tokenizer, workers: int,
             ) -> Generator[tuple[_Batch, np.ndarray, np.ndarray], None, None]:
    """(batch, tokens, per-document lengths) in input order; eot before each document."""
    if workers <= 1:
        for b in batches:
            tokens, lengths = tok.encode_documents(b.texts or [], separator="before")
            b.texts = None
            yield b, tokens, lengths
        return
    # spawn: workers start clean (no inherited Arrow/threads state) and import only tokenizers.py.
    ctx = multiprocessing.get_context("spawn")
    # Ctrl-C reaches the whole process group, workers too. A worker still importing when it comes would
    # print its own traceback, so SIGINT is ignored while they are started: an ignored signal stays
    # ignored across exec, and Python leaves it so. The main process handles it again right after.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool = ctx.Pool(workers, initializer=init_worker, initargs=(tok.name,))
    finally:
        signal.signal(signal.SIGINT, previous)
    with pool:
        pending: collections.deque = collections.deque()
        for b in batches:
            pending.append((b, pool.apply_async(encode_batch_before, (b.texts,))))
            b.texts = None
            if len(pending) >= 4 * workers:  # bounded read-ahead keeps memory flat
                done, res = pending.popleft()
                yield done, *res.get()
        while pending:
            done, res = pending.popleft()
            yield done, *res.get()


# ---------------------------------------------------------------------------------------------
# State and resume


def _fingerprint(c: PrepareConfig) -> dict:
    """Everything that changes the bytes of the shards (not workers, streaming, caches, progress)."""
    source: Any = {"dataset": c.dataset, "name": c.name, "split": c.split}
    if c.data_files:
        files, builder = resolve_data_files(c.data_files)
        source = {"builder": builder, "files": [[str(f), f.stat().st_size] for f in files]}
    return {
        "format": STATE_VERSION,
        "source": source,
        "text_field": c.text_field,
        "tokenizer": c.tokenizer,
        "prefix": c.prefix,
        "shard_tokens": c.shard_tokens,
        "val_tokens": validation_tokens(c),
        "max_tokens": c.max_tokens,
    }


def _fresh_state(fp: dict) -> dict:
    return {
        "version": STATE_VERSION, "fingerprint": fp, "done": False, "shards": [], "tokens": 0,
        "docs": 0, "skip_tokens": 0, "stream_state": None, "stream_state_doc": 0,
    }  # fmt: skip


def _load_state(out: Path, fp: dict) -> dict:
    path = out / STATE_FILE
    if not path.exists():
        stray = sorted(p.name for p in out.glob("*.bin"))
        if stray:
            raise DataError(
                f"prepare.out_dir={out} already holds .bin files ({', '.join(stray[:3])}{', ...' if len(stray) > 3 else ''}) "
                f"but no {STATE_FILE}: they were not made by this preparation. Choose another prepare.out_dir."
            )
        return _fresh_state(fp)
    try:
        state = json.loads(path.read_text())
    except ValueError as err:
        raise DataError(f"{path} is not valid JSON ({err}); delete {out} and start again") from err
    if state.get("fingerprint") != fp:
        old = state.get("fingerprint") or {}
        diff = sorted(k for k in set(old) | set(fp) if old.get(k) != fp.get(k))
        raise DataError(
            f"prepare.out_dir={out} holds a preparation made with other settings ({', '.join(diff)} differ). "
            f"Use another prepare.out_dir, or delete that folder to start again."
        )
    for entry in state["shards"]:
        p = out / entry["name"]
        expected = shards.HEADER_BYTES + 2 * entry["tokens"]
        if not p.is_file() or p.stat().st_size != expected:
            raise DataError(f"{p} is missing or has changed since it was written; delete {out} and start again")
    return state


def check_shard_tokenizer(tok: Tokenizer) -> None:
    """DataError unless every id of `tok` fits the shards' uint16."""
    if tok.n_vocab > 65536:
        raise DataError(
            f"prepare.tokenizer={tok.name} has {tok.n_vocab:,} token ids; llm.c shards store uint16 "
            f"(at most 65,536 ids): use gpt2, r50k_base or p50k_base"
        )
    if tok.eot_token is None:
        log.warning("prepare.tokenizer=%s has no end-of-text token: documents are separated by a blank line", tok.name)


def _after_shard(path: Path) -> None:
    """Called after each shard and its state are committed. (Tests replace it to simulate a crash.)"""


# ---------------------------------------------------------------------------------------------


def missing_shards_message(folder: str, tokenizer: str, reason: str) -> str:
    """What to tell a user whose data.dir holds no shards: the command that makes them."""
    extra = f" prepare.tokenizer={tokenizer}" if tokenizer != "gpt2" else ""
    return (
        f"data.dir={folder!r} {reason}. To make the shards, run:\n"
        f"    mltrain-prepare prepare.out_dir={folder}{extra}\n"
        f"By default that streams and tokenizes the ~10B-token FineWeb-Edu sample (HuggingFaceFW/fineweb-edu, "
        f"sample-10BT: a ~27 GB download and about one CPU-hour of tokenization); add prepare.max_tokens=N for a small sample "
        f"(e.g. prepare.max_tokens=20000000) or prepare.data_files=... for local files. "
        f"Or rerun with data.prepare_if_missing=true to prepare automatically (this downloads)."
    )


def run_prepare(cfg: PrepareConfig | Mapping[str, Any]) -> Path:
    """Prepare (or finish preparing) the shards in cfg.out_dir and return that folder."""
    c = prepare_config(cfg)
    for key in ("shard_tokens", "val_tokens", "workers", "docs_per_task"):
        if getattr(c, key) <= 0:
            raise DataError(f"prepare.{key}={getattr(c, key)} must be > 0")
    if c.max_tokens is not None and c.max_tokens < 2:
        raise DataError(f"prepare.max_tokens={c.max_tokens} must be >= 2 (a validation and a training token)")
    tok = get_tokenizer(c.tokenizer, key="prepare.tokenizer")
    check_shard_tokenizer(tok)
    out = Path(os.path.expanduser(c.out_dir))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataError(f"cannot create prepare.out_dir={out} ({err})") from err
    with _exclusive(out), CtrlC(defer=True) as ctrl_c:  # the first Ctrl-C stops after a committed shard
        return _prepare_locked(c, tok, out, ctrl_c)


@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """One preparation per folder at a time; a second one (e.g. another rank) waits, then sees it done."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        yield
        return
    with os.fdopen(atomic.open_no_follow(out / LOCK_FILE, os.O_RDWR | os.O_CREAT), "r+") as f:  # never through a link
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("another mltrain-prepare is writing %s; waiting for it to finish", out)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _prepare_locked(c: PrepareConfig, tok: Tokenizer, out: Path, ctrl_c: Optional[CtrlC] = None) -> Path:
    atomic.remove_stale_temps(out)
    state = _load_state(out, _fingerprint(c))
    if state["done"]:
        log.info("%s is already complete: %d shards, %s tokens", out, len(state["shards"]), f"{state['tokens']:,}")
        return out

    ds, what = open_dataset(c)
    writer = _ShardWriter(c, out, state, ctrl_c)
    log.info(
        "tokenizing %s with %s in %d worker(s) into %s%s", what, tok.name, c.workers, out,
        f" (resuming at shard {writer.index}, {writer.written:,} tokens done)" if writer.index else "",
    )  # fmt: skip
    from tqdm.auto import tqdm

    bar = tqdm(total=c.max_tokens, initial=writer.written, unit="tok", unit_scale=True, disable=not c.progress,
               desc="tokens")
    started = time.perf_counter()
    batches = _judged(_batches(ds, c, int(state["docs"]), state), c)
    encoded = _encoded(batches, tok, c.workers)
    try:
        new_tokens = _fill_shards(encoded, writer, int(state["skip_tokens"]), bar)
    finally:
        encoded.close()
        batches.close()
        bar.close()
    if len(state["shards"]) < 2:
        raise DataError(
            f"the data held only {writer.written:,} tokens, not enough for a training shard after the "
            f"{validation_tokens(c):,}-token validation shard: lower prepare.val_tokens (and delete {out})"
        )
    state["done"] = True
    atomic.write_json(out / STATE_FILE, state)
    elapsed = time.perf_counter() - started
    log.info(
        "done: %s tokens in %d shards in %s (%.0f tokens/s this run)",
        f"{writer.written:,}", len(state["shards"]), out, new_tokens / max(elapsed, 1e-9),
    )  # fmt: skip
    return out


class _ShardWriter:
    """The shard being filled (`buf[:fill]`, shard number `index`) and its commit: the shard file, then the
    state file that records it and where the document stream stands, so a rerun resumes after it."""

    def __init__(self, c: PrepareConfig, out: Path, state: dict, ctrl_c: Optional[CtrlC] = None):
        self.c, self.out, self.state, self.ctrl_c = c, out, state, ctrl_c
        self.index, self.written = len(state["shards"]), state["tokens"]
        self.buf, self.fill = np.empty(self.capacity(self.index), dtype=shards.TOKEN_DTYPE), 0

    def capacity(self, i: int) -> int:
        n = validation_tokens(self.c) if i == 0 else self.c.shard_tokens
        return n if self.c.max_tokens is None else min(n, self.c.max_tokens - self.written)

    @property
    def done(self) -> bool:
        return len(self.buf) == 0  # prepare.max_tokens reached

    def check_stop(self) -> None:
        """KeyboardInterrupt if Ctrl-C was pressed (mltrain/core/interrupts.py)."""
        if self.ctrl_c is not None:
            self.ctrl_c.check()

    def put(self, tokens: np.ndarray, off: int) -> int:
        """Copy tokens from `off` on into the shard, as many as fit; returns how many."""
        n = min(len(tokens) - off, len(self.buf) - self.fill)
        self.buf[self.fill : self.fill + n] = tokens[off : off + n]
        self.fill += n
        return n

    def commit(self, batch: _Batch, cum: np.ndarray, off: int) -> None:
        """Write the shard; the stream resumes at token `off` of `batch` (`cum`: its documents' ends)."""
        state, name = self.state, shard_name(self.c, self.index)
        shards.write_shard(self.out / name, self.buf[: self.fill])
        k = int(np.searchsorted(cum, off, side="right"))  # documents of this batch fully written
        self.written += self.fill
        state.update(
            shards=[*state["shards"], {"name": name, "tokens": self.fill}], tokens=self.written,
            docs=batch.first_doc + k, skip_tokens=off - (int(cum[k - 1]) if k else 0),
            stream_state=batch.stream_state, stream_state_doc=batch.stream_state_doc,
        )  # fmt: skip
        atomic.write_json(self.out / STATE_FILE, state)
        _after_shard(self.out / name)
        self.check_stop()  # a Ctrl-C stops here, every finished shard committed
        self.index += 1
        self.buf, self.fill = np.empty(max(self.capacity(self.index), 0), dtype=shards.TOKEN_DTYPE), 0


def _fill_shards(encoded: Iterator[tuple[_Batch, np.ndarray, np.ndarray]], writer: _ShardWriter, skip: int,
                 bar: Any) -> int:
    """Tokenized batches into shards until the data or prepare.max_tokens runs out; a resumed run first
    drops the `skip` tokens of its first document that the last shard already holds. Returns the tokens
    written by this run."""
    new_tokens, last, finished = 0, None, writer.done
    for batch, tokens, lengths in encoded:
        writer.check_stop()
        if finished:
            break
        cum = np.cumsum(lengths)
        off, skip = skip, 0
        while off < len(tokens):
            n = writer.put(tokens, off)
            off, new_tokens = off + n, new_tokens + n
            bar.update(n)
            if writer.fill == len(writer.buf):
                writer.commit(batch, cum, off)
                if writer.done:
                    finished = True
                    break
        last = (batch, cum, off)
        if finished:
            break
    if writer.fill and last is not None:  # the data ran out: the final, shorter shard
        writer.commit(*last)
    return new_tokens


def progress_note(out_dir: str) -> str:
    """What an interrupted or failed preparation kept in `out_dir` (from its state file)."""
    try:
        state = json.loads((Path(os.path.expanduser(out_dir)) / STATE_FILE).read_text())
        n, tokens = len(state["shards"]), int(state["tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"no finished shard was kept in {out_dir}"
    return (f"{n} finished shard{'s' if n != 1 else ''} ({tokens:,} tokens) kept in {out_dir}; run the same "
            f"command again to resume")


class PrepareGuard(Callback):
    """Before Hydra creates its log folder under prepare.out_dir: one line, not a traceback, when it cannot."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from mltrain.core import guarded

        out, logs = Path(os.path.expanduser(str(config.prepare.out_dir))), Path(config.hydra.run.dir)
        try:
            # Hydra writes .hydra/ and prepare.log there: never through a link below prepare.out_dir
            guarded.refuse_linked([logs / ".hydra", logs / "prepare.log", out / STATE_FILE], out)
            Path(config.hydra.run.dir).mkdir(parents=True, exist_ok=True)
        except MltrainError as err:
            report("mltrain-prepare", str(err))
            sys.exit(2)
        except OSError as err:
            report("mltrain-prepare", f"cannot create prepare.out_dir={config.prepare.out_dir} "
                                      f"({err.strerror or err}); choose a writable prepare.out_dir")
            sys.exit(2)


@hydra.main(version_base="1.3", config_path="pkg://mltrain.conf", config_name="prepare")
def hydra_main(cfg: DictConfig) -> None:
    out_dir = str(cfg.prepare.out_dir)
    import datasets

    # datasets logs its read errors itself before raising them; the one line below says it already.
    datasets.utils.logging.set_verbosity(logging.CRITICAL)
    try:
        run_prepare(prepare_config(cfg.prepare))  # typed once, here: below it the code takes a PrepareConfig
    except MltrainError as err:
        report("mltrain-prepare", str(err))
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: every finished shard is committed; say so, without a traceback
        report("mltrain-prepare", progress_note(out_dir), kind="interrupted")
        sys.exit(130)
    except OSError as err:  # a full disk, a folder that turned read-only: what failed and what is kept
        where = f"{err.filename}: " if err.filename else ""
        report("mltrain-prepare", f"{where}{err.strerror or err}; {progress_note(out_dir)}")
        sys.exit(2)
