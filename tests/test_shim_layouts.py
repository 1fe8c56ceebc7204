"""The C structs Python hands to the shim, checked against the header they mirror.

NtJob (neutrino/runtime/results/drain.py) is shim/writer.h's nt_job; NtPlan and NtPlanStats
(neutrino/runtime/launch_path/fastpath.py) are shim/shim.h's nt_plan and nt_plan_stats; NtGraphDesc
(neutrino/runtime/cudagraphs/sinks.py) is shim.h's nt_graph_desc, and NodeDesc and AppendParams
(cudagraphs/ring.py: what the graph append kernel reads) are nt_graph_node_desc and
nt_graph_append_args, which tests/fakecuda/fakecuda.c runs the kernel with; PickKernelDesc and
PickAppendDesc (cudagraphs/replay_select.py) are nt_pick_kernel_desc and nt_pick_append_desc. A tiny C program
compiled with the system compiler prints sizeof and offsetof of every field the ctypes class
names; a field moved, resized or renamed on either side fails here, not in a profiled program.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from neutrino.runtime.results.drain import MAX_MAPS, NtJob
from neutrino.runtime.launch_path.fastpath import NtPlan, NtPlanStats
from neutrino.runtime.cudagraphs.ring import AppendParams, NodeDesc
from neutrino.runtime.cudagraphs.sinks import NtChainDesc, NtGraphDesc
from neutrino.runtime.cudagraphs.replay_select import PickAppendDesc, PickKernelDesc

SHIM = Path(__file__).resolve().parent.parent / "shim"
MIRRORS = {"nt_job": NtJob, "nt_plan": NtPlan, "nt_plan_stats": NtPlanStats, "nt_graph_desc": NtGraphDesc,
           "nt_graph_node_desc": NodeDesc, "nt_graph_append_args": AppendParams,
           "nt_pick_kernel_desc": PickKernelDesc, "nt_pick_append_desc": PickAppendDesc, "nt_chain_desc": NtChainDesc}


def c_layouts(tmp_path: Path) -> dict[str, dict[str, int]]:
    """{struct: {"sizeof": n, field: offset}} as the C compiler lays the header's structs out."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "shim.h"', "int main(void) {"]
    for struct, mirror in MIRRORS.items():
        lines.append(f'    printf("{struct} sizeof %zu\\n", sizeof({struct}));')
        lines += [f'    printf("{struct} {name} %zu\\n", offsetof({struct}, {name}));' for name, _ in mirror._fields_]
    lines += ["    return 0;", "}"]
    source = tmp_path / "layouts.c"
    source.write_text("\n".join(lines) + "\n")
    program = tmp_path / "layouts"
    built = subprocess.run(["cc", "-Wall", "-Werror", f"-I{SHIM}", "-o", str(program), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr  # a field the ctypes class names and the header does not
    out: dict[str, dict[str, int]] = {}
    for line in subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout.splitlines():
        struct, name, value = line.split()
        out.setdefault(struct, {})[name] = int(value)
    return out


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_ctypes_structs_match_the_shim_header(tmp_path):
    layouts = c_layouts(tmp_path)
    for struct, mirror in MIRRORS.items():
        found = {name: getattr(mirror, name).offset for name, _ in mirror._fields_}
        expected = {name: offset for name, offset in layouts[struct].items() if name != "sizeof"}
        assert found == expected, f"{mirror.__name__} vs {struct}"
        assert ctypes.sizeof(mirror) == layouts[struct]["sizeof"], f"{mirror.__name__} vs {struct}: size"


def header_fields(text: str) -> dict[str, list[str]]:
    """{struct: its member names in order} of every `typedef struct { ... } name;` (no nested braces)."""
    import re

    out = {}
    for body, name in re.findall(r"typedef struct \{([^{}]*)\}\s*(\w+);", text):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        members = []
        for declaration in filter(None, (d.strip() for d in body.split(";"))):
            declarators = re.sub(r"^(?:const\s+)?\w+\s+", "", declaration)  # the type, once
            members += [re.match(r"\**\s*(\w+)", d.strip()).group(1) for d in declarators.split(",")]
        out[name] = members
    return out


def test_the_header_names_every_field_the_mirrors_name():
    """Both ways, in order: a member the header has and the ctypes class lacks (or the reverse)."""
    import re

    text = (SHIM / "writer.h").read_text() + (SHIM / "shim.h").read_text()
    fields = header_fields(text)
    for struct, mirror in MIRRORS.items():
        assert [n for n, _ in mirror._fields_] == fields[struct], struct
    assert MAX_MAPS == int(re.search(r"#define NT_MAX_MAPS (\d+)", text).group(1))


def shim_sources_and_headers() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(SHIM.glob("*.[ch]"))}


def test_shim_files_declare_nothing_of_each_other_by_hand():
    """Every function one file of shim/ defines and another calls is declared once, in a header
    (shim.h, writer.h, context.h): no .c file declares another's function itself, and every
    declaration in shim.h has its definition in exactly one .c file."""
    import re

    files = shim_sources_and_headers()
    defined: dict[str, list[str]] = {}
    for name, text in files.items():
        if name.endswith(".c"):
            for fn in re.findall(r"^[A-Za-z_][\w \*]*?\b((?:neutrino|nt)_\w+)\([^;{]*\)\s*\{", text, re.M):
                defined.setdefault(fn, []).append(name)
    for name, text in files.items():
        if name.endswith(".c"):
            # a file-scope prototype of a neutrino_/nt_ function that is not static
            hand = [fn for fn in re.findall(r"^(?!static)[A-Za-z_][\w \*]*?\b((?:neutrino|nt)_\w+)\([^;{]*\);", text, re.M)
                    if fn in defined and name not in defined[fn]]
            assert not hand, f"{name} declares {hand} by hand: put them in shim.h"
    declared = re.findall(r"^[A-Za-z_][\w \*]*?\b(neutrino_\w+)\([^;{]*\);", files["shim.h"], re.M)
    assert declared
    for fn in declared:
        assert len(defined.get(fn, [])) == 1, f"shim.h declares {fn}: defined in {defined.get(fn)}"


def test_the_writer_calls_no_other_file_of_the_shim():
    """The writer is below the fast path and the graph poller: what it gives back when a job is
    written goes through the callbacks they register (writer.h), so there is no call circle between
    writer.c, fastlaunch.c and graphs.c; and realsym.c, the bottom, calls none of the others."""
    import re

    files = shim_sources_and_headers()
    defined = {}
    for name, text in files.items():
        if name.endswith(".c"):
            for fn in re.findall(r"^[A-Za-z_][\w \*]*?\b(neutrino_\w+)\([^;{]*\)\s*\{", text, re.M):
                defined[fn] = name
    for caller, allowed in (("writer.c", {"writer.c", "realsym.c", "cupti.c"}), ("realsym.c", {"realsym.c"})):
        body = re.sub(r"/\*.*?\*/", "", files[caller], flags=re.S)
        called = {defined[fn] for fn in re.findall(r"\b(neutrino_\w+)\s*\(", body) if fn in defined}
        assert called <= allowed, f"{caller} calls into {sorted(called - allowed)}"
