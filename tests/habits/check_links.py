#!/usr/bin/env python3
"""Every relative link in README.md and docs/**/*.md points to a file of the repository, and every
#anchor to a heading of its file; every backticked path of the repository exists, and every
backticked `Class::member` names identifiers the C++ sources use (outside comments and strings).
Usage: check_links.py <repository>. Exit 1 naming each dead link or name.
"""
import pathlib
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path from a top folder; placeholders (NAME, a glob, {a,b}) are not checked.
PATH = re.compile(
    r"`((?:core|backends|tools|tests|python|docs|examples|policies|transports|cmake|\.ci)/[^`\s]+)`")
NAME = re.compile(r"`(?:kvcache::)?(?:\w+::)*([A-Z]\w*)::(~?\w+)(?:\([^`]*\))?`")
SOURCES = ("core", "backends", "tools", "python", "policies", "transports", "examples", "tests")
HEADING = re.compile(r"^#+\s+(.*)$", re.M)


def anchors(text):
    """GitHub's anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for title in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def identifiers(root):
    """The identifiers of the C++ sources, comments and string literals left out."""
    words = set()
    for folder in SOURCES:
        for file in (root / folder).rglob("*"):
            if file.suffix in {".cpp", ".hpp", ".h", ".cu", ".cuh"}:
                code = re.sub(r"//[^\n]*", "", file.read_text(errors="replace"))
                code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', code)
                words.update(re.findall(r"\w+", code))
    return words


def dead_names(page, text, root, words):
    """Backticked paths that do not exist and Class::member names the sources do not use."""
    dead = []
    for match in PATH.finditer(text):
        path = re.sub(r":\d+(-\d+)?$", "", match.group(1).rstrip(".,;:)"))
        if any(c in path for c in "{*<>") or re.search(r"/[A-Z]+(/|$)", path):
            continue
        if not (root / path).exists():
            dead.append(f"{page.relative_to(root)}: `{path}` (no such path)")
    for match in NAME.finditer(text):
        if match.group(1) not in words or match.group(2).lstrip("~") not in words:
            dead.append(f"{page.relative_to(root)}: `{match.group(0)[1:-1]}` (no such name)")
    return dead


def main(root):
    root = pathlib.Path(root)
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    dead = []
    checked = 0
    words = identifiers(root)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        dead += dead_names(page, text, root, words)
        code_free = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in LINK.findall(code_free):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                dead.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                dead.append(f"{page.relative_to(root)}: {target} (no such heading)")
    for d in dead:
        print(d)
    print(f"{checked} links in {len(pages)} pages (and their code names), {len(dead)} dead")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
