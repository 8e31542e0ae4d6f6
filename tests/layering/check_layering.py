#!/usr/bin/env python3
"""Checks every source's #include lines against the layering table in docs/DESIGN.md.

The table (between the markers `<!-- rooms -->` and `<!-- /rooms -->`) names each room, the
paths of its sources and the rooms it may include. A source may include its own room's
headers, public or private, the public headers of the rooms it may include, and the private
headers of those that are in its own library (the engine's rooms: "model/rope_frequencies.h"
from runtime/). A room marked `any` may include every public header, and the private headers
the second table (`<!-- test-private -->`) lists. Usage: check_layering.py ROOT [--self-test]
"""
import os
import re
import sys
import tempfile

SOURCE_EXTENSIONS = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def table(text, marker):
    """The rows of the markdown table between <!-- marker --> and <!-- /marker -->."""
    match = re.search(r"<!-- %s -->(.*?)<!-- /%s -->" % (marker, marker), text, re.S)
    if not match:
        raise SystemExit("docs/DESIGN.md has no <!-- %s --> table" % marker)
    rows = []
    for line in match.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append(cells)
    return rows[1:]  # the header row


def ticked(cell):
    return re.findall(r"`([^`]+)`", cell)


class Rooms:
    def __init__(self, design_text):
        self.paths = []  # (path prefix, room), longest first
        self.may = {}  # room -> set of rooms, or None for any
        self.library = {}  # room -> library name (first path component of its folder)
        for room, sources, may in table(design_text, "rooms"):
            room = room.strip("`")
            for prefix in ticked(sources):
                self.paths.append((prefix, room))
            names = [m.strip().strip("`") for m in may.split(",") if m.strip()]
            self.may[room] = None if names == ["any"] else set(names)
            self.library[room] = room.split("/")[0]
        self.paths.sort(key=lambda p: -len(p[0]))
        self.test_private = {path for row in table(design_text, "test-private")
                             for path in ticked(row[0])}

    def room_of(self, path):
        for prefix, room in self.paths:
            if path == prefix or path.startswith(prefix):
                return room
        return None

    def public_room(self, include):
        """The room of a public header "freezeframe/<lib>/...", or None."""
        parts = include.split("/")
        if parts[0] != "freezeframe" or len(parts) < 2:
            return None
        if parts[1] == "engine.h":
            return self.room_of("engine/include/freezeframe/engine.h")
        lib = parts[1]
        return self.room_of("%s/include/%s" % (lib, include))


def private_dirs(root):
    """Folders the build puts on include paths for private headers: every src/ and the
    top-level folders of tools, tests and benchmarks."""
    dirs = []
    for entry in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, entry, "src")):
            dirs.append(entry + "/src")
    return dirs + ["tools", "tests", "bench"]


def check(root):
    with open(os.path.join(root, "docs", "DESIGN.md"), encoding="utf-8") as f:
        rooms = Rooms(f.read())
    problems = []
    searched = private_dirs(root)
    for folder, _, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        if rel_folder.split(os.sep)[0] in ("build", ".git", ".carry", ".cache") or \
                rel_folder.startswith("build"):
            continue
        for name in files:
            if not name.endswith(SOURCE_EXTENSIONS):
                continue
            path = os.path.normpath(os.path.join(rel_folder, name)).replace(os.sep, "/")
            room = rooms.room_of(path)
            if room is None:
                problems.append("%s: in no room of the table" % path)
                continue
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for match in INCLUDE.finditer(text):
                include = match.group(1)
                line = text.count("\n", 0, match.start()) + 1
                why = judge(rooms, root, searched, path, room, include)
                if why:
                    problems.append("%s:%d: #include \"%s\": %s" % (path, line, include, why))
    return problems


def judge(rooms, root, searched, path, room, include):
    """Why the include breaks the layering, or None."""
    allowed = rooms.may[room]
    target = rooms.public_room(include)
    if target is not None:
        if target == room or allowed is None or target in allowed:
            return None
        return "%s may not include %s (docs/DESIGN.md, Layers)" % (room, target)
    # A private header: beside the source, or under a private include folder.
    candidates = [os.path.normpath(os.path.join(os.path.dirname(path), include))]
    candidates += [d + "/" + include for d in searched]
    found = [c.replace(os.sep, "/") for c in candidates if os.path.isfile(os.path.join(root, c))]
    if not found:
        if include.startswith("freezeframe/"):
            return "no such public header"
        return None  # a generated header or one of a dependency's: not ours to judge
    header = found[0]
    target = rooms.room_of(header)
    if target == room:
        return None
    if allowed is None:
        if header in rooms.test_private or rooms.library.get(target) == rooms.library[room]:
            return None
        return "a private header of %s, not among those tests may include (docs/DESIGN.md)" % \
            target
    if target in allowed and rooms.library.get(target) == rooms.library[room]:
        return None
    return "a private header of %s, which %s may not include" % (target, room)


SELF_TEST_DESIGN = """
<!-- rooms -->
| room | sources | may include |
|---|---|---|
| low | `low/` | |
| high/a | `high/src/a/` `high/include/freezeframe/high/a/` | low |
| high/b | `high/src/b/` | low, high/a |
| tests | `tests/` | any |
<!-- /rooms -->
<!-- test-private -->
| header |
|---|
| `high/src/b/ok.h` |
<!-- /test-private -->
"""


def self_test():
    """The checker on a tree of its own: an include that climbs, a private header of another
    library, a test's private header outside the list, and allowed ones."""
    files = {
        "docs/DESIGN.md": SELF_TEST_DESIGN,
        "low/include/freezeframe/low/l.h": "",
        "low/src/l.cpp": '#include "freezeframe/low/l.h"\n#include "freezeframe/high/a/x.h"\n',
        "low/src/hidden.h": "",
        "high/include/freezeframe/high/a/x.h": '#include "freezeframe/low/l.h"\n',
        "high/src/a/x.cpp": '#include "b/ok.h"\n',
        "high/src/b/ok.h": '#include "a/y.h"\n#include "freezeframe/high/a/x.h"\n',
        "high/src/a/y.h": '#include "hidden.h"\n',
        "high/src/b/not_listed.h": "",
        "tests/t.cpp": '#include "b/ok.h"\n#include "b/not_listed.h"\n#include "freezeframe/low/l.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        problems = check(root)
    want = [
        'low/src/l.cpp:2: #include "freezeframe/high/a/x.h": low may not include high/a',
        'high/src/a/x.cpp:1: #include "b/ok.h": a private header of high/b, which high/a may not',
        'high/src/a/y.h:1: #include "hidden.h": a private header of low, which high/a may not',
        'tests/t.cpp:2: #include "b/not_listed.h": a private header of high/b, not among those',
    ]
    missing = [w for w in want if not any(p.startswith(w) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(w) for w in want)]
    if missing or extra:
        print("self-test failed:\n  missing: %s\n  unexpected: %s" % (missing, extra))
        return 1
    print("self-test: %d climbing includes found, none else" % len(want))
    return 0


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    if "--self-test" in sys.argv[2:]:
        return self_test()
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print("%d includes break the layering (docs/DESIGN.md, Layers)" % len(problems))
        return 1
    print("every include follows the layering of docs/DESIGN.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
