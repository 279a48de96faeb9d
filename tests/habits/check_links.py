#!/usr/bin/env python3
"""Every relative link in README.md and docs/**/*.md points to a file of the repository, and every
#anchor to a heading of its file. Usage: check_links.py <repository>. Exit 1 naming each dead link.
"""
import pathlib
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+\s+(.*)$", re.M)


def anchors(text):
    """GitHub's anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for title in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def main(root):
    root = pathlib.Path(root)
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    dead = []
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
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
    print(f"{checked} links in {len(pages)} pages, {len(dead)} dead")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
