"""MkDocs hooks (mkdocs.yml `hooks:`): README.md is the site's front page.

The README lives at the repository's root, where GitHub and a fresh clone show it, and links the pages as
`docs/<page>.md`; the site is built from docs/. `on_files` adds the README as the generated page `index.md`, its
`docs/` link prefixes dropped, so there is one front page, not a copy to keep in step. A page of docs/ links the
front page as `../README.md` (a file of the repository, as GitHub shows it); `on_page_markdown` points that at the
generated `index.md`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS_LINK = re.compile(r"\]\(docs/")
README_LINK = re.compile(r"\]\(\.\./README\.md")


def front_page(text: str) -> str:
    """The README as the site's index.md: links into docs/ made relative to docs/."""
    return DOCS_LINK.sub("](", text)


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, "index.md", content=front_page(README.read_text())))
    return files


def on_page_markdown(markdown: str, **_: Any) -> str:
    """A docs/ page's links to the repository's README.md go to the site's front page."""
    return README_LINK.sub("](index.md", markdown)
