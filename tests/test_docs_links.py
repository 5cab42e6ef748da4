"""Every relative link in the user docs (README.md, docs/, bench/README.md, bench/results/) points to a
file or folder of the checkout, and a link's #anchor into a markdown file names one of its headings
(GitHub's slugs). Pure: reads files, runs nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "bench" / "README.md"]
    for folder in (ROOT / "docs", ROOT / "bench" / "results"):
        files += sorted(folder.glob("*.md"))
    return [f for f in files if f.exists()]


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code (links there are not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    found: set[str] = set()
    for line in prose(md.read_text()).splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            found.add(slug(m.group(1)))
    return found


def links(md: Path) -> list[str]:
    return LINK.findall(prose(md.read_text()))


def test_there_are_docs_to_check() -> None:
    assert ROOT / "README.md" in doc_files()


@pytest.mark.parametrize("md", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md: Path) -> None:
    bad = []
    for target in links(md):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, file:
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not bad, f"{md.relative_to(ROOT)}: " + "; ".join(bad)
