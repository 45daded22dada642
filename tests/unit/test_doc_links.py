"""Every link of README.md and the manual to a page of the checkout, and its anchor, exists.

`mkdocs build --strict` checks the manual's links among its own pages; the README is not part
of the build, and a page read on GitHub resolves anchors as GitHub does, so both are checked
here, with GitHub's anchors and MkDocs' (and `{#id}`) alike.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from relay.pairing import DISABLED_PROFILE_HELP

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# `[text](target)`, outside code spans; images too.
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.*?)(?: +\{#([\w-]+)\})? *$", re.M)
FENCE = re.compile(r"^( *)```.*?^\1```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _github_slug(title: str) -> str:
    text = re.sub(r"[^\w\- ]", "", title.lower())
    return text.replace(" ", "-")


def _mkdocs_slug(title: str) -> str:
    text = re.sub(r"[^\w\s-]", "", title).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors a page's headings make, on GitHub and in the MkDocs build."""
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    for title, explicit in HEADING.findall(text):
        plain = title.replace("`", "")
        found |= {_github_slug(plain), _mkdocs_slug(plain)}
        if explicit:
            found.add(explicit)
    # An API reference page (`::: relay.X`): mkdocstrings anchors each object by its dotted
    # name, and the strict build checks those.
    if re.search(r"^::: relay\b", text, re.M):
        found |= set(re.findall(r"\brelay(?:\.\w+)+", text))
    return frozenset(found)


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text()))
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_local_link_and_anchor_exists(page: Path) -> None:
    """Each link to a file of the checkout names one that exists, and an anchor of a page
    names one of its headings."""
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such section")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_readme_sections_named_in_words_exist() -> None:
    """`README "Section"` in a page or an example names a heading the README has."""
    titles = {
        title.replace("`", "") for title, _ in HEADING.findall((ROOT / "README.md").read_text())
    }
    files = [
        *PAGES,
        *sorted((ROOT / "examples").glob("*.py")),
        *sorted((ROOT / "relay").rglob("*.py")),
    ]
    named = {
        (path.relative_to(ROOT), name)
        for path in files
        for name in re.findall(r'README "([^"]+)"', path.read_text())
    }
    assert not {(str(path), name) for path, name in named if name not in titles}


def test_the_operator_page_links_a_section_that_exists() -> None:
    """`DISABLED_PROFILE_HELP`, which the operator page links, is a page and one of its
    sections."""
    page, _, anchor = DISABLED_PROFILE_HELP.partition("#")
    assert anchor in anchors(ROOT / "docs" / page)
