#!/usr/bin/env python3
"""The README and the manual (docs/): the README at most 300 lines; every
relative link (a file, a file's heading, a heading of the same page) and
every image resolves; every page of docs/ is linked from the README.
Usage: test_docs.py SOURCE_ROOT.  Prints each broken link with its file and
line; exit 1 when any."""
import os
import re
import sys

root = sys.argv[1]
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")


def slug(title):
    t = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return t.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of the lines outside ``` blocks."""
    code = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                code = not code
                continue
            if not code:
                yield n, line


def anchors(path):
    return {slug(l.lstrip("#")) for _, l in lines_outside_code(path)
            if re.match(r"^#{1,6} ", l)}


pages = [os.path.join(root, "README.md")] + sorted(
    os.path.join(root, "docs", p) for p in os.listdir(os.path.join(root, "docs"))
    if p.endswith(".md"))
bad = []
linked = set()
for page in pages:
    rel = os.path.relpath(page, root)
    for n, line in lines_outside_code(page):
        # inline code spans are not links
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m.group(2)
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                bad.append(f"{rel}:{n}: {target}: no such file")
                continue
            if dest.endswith(".md"):
                linked.add(os.path.relpath(dest, root))
            if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append(f"{rel}:{n}: {target}: no heading '{anchor}' in "
                           f"{os.path.relpath(dest, root)}")
readme_lines = sum(1 for _ in open(pages[0], encoding="utf-8"))
if readme_lines > 300:
    bad.append(f"README.md: {readme_lines} lines, more than 300 (the rest goes to docs/)")
for page in pages[1:]:
    rel = os.path.relpath(page, root)
    if rel not in linked:
        bad.append(f"{rel}: no link to it from the README or another page")
for b in bad:
    print(b)
print(f"{len(pages)} pages, README {readme_lines} lines: "
      f"{'ok' if not bad else str(len(bad)) + ' broken'}")
sys.exit(1 if bad else 0)
