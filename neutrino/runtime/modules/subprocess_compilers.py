"""The `ptxas` and `nvlink` that XLA runs in place of the real ones, so a JAX program's kernels can be probed.

XLA (jaxlib 0.11 on CUDA 13, without its nvJitLink build option) compiles each module's PTX with
a ptxas *subprocess*, links relocatable cubins with an nvlink subprocess when it compiled a module
in parts, and hands the driver the cubin: the shim then sees no PTX. In a JAX process
(frameworks.prepare_jax) the runtime puts a directory holding both wrappers first on PATH. Each
runs the real tool with the same arguments (its output, messages and exit status are the
program's, unchanged) and, when it succeeded, files what the cubin it wrote was made from, under
the cubin's SHA-256:

* `<index>/<sha256>.ptx`: the PTX (ptxas; nvlink when it linked one cubin whose PTX was filed);
* `<index>/<sha256>.why`: why there is no single PTX (nvlink of several cubins, or of a cubin
  whose PTX we never saw).

When the program loads that cubin, compilers.py looks there. Recording never changes what the
tool did: any failure of ours is one line in `<index>/errors.log`. `<index>/calls.log` has one
line per call (tool, status, output hash, inputs): what `jax_diagnose.py` shows.
"""

from __future__ import annotations

# Only what the wrappers need at every compile is imported here (each call starts a Python):
# shutil, shlex and pathlib are imported where the index is set up, in the program's process.
import hashlib
import os
import sys
import time

ENV_INDEX = "NEUTRINO_PTX_INDEX_DIR"  # where the wrappers file PTX by cubin hash
ENV_REAL = {"ptxas": "NEUTRINO_REAL_PTXAS", "nvlink": "NEUTRINO_REAL_NVLINK"}  # the tools the wrappers run
TOOLS = tuple(ENV_REAL)
CUDA_BIN_FALLBACKS = ("/usr/local/cuda/bin",)  # where XLA also looks when PATH has none
# nvlink options whose value is the next argument (the rest are flags or `--opt=value`)
NVLINK_VALUE_OPTIONS = frozenset({"-arch", "--arch", "-o", "--output-file", "-L", "--library-path", "-l", "--library",
                                  "-Xptxas", "--Xptxas", "-Xnvvm", "--Xnvvm", "-cpu-arch", "--cpu-arch", "-Ofc",
                                  "--Ofast-compile", "-split-compile", "--split-compile", "-optf", "--options-file",
                                  "-m", "--machine", "-maxrregcount", "--maxrregcount"})


def find_real(tool: str, path: str | None = None, skip: str | None = None) -> str | None:
    """`tool` on PATH (without the directory `skip`, our wrappers'), else in the usual CUDA root."""
    import shutil

    dirs = [d for d in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep) if d]
    if skip is not None:
        dirs = [d for d in dirs if os.path.realpath(d) != os.path.realpath(skip)]
    found = shutil.which(tool, path=os.pathsep.join([*dirs, *CUDA_BIN_FALLBACKS]))
    return os.path.realpath(found) if found else None


def install(index_dir, real: dict[str, str]):
    """Write `<index_dir>/bin/<tool>` for each tool in `real` (tool -> the real one's path): a shell
    script running this module. Returns the bin directory (a Path)."""
    import shlex
    from pathlib import Path

    bin_dir = Path(index_dir) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    package_parent = str(Path(__file__).resolve().parents[3])
    for tool, path in real.items():
        code = f"import sys; sys.path.insert(0, {package_parent!r}); " \
               f"from neutrino.runtime.modules.subprocess_compilers import main; sys.exit(main({tool!r}))"
        script = bin_dir / tool
        # LD_PRELOAD cleared: neither the wrapper's Python nor the tool is a program to profile
        script.write_text("#!/bin/sh\n"
                          f"export {ENV_REAL[tool]}={shlex.quote(path)} {ENV_INDEX}={shlex.quote(str(index_dir))}\n"
                          f"LD_PRELOAD= exec {shlex.quote(sys.executable)} -S -E -c {shlex.quote(code)} \"$@\"\n")
        script.chmod(0o755)
    return bin_dir


# ---------------------------------------------------------------- command lines

def split_arguments(argv: list[str]) -> tuple[str | None, str | None]:
    """(input PTX file, output cubin file) of a ptxas command line, as far as they can be told."""
    output = None
    positional = []
    it = iter(range(len(argv)))
    for i in it:
        arg = argv[i]
        if arg in ("-o", "--output-file") and i + 1 < len(argv):
            output = argv[i + 1]
            next(it, None)
        elif arg.startswith("--output-file="):
            output = arg.split("=", 1)[1]
        elif not arg.startswith("-"):
            positional.append(arg)
    ptx = next((p for p in positional if p.endswith(".ptx")), None)
    if ptx is None:
        ptx = next((p for p in reversed(positional) if os.path.isfile(p)), None)
    return ptx, output


def split_link_arguments(argv: list[str]) -> tuple[list[str], str | None]:
    """(input files, output file) of an nvlink command line."""
    inputs, output = [], None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in NVLINK_VALUE_OPTIONS and i + 1 < len(argv):
            if arg in ("-o", "--output-file"):
                output = argv[i + 1]
            i += 2
            continue
        if arg.startswith("--output-file="):
            output = arg.split("=", 1)[1]
        elif not arg.startswith("-"):
            inputs.append(arg)
        i += 1
    return inputs, output


# ---------------------------------------------------------------- the index

def cubin_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def file_entry(index_dir, key: str, suffix: str, data: bytes) -> str:
    """`<index>/<key><suffix>`, written atomically: a reader sees all of it or nothing."""
    target = os.path.join(index_dir, f"{key}{suffix}")
    tmp = os.path.join(index_dir, f".{key}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, target)
    return target


def record(argv: list[str], index_dir, key: str) -> str | None:
    """File the PTX of a successful ptxas compile under `key`, its cubin's hash; the path written, or None."""
    ptx_path, _ = split_arguments(argv)
    if not ptx_path:
        return None
    return file_entry(index_dir, key, ".ptx", _read(ptx_path))


def record_link(argv: list[str], index_dir, key: str) -> str | None:
    """File what a successful nvlink's cubin (hash `key`) was made from: the PTX of its one input, or why none."""
    inputs, _ = split_link_arguments(argv)
    if not inputs:
        return None
    known = []
    for name in inputs:
        try:
            known.append(os.path.join(index_dir, f"{cubin_hash(_read(name))}.ptx"))
        except OSError:
            known.append(None)
    if len(inputs) == 1 and known[0] is not None and os.path.exists(known[0]):
        return file_entry(index_dir, key, ".ptx", _read(known[0]))
    with_ptx = sum(1 for k in known if k is not None and os.path.exists(k))
    why = (f"nvlink linked {len(inputs)} relocatable cubins into this one ({with_ptx} compiled from PTX by the "
           "ptxas wrapper); only a cubin made from one PTX can be probed")
    if len(inputs) == 1:
        why = "nvlink linked one cubin whose PTX was not seen (not compiled by the ptxas wrapper)"
    return file_entry(index_dir, key, ".why", why.encode())


def log_call(index_dir, tool: str, rc: int, argv: list[str], key: str | None) -> None:
    """One line per call: `time tool rc=N out=HASH16` (`-`: no output), then the arguments, tab-separated."""
    with open(os.path.join(index_dir, "calls.log"), "a") as log:
        log.write("\t".join([f"{time.time():.3f} {tool} rc={rc} out={key[:16] if key else '-'}", *argv])
                  .replace("\n", " ") + "\n")


def read_call(line: str) -> tuple[str, int, list[str]] | None:
    """(tool, exit status, arguments) of a calls.log line, or None."""
    head, *argv = line.rstrip("\n").split("\t")
    parts = head.split(" ")
    if len(parts) < 3 or not parts[2].startswith("rc="):
        return None
    try:
        return parts[1], int(parts[2][3:]), argv
    except ValueError:
        return None


def run_tool(real: str, argv: list[str]) -> int:
    """Run the real tool with our arguments and environment; its exit status (as a shell gives it)."""
    pid = os.posix_spawn(real, [real, *argv], os.environ)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if status & 0x7F == 0 else 128 + (status & 0x7F)


# ---------------------------------------------------------------- the wrappers

def main(tool: str = "ptxas", argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    real = os.environ.get(ENV_REAL[tool]) or find_real(tool)
    if not real:
        sys.stderr.write(f"neutrino: the {tool} wrapper found no real {tool}\n")
        return 127
    rc = run_tool(real, argv)
    index_dir = os.environ.get(ENV_INDEX)
    if not index_dir:
        return rc
    try:
        output = split_arguments(argv)[1] if tool == "ptxas" else split_link_arguments(argv)[1]
        key = None  # the output's hash, read once for the index and the log
        if rc == 0 and output:
            try:
                key = cubin_hash(_read(output))
            except OSError:
                pass
        if key is not None:
            (record if tool == "ptxas" else record_link)(argv, index_dir, key)
        log_call(index_dir, tool, rc, argv, key)
    except Exception as e:  # noqa: BLE001 - recording never changes what the tool did
        try:
            with open(os.path.join(index_dir, "errors.log"), "a") as log:
                log.write(f"{tool} {argv}: {type(e).__name__}: {e}\n")
        except OSError:
            pass
    return rc
