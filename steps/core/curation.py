"""Which ingested chunk a reviewed summary belongs to: one rule, read by teacher (the chunks that need no teacher) and
filter-split (the chunks whose example is a reviewer's).

A feedback row names its document in one of the ways a person or the serving side would:

- `file`: the file's path relative to the folder it was found in (`notes/ed.md`), or its full path or URI, as ingest
  records it (`relative_path`, `source_uri`);
- `document`: the text the model was shown — one chunk of ingest's, as the serving side records it (matched by
  `document_sha256`, the chunk's key) — or the text of the whole file, as a reviewer pastes it (matched word for word,
  whitespace aside, against the file's cleaned text and, for text, Markdown and HTML, its text as written: ingest's
  `file_text_keys`).

A summary of a whole file attaches when ingest kept that file as one chunk; a file cut into several chunks needs one
summary per chunk (the row's `document` the chunk's text), else the summary would be trained against text it does not
describe. Such a row, a `file` that names no ingested file (or several), and two rows attaching to the same chunk are
problems, each named by the row's id: a reviewer's work is never dropped silently. A row whose document matches
nothing ingested is an example of its own (a document only the serving side saw).
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass, field


def text_key(text: str) -> str:
    """A text's key whatever its line breaks and spacing: the sha256 of its NFC words joined by single spaces."""
    words = unicodedata.normalize("NFC", text).split()
    return hashlib.sha256(" ".join(words).encode("utf-8")).hexdigest()


@dataclass
class Attached:
    by_chunk: dict[str, dict] = field(default_factory=dict)  # a chunk's document_sha256 -> its curated row
    unattached: list[dict] = field(default_factory=list)  # rows naming no ingested document: examples of their own
    problems: list[str] = field(default_factory=list)


def _files(documents: list[dict]) -> dict[str, list[dict]]:
    """Ingest's chunks grouped by their file (source_uri), in chunk order."""
    files: dict[str, list[dict]] = {}
    for doc in documents:
        files.setdefault(doc["source_uri"], []).append(doc)
    return {uri: sorted(chunks, key=lambda d: d["chunk"]) for uri, chunks in files.items()}


def attach(curated: list[dict], documents: list[dict]) -> Attached:
    """Each curated row (steps/feedback.py's curated.jsonl) on the chunk it summarises; see the module docstring."""
    files = _files(documents)
    by_sha = {d["document_sha256"]: d for d in documents}
    by_text = {text_key(d["document"]): d for d in documents}
    by_file_text = {key: uri for uri, chunks in files.items() for key in chunks[0].get("file_text_keys", ())}
    found = Attached()
    attached_by: dict[str, str] = {}
    for row in curated:
        fb = row["feedback"]
        who = f"feedback row {fb['id']!r}"
        name = fb.get("file")
        if name:
            uris = [u for u, c in files.items() if name in (u, c[0].get("relative_path"))]
            if len(uris) != 1:
                known = ", ".join(sorted(c[0].get("relative_path") or u for u, c in files.items())[:8])
                what = "no ingested file" if not uris else f"{len(uris)} files ({', '.join(uris)})"
                found.problems.append(
                    f"{who}: file {name!r} names {what}; give the path relative to the folder (ingested: {known}; "
                    "out/chunks/skipped.json lists the files skipped, with why)"
                )
                continue
            uri = uris[0]
        elif (chunk := by_sha.get(row["document_sha256"]) or by_text.get(text_key(row["document"]))) is not None:
            uri = None
        elif (uri := by_file_text.get(text_key(row["document"]))) is None:
            found.unattached.append(row)
            continue
        if uri is not None:
            chunks = files[uri]
            if len(chunks) > 1:
                found.problems.append(
                    f"{who}: its summary is of the whole of {uri}, which ingest cut into {len(chunks)} chunks (the "
                    "served prompt holds less); a summary trains against the chunk it describes: write one row per "
                    "chunk with the chunk's text as `document` (out/chunks/documents.jsonl), or split the file"
                )
                continue
            chunk = chunks[0]
        key = chunk["document_sha256"]
        if key in attached_by:
            found.problems.append(
                f"{who} and feedback row {attached_by[key]!r} both summarise {chunk['source_uri']} "
                f"(chunk {chunk['chunk']}): keep one"
            )
            continue
        attached_by[key] = fb["id"]
        found.by_chunk[key] = row
    return found
