"""Benchmark mltrain-prepare's tokenization path, and project the wall time of FineWeb-Edu sample-10BT.

    python scripts/bench_tokenize.py [--mb 8] [--repeats 3] [--workers 1 2]

1. Builds a synthetic FineWeb-Edu-like parquet file (FineWeb-Edu's columns; realistic English: the
   paragraphs of the embedded Python-docs corpus, reshuffled into ~4.5 KB documents) of --mb MB.
2. Runs the real `run_prepare` on it (streaming `datasets` read, ordered worker pool, gpt2, shards
   written) --repeats times per worker count and prints the median end-to-end tokens/s and speed-ups.
3. Measures, in this process, the two rates that bound a big machine: one core's pure gpt2 tokenization
   rate (no I/O) and the main process' own per-token work in the pooled path (reading the documents,
   pickling them to a worker, unpickling the tokens, copying them into the shard buffer).
4. Projects 10B tokens on a 16-core machine. Assumption: 15 worker processes (one core left to the main
   process) scale linearly at the single-core tokenization rate, unless the main process saturates
   first; projected rate = min(15 x tokenize rate, main-process rate). A second, more pessimistic line
   applies the parallel efficiency measured here with 2 workers to all 15. The download (sample-10BT is
   ~27 GB of parquet) overlaps the work; its time at --download-mb-s is printed beside.

Offline: TIKTOKEN_CACHE_DIR is set up from ../shared/fixtures/gpt2-bpe (copied to a temp folder, as the
tests do) when that folder exists; otherwise tiktoken's normal download/cache is used.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "gpt2-bpe"
CACHE_NAMES = {"encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6", "vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee"}
TARGET_TOKENS = 10e9
BIG_CORES = 16


def setup_tiktoken(tmp: Path) -> str:
    if all((FIXTURES / n).is_file() for n in CACHE_NAMES):
        folder = tmp / "tiktoken"
        folder.mkdir()
        for name, cache_name in CACHE_NAMES.items():
            shutil.copyfile(FIXTURES / name, folder / cache_name)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        return f"gpt2 BPE files from {FIXTURES}"
    return "tiktoken's own cache/download (fixtures not found)"


def make_parquet(path: Path, megabytes: float, seed: int = 0) -> tuple[int, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mltrain.data import embedded

    paragraphs = [p for _, text in embedded.documents() for p in text.split("\n\n") if len(p) > 40]
    rng = random.Random(seed)
    rows, size, i = [], 0, 0
    while size < megabytes * 1e6:
        rng.shuffle(paragraphs)
        for start in range(0, len(paragraphs), 12):
            body = "\n\n".join(paragraphs[start : start + rng.randint(4, 20)])
            rows.append({
                "text": body, "id": f"<urn:uuid:{i:012d}>", "dump": "CC-MAIN-2024-10",
                "url": f"https://example.org/{i}", "date": "2024-02-21T12:00:00Z",
                "file_path": f"s3://commoncrawl/crawl-data/CC-MAIN-2024-10/{i}.warc.gz", "language": "en",
                "language_score": 0.9, "token_count": len(body) // 4, "score": 3.1, "int_score": 3,
            })  # fmt: skip
            size += len(body.encode())
            i += 1
            if size >= megabytes * 1e6:
                break
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1000)
    return len(rows), size


def run_once(parquet: Path, out: Path, workers: int) -> tuple[int, float]:
    from mltrain.data.prepare import PrepareConfig, run_prepare
    from mltrain.data.shards import read_shard

    cfg = PrepareConfig(
        data_files=str(parquet), out_dir=str(out), workers=workers, shard_tokens=50_000_000, val_tokens=100_000,
        progress=False, cache_dir=str(out.parent / "hf_cache"),
    )  # fmt: skip
    t0 = time.perf_counter()
    run_prepare(cfg)
    elapsed = time.perf_counter() - t0
    n = sum(len(read_shard(p)) for p in out.glob("*.bin"))
    shutil.rmtree(out)
    return n, elapsed


def pool_startup(workers: int) -> float:
    """Seconds to start run_prepare's worker pool (spawn + tokenizer load) up to a first result."""
    if workers <= 1:
        return 0.0
    import multiprocessing

    from mltrain.data.tokenizers import encode_batch_before, init_worker

    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers, initializer=init_worker, initargs=("gpt2",)) as pool:
        pool.map(encode_batch_before, [["warm-up"]] * workers, chunksize=1)
        return time.perf_counter() - t0


def main_process_rate(parquet: Path, tmp: Path) -> tuple[float, float, int]:
    """(single-core tokenize tokens/s, main-process tokens/s in the pooled path, tokens)."""
    import numpy as np

    from mltrain.data.prepare import PrepareConfig, _batches, open_dataset
    from mltrain.data.tokenizers import get_tokenizer

    cfg = PrepareConfig(data_files=str(parquet), cache_dir=str(tmp / "hf_cache"), progress=False)
    t0 = time.perf_counter()
    ds, _ = open_dataset(cfg)
    batches = [b.texts for b in _batches(ds, cfg, 0, None)]
    t_read = time.perf_counter() - t0
    tok = get_tokenizer("gpt2")
    t0 = time.perf_counter()
    encoded = [tok.encode_documents(texts, separator="before") for texts in batches]
    t_tok = time.perf_counter() - t0
    n = sum(len(t) for t, _ in encoded)
    buf = np.empty(n, dtype=np.uint16)
    t0 = time.perf_counter()
    pos = 0
    for texts, result in zip(batches, encoded):
        pickle.loads(pickle.dumps(texts, protocol=pickle.HIGHEST_PROTOCOL))  # to the worker and back: both
        tokens, _ = pickle.loads(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))  # ends' share, a bound
        buf[pos : pos + len(tokens)] = tokens
        pos += len(tokens)
    t_ipc = time.perf_counter() - t0
    return n / t_tok, n / (t_read + t_ipc), n


def _timed_tokenize(texts: list[str]) -> tuple[int, float]:
    from mltrain.data.tokenizers import get_tokenizer

    tok = get_tokenizer("gpt2")
    t0 = time.perf_counter()
    n = sum(len(tok.encode(t)) for t in texts)
    return n, time.perf_counter() - t0


def machine_parallelism(texts: list[str], k: int) -> float:
    """Aggregate pure-tokenization throughput of k independent processes / that of one (ideal: k)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    rates = {}
    for procs in (1, k):
        with ctx.Pool(procs) as pool:
            pool.map(_timed_tokenize, [texts[:10]] * procs)  # start-up and BPE load, not timed
            results = pool.map(_timed_tokenize, [texts] * procs)
        rates[procs] = sum(n for n, _ in results) / max(t for _, t in results)
    return rates[k] / rates[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=8.0, help="size of the synthetic parquet's text (MB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--download-mb-s", type=float, default=100.0, help="assumed Hub streaming bandwidth")
    args = ap.parse_args(argv)

    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench_tokenize_") as d:
        tmp = Path(d)
        print(f"tokenizer: {setup_tiktoken(tmp)}")
        parquet = tmp / "fineweb_edu_like.parquet"
        n_docs, n_bytes = make_parquet(parquet, args.mb)
        print(f"data: {n_docs:,} documents, {n_bytes / 1e6:.1f} MB of text ({parquet.stat().st_size / 1e6:.1f} MB parquet)")
        print(f"machine: {os.cpu_count()} CPU cores, Python {sys.version.split()[0]}")
        print()
        medians: dict[int, float] = {}
        steady: dict[int, float] = {}
        for w in args.workers:
            rates, times = [], []
            for r in range(args.repeats):
                n, elapsed = run_once(parquet, tmp / f"out_{w}_{r}", w)
                rates.append(n / elapsed)
                times.append(elapsed)
            startup = statistics.median(pool_startup(w) for _ in range(args.repeats))
            medians[w] = statistics.median(rates)
            steady[w] = n / max(statistics.median(times) - startup, 1e-3)
            runs = ", ".join(f"{x / 1e6:.2f}" for x in rates)
            print(
                f"run_prepare workers={w}: median {medians[w] / 1e6:.2f} M tokens/s end-to-end ({n:,} tokens; "
                f"runs: {runs}); pool start-up {startup:.2f} s; without it {steady[w] / 1e6:.2f} M tokens/s"
            )
        first = args.workers[0]
        for w in args.workers[1:]:
            print(
                f"speed-up workers={w} vs workers={first}: {medians[w] / medians[first]:.2f}x end-to-end, "
                f"{steady[w] / steady[first]:.2f}x without the pool start-up"
            )

        tok_rate, main_rate, n = main_process_rate(parquet, tmp)
        print()
        k = max(args.workers)
        if k > 1:
            import pyarrow.parquet as pq

            sample = pq.read_table(parquet, columns=["text"]).column("text").to_pylist()[:1500]
            print(
                f"machine check: {k} independent tokenizer processes reach {machine_parallelism(sample, k):.2f}x "
                f"the throughput of one (ideal {k}x; less means the cores are shared or busy, os.getloadavg()="
                f"{', '.join(f'{x:.1f}' for x in os.getloadavg())})"
            )
        print(f"single-core gpt2 tokenization (no I/O): {tok_rate / 1e6:.2f} M tokens/s")
        print(f"main process' own work per token in the pooled path: {main_rate / 1e6:.2f} M tokens/s")
        workers = BIG_CORES - 1
        linear = min(workers * tok_rate, main_rate)
        print(
            f"projection, {TARGET_TOKENS / 1e9:.0f}B tokens on {BIG_CORES} cores: {workers} workers at this machine's "
            f"single-core rate, scaling linearly, capped by the main process: {linear / 1e6:.1f} M tokens/s -> "
            f"{TARGET_TOKENS / linear / 60:.0f} min of tokenization"
        )
        if len(args.workers) > 1 and max(args.workers) > 1:
            w = max(args.workers)
            eff = min(1.0, steady[w] / steady[first] / w * first)
            pess = min(workers * tok_rate * eff, main_rate)
            print(
                f"  at the parallel efficiency measured here ({eff:.0%} for {w} workers): {pess / 1e6:.1f} M tokens/s -> "
                f"{TARGET_TOKENS / pess / 60:.0f} min"
            )
        dl = args.download_mb_s
        print(
            f"  the Hub download (~27 GB of parquet for sample-10BT) at an assumed {dl:.0f} MB/s takes "
            f"{27e3 / dl / 60:.0f} min and overlaps the work: the wall time is the larger of the two"
        )
        print(f"  for comparison, one worker end-to-end: {TARGET_TOKENS / medians.get(1, medians[first]) / 3600:.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
