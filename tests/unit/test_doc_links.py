"""Every relative link in the project's Markdown resolves: to a file or folder that exists, and
through its ``#anchor`` to a heading of that file.

The README is a front door that sends readers into ``docs/``; a section that moves must take its
links with it. The files checked are ``README.md``, ``docs/*.md``, ``bench/README.md`` and any
``charts/*/README.md``. A link with a scheme (``https:``, ``mailto:``) is not followed; a bare
``#anchor`` is checked against its own file. Anchors are the ones GitHub gives headings: the
heading's text as rendered (code spans' contents kept, link targets and emphasis dropped), lower
case, every character but letters, digits, ``-``, ``_`` and spaces dropped, spaces as ``-``; the
second heading with the same anchor gets ``-1``, the third ``-2``. An ``<a name=...>`` or
``id=...`` in the file is an anchor too. Headings and links inside fenced code blocks and inline
code are not Markdown, so they are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: An inline link or image ``[text](target "title")``; the text may span lines.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[^)]*)?\)")
#: A reference definition ``[label]: target``.
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
#: An ATX heading; its closing ``#``s are not part of the text.
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(repo: Path = REPO) -> list[Path]:
    """The Markdown whose links are checked."""
    found = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    found += [repo / "bench" / "README.md", *sorted((repo / "charts").glob("*/README.md"))]
    return [path for path in found if path.is_file()]


def prose_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` outside fenced code blocks (the fences themselves left out)."""
    fence: str | None = None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and opened and opened.group(1).startswith(fence[0] * len(fence)):
            fence = None
        elif fence is None:
            yield line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading with this Markdown text (before duplicates count)."""
    text = _CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a file of this Markdown has: its headings' (duplicates numbered) and HTML's."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(text):
        if heading := _HEADING.match(line):
            slug = github_slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        found.update(_HTML_ANCHOR.findall(line))
    return found


def link_targets(text: str) -> list[str]:
    """The targets of the inline links, images and reference definitions outside code."""
    prose = "\n".join(prose_lines(text))
    prose = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), prose)
    targets = [m.group(1) for m in _INLINE_LINK.finditer(prose)]
    targets += _REFERENCE.findall(prose)
    return [t[1:-1] if t.startswith("<") and t.endswith(">") else t for t in targets]


@dataclass(frozen=True)
class BrokenLink:
    source: Path
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}: ({self.target}) {self.why}"


def broken_links(files: Iterable[Path]) -> list[BrokenLink]:
    """Every relative link of ``files`` that names no file, or an anchor its file lacks."""
    broken: list[BrokenLink] = []
    cache: dict[Path, set[str]] = {}

    def anchors_of(path: Path) -> set[str]:
        if path not in cache:
            cache[path] = anchors(path.read_text())
        return cache[path]

    for source in files:
        for target in link_targets(source.read_text()):
            if _SCHEME.match(target):
                continue
            location, _, anchor = target.partition("#")
            path = (source.parent / location).resolve() if location else source.resolve()
            if not path.exists():
                broken.append(BrokenLink(source, target, "names no file"))
            elif anchor and path.suffix == ".md" and anchor not in anchors_of(path):
                broken.append(BrokenLink(source, target, f"has no heading #{anchor}"))
    return broken


def test_every_relative_link_in_the_docs_resolves() -> None:
    files = markdown_files()
    assert REPO / "README.md" in files
    assert len(files) > 10, files
    broken = broken_links(files)
    assert not broken, "\n".join(str(b) for b in broken)


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text(
        "# B\n\n## `make deploy`: the operator, in kind\n\n## Notes\n\n## Notes\n\n"
        "```\n## not a heading\n[in code](missing.md)\n```\n"
    )
    (tmp_path / "README.md").write_text(
        "See [b](docs/b.md#make-deploy-the-operator-in-kind),\n"
        "[the second notes](docs/b.md#notes-1), [a wrapped\nlink](docs/b.md#notes),\n"
        "[the web](https://example.org/x.md#y), `[code](x.md)`, [gone](docs/gone.md),\n"
        "[no such part](docs/b.md#not-a-heading), [here](#nowhere), [a folder](docs/)\n"
        "\n[ref]: docs/b.md#notes-2\n"
    )
    broken = broken_links(markdown_files(tmp_path))
    assert [(b.target, b.why) for b in broken] == [
        ("docs/gone.md", "names no file"),
        ("docs/b.md#not-a-heading", "has no heading #not-a-heading"),
        ("#nowhere", "has no heading #nowhere"),
        ("docs/b.md#notes-2", "has no heading #notes-2"),
    ]


def test_anchors_follow_githubs_rules() -> None:
    text = (
        "# The router-proxy and its activator\n"
        "### The rules (`controlplane/scheduling/policy.py`, pure)\n"
        "## Install with Helm\n## Install with Helm ##\n"
        "## Result (2 cores; ms, median, min to max, of 20 switches)\n"
        '<a name="kept"></a>\n'
    )
    assert anchors(text) == {
        "the-router-proxy-and-its-activator",
        "the-rules-controlplaneschedulingpolicypy-pure",
        "install-with-helm",
        "install-with-helm-1",
        "result-2-cores-ms-median-min-to-max-of-20-switches",
        "kept",
    }
