"""The README and the pages of docs/ link to each other: every relative link must point to a file that exists,
and a link with an anchor (``page.md#section``) to a heading of that page (GitHub's anchor names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`+[^`\n]*`+")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks, indented code blocks and code spans (their brackets are not links)."""
    text = _FENCE.sub("", text)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("    "))
    return _CODE_SPAN.sub("", text)


def anchors(text: str) -> set[str]:
    """GitHub's anchor names of the headings of a markdown ``text``: lower case, punctuation dropped, spaces as
    ``-``, a repeated name suffixed ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for title in _HEADING.findall(_FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of the markdown file ``page`` whose target file (or heading) does not exist, each as
    ``"<page>: <link> (<why>)"``.  External links (``scheme:``) are not checked."""
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.name}: {target} (no file {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{page.name}: {target} (no heading #{anchor} in {dest.name})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_every_docs_page_is_linked_from_the_readme():
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in _LINK.findall(_prose(readme.read_text()))}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_a_broken_link_or_anchor_is_reported(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading (#5)\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-code-heading-5) [web](https://example.org/x) [self](#title)\n"
        "# Title\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere)\n"
        "```\n[in code](also-missing.md)\n```\n`[span](missing-too.md)`\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        f"page.md: missing.md (no file {tmp_path / 'missing.md'})",
        "page.md: other.md#nowhere (no heading #nowhere in other.md)",
    ]
