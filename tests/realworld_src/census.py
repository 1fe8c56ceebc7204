"""Failure census of the real-world corpus: every file × check, grouped by error class.

    PYTHONPATH=. python tests/realworld_src/census.py [OUT.md] [--known]

Runs the same checks as tests/test_realworld_corpus.py (parse, exact
round-trip, every tool, prune) and writes a Markdown table plus the messages
grouped by class. With --known it also prints the KNOWN_FAILURES entries the
test file should carry.
"""

from __future__ import annotations

import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import test_realworld_corpus as t  # noqa: E402
from neutrino.isa.ptx import parse_module, print_module  # noqa: E402

# First match wins: (pattern over the message, class constant of the test file).
CLASSIFIERS = [
    (r"malformed register name|malformed \.reg declaration", "BARE_REGISTER"),
    (r"Unknown symbol '(temp_param_reg|p|P\d|r0|__\$\d|low|high|tmp)'", "BARE_REGISTER"),
    (r"\.reg\.|expected .* after opcode", "SPACING"),
    (r"function_name|\$L__info_string|\.section", "LINEINFO_PRUNE"),
    (r"type mismatch: (BYTES|IN\d|OUT)", "HELPER_TYPES"),
    (r"__nt_count|counting|Unexpected instruction types specified for 'ld'", "COUNTING_REWRITE"),
    (r"not supported on \.target|requires .*sm_|PTX ISA version|\.version", "OLD_TARGET"),
]


def classify(message: str) -> str:
    for pattern, name in CLASSIFIERS:
        if re.search(pattern, message):
            return name
    return "OTHER"


def first_line(message: str) -> str:
    for line in message.splitlines():
        line = line.strip()
        if line and not line.startswith("ptxas info") and "Potential Performance Loss" not in line:
            return re.sub(r"/tmp/\S+?/k\.ptx", "k.ptx", line)[:240]
    return message[:240]


def roundtrip_message(text: str, path: Path) -> str | None:
    printed = print_module(parse_module(text, str(path)))
    if printed == text:
        return None
    got, want = printed.splitlines(), text.splitlines()
    for number, (a, b) in enumerate(zip(got, want), 1):
        if a != b:
            return f"not exact: printed line {number} {a!r} vs source {b!r}"
    return f"not exact: {len(got)} printed lines vs {len(want)} source lines"


def main() -> None:
    out = Path(next((a for a in sys.argv[1:] if not a.startswith("--")), "/tmp/realworld_census.md"))
    pool = t.PtxasPool(None)
    results = t.FileResults(pool)
    checks = ["parse", "roundtrip"] + t.TOOLS + ["prune"]
    table: dict[str, dict[str, str]] = {}
    messages: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    start = time.time()
    for path in t.FILES:
        fid = t.file_id(path)
        row = table[fid] = {}
        text = path.read_text()
        try:
            parse_module(text, str(path))
        except Exception as e:  # noqa: BLE001 - we are counting failures
            cls = classify(str(e))
            for check in checks:
                row[check] = cls
            messages[cls].append((fid, "parse", first_line(str(e))))
            continue
        row["parse"] = "pass"
        rt = roundtrip_message(text, path)
        row["roundtrip"] = "pass" if rt is None else "NOT_EXACT"
        if rt:
            messages["NOT_EXACT"].append((fid, "roundtrip", rt[:240]))
        for check in t.TOOLS + ["prune"]:
            outcome, assembly = results.get(path, check)
            if outcome.error is not None:
                msg, stage = outcome.error, "instrument"
            elif not assembly.ok:
                msg, stage = assembly.log, "ptxas"
            else:
                row[check] = "pass"
                continue
            cls = classify(msg)
            row[check] = f"{cls}({stage})"
            messages[cls].append((fid, check, f"[{stage}] {first_line(msg)}"))
        print(fid, f"{time.time() - start:.0f}s", file=sys.stderr)
    pool.pool.shutdown()
    write(out, table, messages, checks)
    if "--known" in sys.argv:
        print_known(table, checks)


def write(out: Path, table, messages, checks) -> None:
    lines = [
        "# Real-world corpus failure census",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `tests/realworld_src/census.py`"
        " on branch i-corpus (corpus in /work/wt-corpus/tests/data/realworld/).",
        "Cell: `pass`, or the issue-10 class of the first error (stage in parentheses).",
        "",
    ]
    total = sum(len(r) for r in table.values())
    passed = sum(v == "pass" for r in table.values() for v in r.values())
    lines += [f"**{passed} of {total} file × check cells pass.**", ""]
    per_check = {c: sum(r.get(c) == "pass" for r in table.values()) for c in checks}
    lines += ["| check | files passing |", "| --- | --- |"] + [f"| {c} | {n}/{len(table)} |" for c, n in per_check.items()] + [""]
    short = [c.replace(".toml", "") for c in checks]
    lines += ["| file | " + " | ".join(short) + " |", "|" + " --- |" * (len(checks) + 1)]
    for fid, row in table.items():
        lines.append(f"| {fid} | " + " | ".join(row.get(c, "?") for c in checks) + " |")
    lines += ["", "## Messages by class", ""]
    for cls in sorted(messages, key=lambda c: -len(messages[c])):
        lines += [f"### {cls}: {len(messages[cls])} cells — {getattr(t, cls, '')}", ""]
        grouped: dict[str, list[str]] = defaultdict(list)
        for fid, check, msg in messages[cls]:
            key = re.sub(r"^\S+?:\d+:\d+: ", "", msg)
            key = re.sub(r"line \d+", "line N", key)
            grouped[key].append(f"{fid}:{check}")
        for key, where in sorted(grouped.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"- `{key}` — {len(where)}×: {', '.join(where[:8])}{' …' if len(where) > 8 else ''}")
        lines.append("")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}: {passed}/{total} pass", file=sys.stderr)


def print_known(table, checks) -> None:
    print("KNOWN_FAILURES = {")
    for fid, row in table.items():
        failing = {c: v.split("(")[0] for c, v in row.items() if v != "pass"}
        if not failing:
            continue
        if len(failing) == len(checks) and len(set(failing.values())) == 1:
            print(f'    ("{fid}", "*"): {next(iter(failing.values()))},')
            continue
        for c, cls in failing.items():
            print(f'    ("{fid}", "{c}"): {cls},')
    print("}")


if __name__ == "__main__":
    main()
