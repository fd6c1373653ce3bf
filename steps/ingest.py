"""ingest: documents (PDF, text, Markdown, HTML) from a folder or an S3 prefix, cleaned and cut into chunks the
summariser's prompt holds, in the base model's own tokens.

    python -m steps.ingest --documents s3://bucket/documents/ --base-model HuggingFaceTB/SmolLM2-135M-Instruct \
        --base-revision main --out out/chunks

Produces in `--out`: `documents.jsonl`, one row per chunk (`id`, `document`, `document_sha256` of the chunk's text,
`source_uri`, `source_sha256` and `relative_path` (to its folder or prefix) of the file it came from, `file_text_keys`
(the keys a reviewer's paste of the whole file is matched by: `steps.core.curation`), `chunk`/`chunks`,
`prompt_tokens`, `kind`),
`skipped.json` (every file that gave no text, by name, with why) and `result.json`.

Cleaning: text is NFC, control characters go; in PDFs the lines repeated at the top or bottom of most pages (running
headers, footers, page numbers) are dropped and words hyphenated across a line end are joined; lines of a paragraph
are joined and whitespace collapsed. Chunks are whole paragraphs where they fit, else sentences, else words.

How much a chunk may hold is derived, not set: the served prompt (`steps.contract.prompting.messages`, rendered with the
base's chat template and tokenizer) plus the served answer cap must fit the served context
(`steps.contract.serving_config.SERVING`), and the chunk must pass the dataset's own row bounds
(`steps.core.dataset`), so the
published rows are never cut by the prompt nor refused by fetch-dataset.

A file that yields no text — an unreadable, encrypted, blank or image-only PDF, undecodable text — is reported by name
with its reason (in `skipped.json` and on stderr), counted and skipped: one bad file never stops the batch. So is a
damaged PDF even when some of its text reads: one cut short (no end-of-file marker) or one MuPDF reports lost objects
in (its messages, and how many pages gave text, are in the reason); its text would end mid-sentence where nobody sees.
A PDF whose only fault was a cross-reference table MuPDF rebuilt from the objects is read. A folder with no usable
document at all is an error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from steps.contract import serving_config
from steps.contract.prompting import MAX_DOCUMENT_CHARS, messages
from steps.core.base_model import base_model_problems
from steps.core.cli import parse_config, refuse, timed, write_result
from steps.core.curation import text_key
from steps.core.dataset import document_sha256, document_token_budget, estimate_tokens
from steps.core.defaults import SHARED
from steps.core.io import atomic_dir, is_uri, write_json, write_jsonl

DOCUMENTS_FILE = "documents.jsonl"
SKIPPED_FILE = "skipped.json"
KINDS = {".pdf": "pdf", ".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown"}
KINDS |= {".html": "html", ".htm": "html"}
# A line is a running header or footer when it is among the first or last EDGE_LINES lines of at least
# REPEATED_SHARE of the pages (digits ignored, so "Page 3 of 9" repeats); only documents of MIN_PAGES pages or more
# have enough pages to tell. Edges are at most a third of a page's lines, and a header is a short line
# (HEADER_MAX_CHARS): body text that merely repeats stays.
EDGE_LINES = 2
HEADER_MAX_CHARS = 100
REPEATED_SHARE = 0.5
MIN_PAGES = 2


class IngestError(ValueError):
    """Raised when no document could be read at all, or the input location is wrong."""


@dataclass
class IngestConfig:
    out: Path = field(metadata={"help": "folder to write documents.jsonl and skipped.json into"})
    documents: str = field(
        default="data/documents",
        metadata={
            "help": "folder or s3://bucket/prefix/ holding PDF, text, Markdown, HTML; several: separated by commas"
        },
    )
    base_model: str = field(
        default=SHARED.base_model,
        metadata={"help": "base model (hub id or folder): its tokenizer and chat template size the chunks"},
    )
    base_revision: str = field(default=SHARED.base_revision, metadata={"help": "hub revision of the base model"})


@dataclass
class IngestResult:
    files: int
    documents: int
    chunks: int
    skipped: int
    chunk_token_budget: int


# --- reading ---------------------------------------------------------------------------------------------------------


def _sources(location: str) -> Iterator[tuple[str, str, Callable[[], bytes]]]:
    """(uri, path relative to `location`, read) for every file under `location`, sorted by uri."""
    if is_uri(location):
        import fsspec

        fs, root = fsspec.core.url_to_fs(location)
        try:
            found = sorted(fs.find(root))
        except FileNotFoundError as e:
            raise IngestError(f"--documents {location}: not found; check the bucket and prefix") from e
        protocol = location.split("://", 1)[0]
        for path in found:
            yield f"{protocol}://{path}", path[len(root) :].lstrip("/"), (lambda p=path: fs.cat_file(p))
        return
    root = Path(location)
    if not root.is_dir():
        raise IngestError(f"--documents {location}: not a folder; give a folder or an s3://bucket/prefix/")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        yield str(path), path.relative_to(root).as_posix(), path.read_bytes


class Unusable(Exception):
    """A file that yields no text, or only part of it; the message says why (reported, never fatal)."""


def _lines_without_edges(pages: list[list[str]]) -> list[list[str]]:
    """Pages' lines without the running headers and footers (lines repeated at the page edges; digits ignored)."""
    if len(pages) < MIN_PAGES:
        return pages

    def key(line: str) -> str:
        return re.sub(r"\d+", "#", line.strip().casefold())

    def edges(lines: list[str]) -> list[int]:
        n = min(EDGE_LINES, len(lines) // 3)
        return sorted({*range(n), *range(len(lines) - n, len(lines))})

    at_edges: Counter[str] = Counter()
    for lines in pages:
        at_edges.update({key(lines[i]) for i in edges(lines) if lines[i].strip()})
    least = max(2, REPEATED_SHARE * len(pages))  # a header repeats: once is not enough, whatever the page count
    repeated = {k for k, n in at_edges.items() if n >= least and len(k) <= HEADER_MAX_CHARS}
    page_number = re.compile(r"\s*(page\s*)?\d+(\s*(of|/)\s*\d+)?\s*", re.I)
    cleaned = []
    for lines in pages:
        keep = list(lines)
        for i in edges(keep):
            if key(keep[i]) in repeated or page_number.fullmatch(keep[i]):
                keep[i] = ""
        cleaned.append(keep)
    return cleaned


# MuPDF's messages when it rebuilt a broken cross-reference table from the objects themselves: the objects (and so the
# text) are all there. Any other message (an object cut short, a page tree it could not load, a stream that is not
# one) means content was lost.
XREF_REPAIR = re.compile(r"xref|repair", re.I)
# A PDF ends with this marker (PDF 32000-1, 7.5.5); a download cut short does not. Writers may add a few bytes after it.
EOF_MARKER, EOF_WINDOW = b"%%EOF", 1024


def _mupdf_messages() -> list[str]:
    """MuPDF's warnings and errors since the last call (it keeps them globally), each once, in order."""
    import pymupdf

    return list(dict.fromkeys(m.strip() for m in pymupdf.TOOLS.mupdf_warnings(reset=True).splitlines() if m.strip()))


def _pdf_text(blob: bytes) -> str:
    """The PDF's text; Unusable when it gives none, or when it is damaged (truncated, objects lost): text from a
    damaged file is cut somewhere nobody can see, so the file is named and skipped rather than half trained on."""
    import pymupdf

    _mupdf_messages()  # what earlier files left behind
    shown = pymupdf.TOOLS.mupdf_display_errors()
    pymupdf.TOOLS.mupdf_display_errors(False)  # its unnamed "MuPDF error: …" lines: the reason names the file instead
    try:
        pages, images, page_count, repaired = _pdf_pages(blob)
    finally:
        pymupdf.TOOLS.mupdf_display_errors(shown)
    messages = _mupdf_messages()
    truncated = EOF_MARKER not in blob[-EOF_WINDOW:]
    lost = [m for m in messages if not XREF_REPAIR.search(m)]
    with_text = sum(any(line.strip() for line in lines) for lines in pages)
    if (repaired and (truncated or lost)) or (lost and with_text < page_count):
        what = "truncated: no end-of-file marker" if truncated else "corrupt"
        said = "; ".join((lost or messages)[:3])
        raise Unusable(
            f"damaged PDF ({what}; MuPDF: {said}); text on {with_text} of {page_count} page(s), possibly cut short: "
            "download or export it again"
        )
    if not with_text:
        if images:
            raise Unusable(f"image-only PDF ({images} image(s), no text layer); OCR it first")
        raise Unusable(f"PDF without text ({len(pages)} blank page(s))")
    return "\n\n".join("\n".join(lines) for lines in _lines_without_edges(pages))


def _pdf_pages(blob: bytes) -> tuple[list[list[str]], int, int, bool]:
    """(each page's lines, images, page count, whether MuPDF had to repair the file); Unusable for a file it cannot
    open or read, an encrypted one, or one without pages."""
    import pymupdf

    try:
        doc = pymupdf.open(stream=blob, filetype="pdf")
    except Exception as e:  # MuPDF raises FileDataError, RuntimeError, ValueError for damaged files
        raise Unusable(f"unreadable PDF ({type(e).__name__}: {e})") from e
    with doc:
        if doc.needs_pass or doc.is_encrypted:
            raise Unusable("encrypted PDF (needs a password); decrypt it or remove it")
        if doc.page_count == 0:
            if doc.is_repaired:
                raise Unusable(
                    "damaged PDF (MuPDF had to repair it: truncated or corrupt?); no page could be recovered: "
                    "download or export it again"
                )
            raise Unusable("PDF with no pages")
        pages, images = [], 0
        try:
            for page in doc:
                pages.append(page.get_text("text").splitlines())
                images += len(page.get_images())
        except Exception as e:
            raise Unusable(f"unreadable PDF page ({type(e).__name__}: {e})") from e
        return pages, images, doc.page_count, doc.is_repaired


class _HTMLText(HTMLParser):
    SKIP = frozenset({"script", "style", "head", "nav", "noscript", "template", "svg"})
    BLOCK = frozenset(
        {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article", "blockquote"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data.replace("\n", " "))


def _html_text(text: str) -> str:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    return "".join(parser.parts)


def _markdown_text(text: str) -> str:
    text = re.sub(r"^```.*$", "", text, flags=re.M)  # fences go, code stays
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)  # images: their alt text
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"^\s{0,3}(#{1,6}|>|[-*+]|\d+[.)])\s+", "", text, flags=re.M)  # headings, quotes, list marks
    text = re.sub(r"(\*\*|__|\*|`)(\S.*?\S|\S)\1", r"\2", text)  # emphasis, inline code
    return re.sub(r"^\s*([-*_]\s*){3,}$", "", text, flags=re.M)  # rules


def _decode(blob: bytes) -> str:
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Unusable(f"not UTF-8 text (byte 0x{blob[e.start]:02x} at {e.start}); save it as UTF-8") from e


def clean(text: str) -> str:
    """NFC, no control characters, words hyphenated at a line end joined, paragraph lines joined, spaces collapsed;
    paragraphs separated by one blank line."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad]", "", text.replace("\f", "\n\n"))
    text = re.sub(r"(\w)-\n\s*([a-z])", r"\1\2", text)  # "distil-\nlation" -> "distillation"
    paragraphs = (re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text))
    return "\n\n".join(p for p in paragraphs if p)


def extract(name: str, blob: bytes) -> tuple[str, str]:
    """(kind, cleaned text) of one file; raises Unusable with the reason when it gives no text."""
    kind = KINDS.get(Path(name).suffix.lower())
    if kind is None:
        raise Unusable(f"unsupported file type {Path(name).suffix or '(none)'!r}; use {', '.join(sorted(KINDS))}")
    if not blob.strip():
        raise Unusable("empty file")
    if kind == "pdf":
        text = _pdf_text(blob)
    elif kind == "html":
        text = _html_text(_decode(blob))
    elif kind == "markdown":
        text = _markdown_text(_decode(blob))
    else:
        text = _decode(blob)
    text = clean(text)
    if not text:
        raise Unusable("no text after cleaning")
    return kind, text


# --- chunking --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """What one chunk may hold: the served prompt around it (real tokens) plus the answer cap within the context,
    and the dataset's own bounds (`steps.core.dataset`) so fetch-dataset accepts the row."""

    prompt_tokens: Callable[[str], int]  # the whole prompt for this chunk, in the base's tokens
    max_prompt_tokens: int

    def fits(self, text: str) -> bool:
        return (
            len(text) <= MAX_DOCUMENT_CHARS
            and estimate_tokens(text) <= document_token_budget()
            and self.prompt_tokens(text) <= self.max_prompt_tokens
        )


@functools.cache
def tokenizer_budget(base_model: str, revision: str) -> Budget:
    """The budget for `base_model`: its tokenizer and chat template applied to the served prompt."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_model, revision=revision)
    serving = serving_config.SERVING

    def prompt_tokens(text: str) -> int:
        ids = tokenizer.apply_chat_template(messages(text), add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    return Budget(prompt_tokens, serving.n_ctx - serving.max_tokens)


def _pieces(paragraph: str, budget: Budget) -> list[str]:
    """A paragraph as pieces that each fit: itself, else its sentences, else runs of words."""
    if budget.fits(paragraph):
        return [paragraph]
    sentences = re.split(r"(?<=[.!?])\s+", paragraph)
    if len(sentences) > 1:
        return [p for s in sentences for p in _pieces(s, budget)]
    words, out, current = paragraph.split(" "), [], ""
    for word in words:
        candidate = f"{current} {word}".strip()
        if current and not budget.fits(candidate):
            out.append(current)
            candidate = word
        current = candidate
    return [*out, current] if current else out


def chunk(text: str, budget: Budget) -> list[str]:
    """`text` cut into as few chunks as fit `budget`, at paragraph, then sentence, then word boundaries."""
    chunks: list[str] = []
    current = ""
    for paragraph in text.split("\n\n"):
        for piece in _pieces(paragraph, budget):
            candidate = f"{current}\n\n{piece}" if current else piece
            if current and not budget.fits(candidate):
                chunks.append(current)
                candidate = piece
            current = candidate
    if current:
        chunks.append(current)
    return chunks


def _slug(uri: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", Path(uri).stem.casefold()).strip("-")[:40] or "doc"


@timed
def run(cfg: IngestConfig) -> IngestResult:
    refuse(base_model_problems(cfg.base_model), "ingest", IngestError)  # the chunks are sized by its tokenizer
    budget = tokenizer_budget(cfg.base_model, cfg.base_revision)
    rows: list[dict] = []
    skipped: list[dict] = []
    files = documents = 0
    seen: dict[str, str] = {}
    locations = [loc.strip() for loc in cfg.documents.split(",") if loc.strip()]
    if not locations:
        raise IngestError("--documents is empty: give a folder or an s3://bucket/prefix/")
    for uri, relative, read in (source for location in locations for source in _sources(location)):
        files += 1
        blob = read()
        digest = hashlib.sha256(blob).hexdigest()
        if digest in seen:
            skipped.append({"source_uri": uri, "reason": f"same bytes as {seen[digest]}"})
            continue
        seen[digest] = uri
        try:
            kind, text = extract(uri, blob)
        except Unusable as e:
            skipped.append({"source_uri": uri, "source_sha256": digest, "reason": str(e)})
            continue
        documents += 1
        # What a reviewer may paste as the file's text: its cleaned text, or (text, Markdown, HTML) the text as written.
        keys = list(dict.fromkeys([text_key(text), *([] if kind == "pdf" else [text_key(_decode(blob))])]))
        pieces = chunk(text, budget)
        for i, piece in enumerate(pieces):
            rows.append(
                {
                    "id": f"{_slug(uri)}-{digest[:12]}-{i}",
                    "document": piece,
                    "document_sha256": document_sha256(piece),
                    "source_uri": uri,
                    "source_sha256": digest,
                    "relative_path": relative,
                    "file_text_keys": keys,
                    "kind": kind,
                    "chunk": i,
                    "chunks": len(pieces),
                    "prompt_tokens": budget.prompt_tokens(piece),
                }
            )
    if not rows:
        reasons = "".join(f"\n  {s['source_uri']}: {s['reason']}" for s in skipped)
        raise IngestError(f"--documents {cfg.documents}: no usable document among {files} file(s){reasons}")
    result = IngestResult(files, documents, len(rows), len(skipped), budget.max_prompt_tokens)
    with atomic_dir(cfg.out) as tmp:
        write_jsonl(tmp / DOCUMENTS_FILE, rows)
        write_json(tmp / SKIPPED_FILE, skipped)
        write_result(tmp, result)
    return result


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(IngestConfig, argv, __doc__.splitlines()[0])
    try:
        result = run(cfg)
    except IngestError as e:
        print(f"ingest: {e}", file=sys.stderr)
        return 1
    for s in json.loads((cfg.out / SKIPPED_FILE).read_text()):
        print(f"ingest: skipped {s['source_uri']}: {s['reason']}", file=sys.stderr)
    print(f"{result.documents} document(s) from {result.files} file(s) -> {result.chunks} chunk(s); {asdict(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
