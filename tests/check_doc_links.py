#!/usr/bin/env python3
"""Every relative markdown link ](path#anchor) in README.md and docs/**/*.md resolves to an
existing file and, for .md targets with an anchor, an existing heading (GitHub's rules)."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # punctuation dropped (keeps letters, digits, _, -)
    return s.replace(" ", "-")


def anchors(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


files = [os.path.join(root, "README.md")]
for d, _, fs in os.walk(os.path.join(root, "docs")):
    files += [os.path.join(d, f) for f in fs if f.endswith(".md")]
bad = 0
count = 0
link = re.compile(r"\]\(([^)\s]+)\)")
for f in sorted(files):
    text = open(f, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in link.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        count += 1
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(dest):
            print(f"{f}: {target}: no file {dest}")
            bad += 1
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            print(f"{f}: {target}: no heading #{anchor} in {dest}")
            bad += 1
print(f"{count} relative links, {bad} broken")
sys.exit(1 if bad else 0)
