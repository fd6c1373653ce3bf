"""The code blocks of README.md and docs/, read the way tests/test_doc_commands.py checks and runs them.

Every fenced block names its language (`text` for output and diagrams), and every shell or Python block carries a
mark on the line just above its fence, an HTML comment that neither GitHub nor the site shows:

    <!-- docs: run -->            run, in order, in a fresh copy of the repository, by the doc-command test
    <!-- docs: render-only -->    shown, not run here (it needs a server you run, a GPU, a long training run, or it is
                                  the test suite itself); its syntax and the scripts, modules and flags it names are
                                  checked
    <!-- docs: cluster-only -->   needs a cluster, a cloud account or a network; checked like render-only

A run block may name commands that the walk does not run, with the reason in the block's own comment:
`<!-- docs: run except="scripts/test.sh" -->` (several: separated by `|`). A command whose comment starts with
`refused` must exit non-zero: the page says it is refused.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import ROOT

SHELL = frozenset({"bash", "sh", "shell", "console"})
MARKED = SHELL | {"python", "py"}  # the languages a reader runs: their blocks need a mark
KINDS = ("run", "render-only", "cluster-only")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARK = re.compile(r"^\s*<!--\s*docs:\s*(?P<kind>[\w-]+)(?P<attrs>(?:\s+\w+=\"[^\"]*\")*)\s*-->\s*$")
ATTR = re.compile(r"(\w+)=\"([^\"]*)\"")
MARK_ATTRS = frozenset({"except"})


def pages() -> list[Path]:
    """README.md, then the site's pages in mkdocs.yml's nav order (the order a reader follows)."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    files = [next(iter(entry.values())) for entry in nav]
    return [ROOT / "README.md"] + [ROOT / "docs" / f for f in files if f != "index.md"]


@dataclass(frozen=True)
class Command:
    """One logical command of a shell block: its first line's number in the page, its text (continuation lines
    joined) and its comment (the text after ` # ` on its last line)."""

    line: int
    text: str
    comment: str

    @property
    def refused(self) -> bool:
        return self.comment.startswith("refused")


@dataclass
class Block:
    page: Path
    line: int  # the opening fence's line, 1-based
    lang: str
    body: list[str]
    kind: str | None = None  # the mark; None when there is none
    attrs: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # a mark that does not parse, a fence without a language

    @property
    def where(self) -> str:
        return f"{relative(self.page)}:{self.line}"

    @property
    def text(self) -> str:
        return "\n".join(self.body) + "\n"

    @property
    def excepted(self) -> list[str]:
        return [c.strip() for c in self.attrs.get("except", "").split("|") if c.strip()]

    def commands(self) -> list[Command]:
        """The block's logical commands: continuation lines joined, blank and comment-only lines left out."""
        out: list[Command] = []
        pending: list[str] = []
        start = 0
        for offset, raw in enumerate(self.body, start=self.line + 1):
            if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
                continue
            if not pending:
                start = offset
            if raw.endswith("\\"):
                pending.append(raw[:-1].strip())
                continue
            pending.append(raw.strip())
            text = " ".join(pending)
            pending = []
            code, comment = split_comment(text)
            out.append(Command(start, code, comment))
        return out

    def is_excepted(self, command: Command) -> bool:
        return any(command.text == e or command.text.startswith(e + " ") for e in self.excepted)


def relative(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def split_comment(text: str) -> tuple[str, str]:
    """`cmd   # why` → ("cmd", "why"): the comment that starts at the first ` #` outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip(), text[i + 1 :].strip()
    return text, ""


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of `page`, each with the mark on the line above its fence."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        lang = opening["info"].split("{")[0].strip().split(" ")[0].lower()
        end = i + 1
        while end < len(lines) and not re.match(rf"^ {{0,{indent + 3}}}{re.escape(fence[0])}{{{len(fence)},}}\s*$",
                                                lines[end]):  # fmt: skip
            end += 1
        block = Block(page, i + 1, lang, [line[indent:] for line in lines[i + 1 : end]])
        if not lang:
            block.problems.append("a fence without a language: name it (`text` for output and diagrams)")
        above = lines[i - 1] if i else ""
        if "<!--" in above and "docs:" in above:
            mark = MARK.match(above)
            if not mark or mark["kind"] not in KINDS:
                block.problems.append(f"the mark {above.strip()!r} does not parse: one of " +
                                      ", ".join(f"<!-- docs: {k} -->" for k in KINDS))  # fmt: skip
            else:
                block.kind = mark["kind"]
                block.attrs = dict(ATTR.findall(mark["attrs"]))
                unknown = set(block.attrs) - MARK_ATTRS
                if unknown or (block.attrs and block.kind != "run"):
                    block.problems.append(f'the mark\'s {sorted(block.attrs)}: only a run block takes except="…"')
                for e in block.excepted:
                    if not any(c.text == e or c.text.startswith(e + " ") for c in block.commands()):
                        block.problems.append(f'except="{e}" names no command of the block')
        found.append(block)
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page)]


SPAN = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")  # an inline code span, possibly wrapped once
COMMAND_SPAN = re.compile(r"^(python (-m |scripts/)|scripts/|dvc exp run|argo submit)")


def inline_commands(page: Path) -> list[Command]:
    """The commands quoted in `page`'s prose (inline code that starts like one of the project's commands), each
    with its line; a span with a `<placeholder>` is left out."""
    text = page.read_text()
    text = re.sub(r"^ *(`{3,}|~{3,}).*?^ *\1", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M | re.S)
    found = []
    for m in SPAN.finditer(text):
        span = " ".join(m.group(1).split())
        if COMMAND_SPAN.match(span) and "<" not in span:
            found.append(Command(text[: m.start()].count("\n") + 1, split_comment(span)[0], ""))
    return found


def simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell command line, as argv lists: split at pipes, `&&`, `||` and `;`, environment
    assignments in front dropped, `$(…)` substitutions left as words. Shell the parser cannot read gives []."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return []
    argvs: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) <= set(";&|"):
            argvs.append([])
        else:
            argvs[-1].append(token)
    out = []
    for argv in argvs:
        while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
            argv = argv[1:]
        if argv:
            out.append(argv)
    return out
