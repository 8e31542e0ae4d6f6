"""Mutants for scripts/fuzz: specs changed structurally (keys dropped, duplicated, swapped, moved
or renamed; values of other types, edge numbers, deep nesting, long strings, control characters,
extra documents, anchors and tags) and traces changed row by row (rows lost, repeated and
reordered, corrupted fields, huge numbers, dates that do not exist, long lines, binary junk);
both also byte by byte (flips, inserts, deletes, truncation). Each takes a seeded random.Random.
"""

import re

# --- values a mutant may hold ------------------------------------------------------------

EDGE_INTS = [
    "0", "-1", "1", "2", "3", "7", "-0", "+5", "007", "2147483647", "2147483648", "-2147483648",
    "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
    "99999999999999999999999999", "1073741824", "268435456", "16777216", "4096", "4097",
    "1e3", "0x10", "0o17", "1_000", "1.0", "1.5", "3.", ".5",
]
EDGE_FLOATS = [
    "0", "0.0", "-0.0", "1e-50", "1e-400", "1e-39", "1.17549435e-38", "1.1754942e-38", "1e-45",
    "3.4e38", "3.5e38", "1e308", "1e309", "1e999", "-1e999", ".nan", ".NaN", ".inf", "-.inf",
    "+.inf", "nan", "inf", "NaN", "-1", "1e12", "1.0000001e12", "5e-324", "2.2250738585072014e-308",
    "0.9", "1", "1.0000000001",
]
EDGE_SIZES = ["1GiB", "0GiB", "0", "1", "2", "0.5", "1.5", "-1GiB", "99999999999TiB", "1 GiB",
              "1.5KiB", "80G", "1e-400", "0.0000001", "999999999999999999999", "1e3GiB", "GiB",
              "1.2.3GB", "5 parsecs", "0x1p-3"]
EDGE_STRINGS = [
    '""', "''", "abc", "~", "null", "Null", "yes", "no", "on", "off", "true", "false", "True",
    "reference", "paged_decode", "reference_mla", "flash_attn", "none", "full", "auto",
    "fp8", "fp8_e5m2", "bf16", "f32", '"\\a\\x1b[31m\\0"', '"tab\\there"', '"new\\nline"',
    '"\\u202e\\ufeff"', '"\\xff\\xfe"', "größe", "'single ''quoted'''", '"0..3"', '"3..1"',
    '"0..99999999999"', '"-1..2"', '" 1..2"', '"1..2 "', '"1...2"', '".."', '"1.."',
]
EDGE_TYPES = [
    "[]", "{}", "[1, 2]", "[[1]]", "{a: 1}", "{model: {}}", "[0, 0, 0]", "[.nan]", "[1, -1]",
    "!!binary aGVsbG8=", "!!str 5", "!!int abc", "!!float x", "!!map {}", "!!seq []",
    "!custom 1", "&anchor 1", "*anchor", "*undefined", "? a", "[a: 1]", "{[1]: 2}", "|", ">",
    "\"unterminated", "'unterminated", "[unclosed", "{unclosed", "- a", "a: b: c", "@", "`",
    "%YAML 1.2", "---", "...", "#comment",
]
CONTROL = "".join(chr(c) for c in list(range(0, 32)) + [127]) + "\u0085\u2028\u202e\ufeff"

# --- spec mutants ------------------------------------------------------------------------


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def is_content(line):
    s = line.strip()
    return s != "" and not s.startswith("#")


KEY = re.compile(r"^(?P<lead> *(?:- +)?)(?P<key>[^\s#:\[\]{}'\"][^:#]*?|\"[^\"]*\"|'[^']*'):"
                 r"(?P<rest>(?:\s.*)?)$")


def key_lines(lines):
    return [i for i, line in enumerate(lines) if KEY.match(line)]


def block_end(lines, i):
    """The index after line i and the lines nested under it."""
    base = indent_of(lines[i])  # a list item's children are indented past its dash
    j = i + 1
    while j < len(lines) and (not is_content(lines[j]) or indent_of(lines[j]) > base):
        j += 1
    return j


def random_value(rng, key=""):
    pool = rng.choice([EDGE_INTS, EDGE_FLOATS, EDGE_SIZES, EDGE_STRINGS, EDGE_TYPES])
    if rng.random() < 0.1:
        return str(rng.randint(-2**70, 2**70))
    if rng.random() < 0.05:
        return repr(rng.uniform(-1e6, 1e6))
    return rng.choice(pool)


def long_text(rng):
    n = rng.choice([100, 1000, 5000, 70000, 300000])
    kind = rng.random()
    if kind < 0.4:
        return "x" * n
    if kind < 0.7:
        return '"' + "\\a" * (n // 2) + '"'
    return "".join(rng.choice("abcdefghij ,:-#") for _ in range(min(n, 20000))).strip() or "x"


def control_text(rng):
    chars = "".join(rng.choice(CONTROL) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.5:  # as YAML escapes inside double quotes
        escaped = "".join("\\x%02x" % ord(c) if ord(c) < 256 else "\\u%04x" % ord(c) for c in chars)
        return '"na' + escaped + 'me"'
    return "na" + chars + "me"  # raw


def deep_value(rng):
    depth = rng.choice([10, 100, 1000, 1999, 2000, 5000, 50000])
    kind = rng.random()
    if kind < 0.4:
        return "[" * depth + "]" * depth
    if kind < 0.7:
        return "{a: " * depth + "1" + "}" * depth
    return "[" * depth  # unclosed


def long_list(rng):
    n = rng.choice([10, 1000, 1025, 4097, 50000, 200000, 450000])
    kind = rng.random()
    if kind < 0.3:
        items = (str(i + 1) for i in range(n))
    elif kind < 0.5:
        items = ("1" for _ in range(n))
    elif kind < 0.7:
        items = (str(n - i) for i in range(n))
    else:
        items = (rng.choice(["0", "1", "-1", "x", "[]", "8192"]) for _ in range(n))
    return "[" + ", ".join(items) + "]"


def mutate_spec_structure(rng, text, known_keys, donors):
    lines = text.split("\n")
    keys = key_lines(lines)
    op = rng.choice([
        "drop", "drop", "duplicate", "swap", "move", "rename", "rename", "value", "value", "value",
        "number", "number", "deep", "long_string", "control", "document", "add_key", "long_list",
        "alias", "tag", "crossover", "whole", "indent", "block_to_scalar",
    ])
    if not keys and op not in ("document", "whole"):
        op = "whole"
    i = rng.choice(keys) if keys else 0
    if op == "drop":
        del lines[i:block_end(lines, i)]
    elif op == "duplicate":
        end = block_end(lines, i)
        lines[end:end] = lines[i:end]
    elif op == "swap":
        j = rng.choice(keys)
        a, b = sorted((i, j))
        ea, eb = block_end(lines, a), block_end(lines, b)
        if ea <= b:
            lines = lines[:a] + lines[b:eb] + lines[ea:b] + lines[a:ea] + lines[eb:]
    elif op == "move":
        end = block_end(lines, i)
        block = lines[i:end]
        del lines[i:end]
        if lines:
            at = rng.randrange(len(lines) + 1)
            shift = rng.choice([-4, -2, 0, 2, 4])
            base = indent_of(block[0])
            moved = [" " * max(0, indent_of(l) + shift) + l.lstrip(" ") if is_content(l) else l
                     for l in block]
            if base + shift < 0:
                moved = [l.lstrip(" ") for l in moved]
            lines[at:at] = moved
    elif op == "rename":
        m = KEY.match(lines[i])
        choice = rng.random()
        if choice < 0.4:
            new = rng.choice(known_keys)
        elif choice < 0.6:
            key = m.group("key")
            pos = rng.randrange(len(key) + 1)
            new = key[:pos] + rng.choice("abcxyz_") + key[pos + 1:]
        elif choice < 0.75:
            new = control_text(rng)
        elif choice < 0.85:
            new = "? " + "k" * rng.choice([1000, 5000, 100000]) + "\n" + m.group("lead") + ":"
            lines[i] = m.group("lead") + new + m.group("rest")
            return "\n".join(lines)
        else:
            new = rng.choice(['""', "''", "1", "[a]", "{a: 1}", "model", "~", "&a k", "*a"])
        lines[i] = m.group("lead") + new + ":" + m.group("rest")
    elif op in ("value", "number", "deep", "long_string", "control", "long_list", "tag"):
        m = KEY.match(lines[i])
        if op == "value":
            value = random_value(rng)
        elif op == "number":
            value = rng.choice(EDGE_INTS + EDGE_FLOATS)
        elif op == "deep":
            value = deep_value(rng)
        elif op == "long_string":
            value = long_text(rng)
        elif op == "control":
            value = control_text(rng)
        elif op == "long_list":
            value = long_list(rng)
        else:
            tag = rng.choice(["!!str ", "!!int ", "!!float ", "!!binary ", "!foo ", "!<tag:x> "])
            value = tag + (m.group("rest").strip() or "x")
        end = block_end(lines, i)
        if end > i + 1 and rng.random() < 0.5:
            del lines[i + 1:end]
        lines[i] = m.group("lead") + m.group("key") + ": " + value
    elif op == "block_to_scalar":
        end = block_end(lines, i)
        m = KEY.match(lines[i])
        lines[i + 1:end] = []
        lines[i] = m.group("lead") + m.group("key") + ": " + random_value(rng)
    elif op == "document":
        where = rng.random()
        extra = rng.choice(["---", "--- !!map", "...", "---\n" + text, "---\nmodel: {}",
                            "--- |\n  text", "%YAML 1.2\n---", "---\n---", "--- [1, 2]"])
        if where < 0.5:
            lines.append(extra)
        else:
            lines.insert(rng.randrange(len(lines) + 1), extra)
    elif op == "add_key":
        at = rng.randrange(len(lines) + 1)
        indent = indent_of(lines[min(at, len(lines) - 1)]) if lines else 0
        key = rng.choice(known_keys + ["unknown", "model", "x" * 1100, control_text(rng)])
        lines.insert(at, " " * indent + key + ": " + random_value(rng))
    elif op == "alias":
        m = KEY.match(lines[i])
        j = rng.choice(keys)
        n = KEY.match(lines[j])
        if rng.random() < 0.5 and (m.group("rest").strip() or block_end(lines, i) > i + 1):
            lines[i] = m.group("lead") + m.group("key") + ": &a" + m.group("rest")
            lines[j] = n.group("lead") + n.group("key") + ": *a"
        else:
            # Nested aliases: a list of lists of lists, each level repeating the one below.
            levels = ["l0: &l0 [1, 2, 3, 4, 5, 6, 7, 8]"]
            for k in range(1, 9):
                levels.append("l%d: &l%d [%s]" % (k, k, ", ".join(["*l%d" % (k - 1)] * 8)))
            prefix = [" " * indent_of(lines[i]) + l for l in levels]
            lines[i:i] = prefix
            m2 = KEY.match(lines[i + len(prefix)])
            lines[i + len(prefix)] = m2.group("lead") + m2.group("key") + ": *l8"
    elif op == "crossover":
        donor = rng.choice(donors).split("\n")
        dk = key_lines(donor)
        if dk:
            d = rng.choice(dk)
            end = block_end(lines, i)
            lines[i:end] = donor[d:block_end(donor, d)]
    elif op == "whole":
        return rng.choice(["", "\n", "# only a comment\n", "---\n", "...\n", "~\n", "[]\n", "{}\n",
                           "model\n", "- model: {}\n", "model: \n", "model: []\n", "\ufeffmodel:\n",
                           "model: {num_layers: 1}\n", "%TAG ! tag:x,\n---\nmodel: {}\n",
                           text + "\n" + text])
    elif op == "indent":
        line = lines[i]
        delta = rng.choice([-3, -1, 1, 3])
        lines[i] = (" " * max(0, indent_of(line) + delta) + line.lstrip(" ")
                    if rng.random() < 0.8 else "\t" + line)
    return "\n".join(lines)


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["flip", "insert", "delete", "duplicate", "truncate", "junk", "bom"])
        n = len(data)
        if op == "flip" and n:
            k = rng.randrange(n)
            data[k] ^= 1 << rng.randrange(8)
        elif op == "insert":
            k = rng.randrange(n + 1)
            piece = rng.choice([b"\0", b"\xff", b"\r", b"\t", b"\n", b":", b"[", b"{", b'"', b"'",
                                b"&", b"*", b"!", b"|", b">", b"%", b"@", b"`", b"-", b"?", b",",
                                b"\xc3", b"\xe2\x80\xae", b"\xef\xbb\xbf", b"\x1b[2J"])
            data[k:k] = piece * rng.choice([1, 1, 2, 100])
        elif op == "delete" and n:
            k = rng.randrange(n)
            del data[k:k + rng.randint(1, 64)]
        elif op == "duplicate" and n:
            k = rng.randrange(n)
            piece = data[k:k + rng.randint(1, 256)]
            at = rng.randrange(n + 1)
            data[at:at] = piece
        elif op == "truncate" and n:
            del data[rng.randrange(n):]
        elif op == "junk":
            k = rng.randrange(n + 1)
            data[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        elif op == "bom":
            data[0:0] = b"\xef\xbb\xbf"
    return bytes(data)


def spec_mutant(rng, seeds, known_keys):
    # Most mutants start from a valid spec: one mistake in a valid spec reaches further in.
    good, broken = seeds
    text = rng.choice(good if rng.random() < 0.6 else broken)
    structural = rng.random() < 0.75
    if structural:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            text = mutate_spec_structure(rng, text, known_keys, good + broken)
    data = text.encode("utf-8", "surrogateescape")
    if not structural or rng.random() < 0.15:
        data = mutate_bytes(rng, data)
    return data


# --- trace mutants -----------------------------------------------------------------------


def bad_timestamp(rng):
    y = rng.choice(["2023", "2024", "1900", "2000", "0000", "9999", "-023", "20233", "abcd"])
    mo = rng.choice(["01", "02", "11", "12", "13", "00", "99", "-1", "1", "+1"])
    d = rng.choice(["01", "28", "29", "30", "31", "32", "00", "-1", "1 "])
    h = rng.choice(["00", "23", "24", "25", "99", "-1"])
    mi = rng.choice(["00", "59", "60", "99"])
    s = rng.choice(["00", "59", "60", "61", "-1"])
    frac = rng.choice(["", ".", ".0", ".9799600", "." + "9" * rng.choice([20, 400, 100000]), ".x",
                       ".1.2", "Z", "+01:00"])
    sep = rng.choice([" ", " ", " ", "T", "  ", "\t"])
    return "%s-%s-%s%s%s:%s:%s%s" % (y, mo, d, sep, h, mi, s, frac)


def mutate_trace(rng, text):
    lines = text.replace("\r\n", "\n").split("\n")
    header, rows = lines[0], [r for r in lines[1:] if r]
    # serve-sim reads the first 50 requests: most mutations land there.
    def row_index():
        return rng.randrange(min(len(rows), 60)) if rows else 0
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(["drop", "duplicate", "reorder", "field", "field", "number", "number",
                         "date", "date", "long", "junk", "header", "commas", "empty", "backwards"])
        if not rows and op not in ("header", "junk"):
            op = "junk"
        if op == "drop":
            k = row_index()
            del rows[k:k + rng.choice([1, 1, 5, 50])]
        elif op == "duplicate":
            k = row_index()
            rows[k:k] = rows[k:k + rng.choice([1, 3])] * rng.choice([1, 2, 100])
        elif op == "reorder":
            k = row_index()
            chunk = rows[k:k + rng.randint(2, 20)]
            rng.shuffle(chunk)
            rows[k:k + len(chunk)] = chunk
        elif op in ("field", "number", "date"):
            k = row_index()
            fields = rows[k].split(",")
            f = rng.randrange(len(fields))
            if op == "field":
                value = rng.choice(["", " ", "x", "-", "+", "1e3", "0x10", "1.5", " 4", "4 ", "nan",
                                    "\0", "\xff", "\x1b[2J", "\u202e", "4\r", "'4'", '"4"'])
            elif op == "number":
                f = rng.choice([1, 2]) if len(fields) > 2 else f
                value = rng.choice(EDGE_INTS + ["2147483647", "2147483648", "99999999999",
                                                "1073741824", "4096", "4095", "4097", "1"])
            else:
                f = 0
                value = bad_timestamp(rng)
            fields[f] = value
            rows[k] = ",".join(fields)
        elif op == "long":
            k = row_index()
            n = rng.choice([10000, 1000000, 5000000])
            rows[k] = rows[k] + rng.choice(["7", ",", "x", " "]) * n
        elif op == "junk":
            k = row_index()
            junk = "".join(chr(rng.randrange(256)) for _ in range(rng.randint(1, 300)))
            rows.insert(k, junk)
        elif op == "header":
            header = rng.choice(["", "TIMESTAMP,ContextTokens", header.lower(), header + ",Extra",
                                 "\ufeff" + header, header + " ", "2023-11-16 18:17:03.98,4,1",
                                 header + "\0"])
        elif op == "commas":
            k = row_index()
            rows[k] = rng.choice([rows[k] + ",", "," + rows[k], rows[k].replace(",", ",,", 1),
                                  rows[k].replace(",", "", 1), rows[k].replace(",", ";")])
        elif op == "empty":
            k = row_index()
            rows.insert(k, rng.choice(["", " ", "\r", ",,", "\t"]))
        elif op == "backwards":
            k = row_index()
            fields = rows[k].split(",")
            fields[0] = rng.choice(["2023-11-16 00:00:00", "1970-01-01 00:00:00",
                                    "9999-12-31 23:59:59"])
            rows[k] = ",".join(fields)
    sep = rng.choice(["\r\n", "\n", "\n", "\r"]) if rng.random() < 0.3 else "\r\n"
    out = sep.join([header] + rows)
    if rng.random() < 0.5:
        out += sep
    return out.encode("utf-8", "surrogateescape")


def trace_mutant(rng, seeds):
    text = rng.choice(seeds)
    data = mutate_trace(rng, text) if rng.random() < 0.85 else text.encode("latin-1")
    if rng.random() < 0.2:
        data = mutate_bytes(rng, data)
    return data


# --- checkpoint mutants ------------------------------------------------------------------

# Numbers a length, count, offset or dimension field may be set to: zero, small, the edges of
# 32 and 64 bits, and values that overflow when multiplied or added.
HOSTILE_U64 = [0, 1, 2, 7, 255, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x100000000,
               1 << 40, (1 << 62) + 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def gguf_header_end(data):
    """Where a GGUF's tensor infos end (roughly: the data section is 32-aligned after them);
    mutations aim before it, where the lengths and offsets are."""
    return min(len(data), max(64, len(data) // 3))


def mutate_checkpoint_bytes(rng, data, header_end):
    data = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        op = rng.choice(["u64", "u64", "u32", "flip", "truncate", "truncate", "generic"])
        end = max(8, min(header_end, len(data) - 8))
        if op in ("u64", "u32") and len(data) >= 16:
            width = 8 if op == "u64" else 4
            k = rng.randrange(0, end - width + 1)
            if rng.random() < 0.5:
                k -= k % width
            value = rng.choice(HOSTILE_U64 + [len(data) + rng.randint(-16, 16)])
            data[k:k + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
        elif op == "flip" and data:
            k = rng.randrange(min(len(data), header_end * 2))
            data[k] ^= 1 << rng.randrange(8)
        elif op == "truncate" and data:
            del data[rng.randrange(len(data)):]
        else:
            data = bytearray(mutate_bytes(rng, bytes(data)))
    return bytes(data)


NUMBER = re.compile(rb"-?\d+")


def as_bytes(data):
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")


def mutate_safetensors(rng, data):
    """A safetensors file: the 8-byte header length, the JSON header (shapes, offsets, dtypes),
    or the data."""
    if len(data) < 8:
        return mutate_bytes(rng, data)
    n = int.from_bytes(data[:8], "little")
    header, rest = data[8:8 + n], data[8 + n:]
    op = rng.choice(["length", "number", "number", "dtype", "json", "truncate", "bytes"])
    if op == "length":
        value = rng.choice(HOSTILE_U64 + [n + rng.randint(-9, 9), len(data)])
        return (value % (1 << 64)).to_bytes(8, "little") + data[8:]
    if op == "number":
        spots = list(NUMBER.finditer(header))
        if spots:
            m = rng.choice(spots)
            value = rng.choice(HOSTILE_U64 + [-1, -(1 << 63), int(m.group()) + rng.randint(-3, 3)])
            header = header[:m.start()] + str(value).encode() + header[m.end():]
        return len(header).to_bytes(8, "little") + header + rest
    if op == "dtype":
        header = re.sub(rb'"(BF16|F16|F32|I8|U8)"', lambda _: rng.choice(
            [b'"F64"', b'"I64"', b'"BOOL"', b'"F8_E4M3"', b'"Q4"', b'""', b'"BF16 "']), header,
            count=1)
        return len(header).to_bytes(8, "little") + header + rest
    if op == "json":
        header = (as_bytes(mutate_trace(rng, header.decode("utf-8", "surrogateescape")))
                  if rng.random() < 0.3 else mutate_bytes(rng, header))
        return len(header).to_bytes(8, "little") + header + rest
    if op == "truncate":
        return data[:rng.randrange(len(data))]
    return mutate_checkpoint_bytes(rng, data, 8 + n)


def checkpoint_mutant(rng, seeds):
    """(files, command arguments): a GGUF file, or a Hugging Face folder (config.json, the
    index and shards) with one of its files mutated, for `freezeframe inspect --verify` or
    `freezeframe tokenize`. `seeds`: (GGUF files' bytes, folders as {name: bytes})."""
    ggufs, folders = seeds
    if ggufs and (not folders or rng.random() < 0.6):
        data = rng.choice(ggufs)
        files = {"model.gguf": mutate_checkpoint_bytes(rng, data, gguf_header_end(data))}
        if rng.random() < 0.3:
            return files, ["tokenize", "model.gguf", "--text", "hello, world"]
        return files, ["inspect", "model.gguf", "--verify"]
    files = dict(rng.choice(folders))
    name = rng.choice(sorted(files))
    if name.endswith(".safetensors"):
        files[name] = mutate_safetensors(rng, files[name])
    else:  # config.json or the index: JSON
        files[name] = (as_bytes(mutate_trace(rng, files[name].decode("utf-8", "surrogateescape")))
                       if rng.random() < 0.5 else mutate_bytes(rng, files[name]))
    return {"model/" + n: d for n, d in files.items()}, ["inspect", "model", "--verify"]

