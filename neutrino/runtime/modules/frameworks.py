"""Which framework a module without PTX came from, what makes its kernels probe-able,
and the environment a framework needs to hand its PTX (or its launches) to us.

Only PTX can be probed. A module that reaches the driver as SASS alone runs
unprobed; the exit summary groups those modules by their likely origin, guessed
from the kernel names in the image (cuBLAS, cuDNN, NCCL, PyTorch's ATen, XLA
fusions) and from the frameworks the process imported, with one line on what,
if anything, would make them probe-able (spec/ptx-sources.md).
"""

from __future__ import annotations

import os
import re
import sys
from typing import NamedTuple

from neutrino.runtime.modules.autotune_window import WRAPPED, SuspendWindow  # stdlib only: fine at interpreter start
from neutrino.runtime.modules.import_hooks import AfterImport, spec_running_after  # noqa: F401 - stdlib only


class Origin(NamedTuple):  # not attrs: loaded at interpreter start (compilers.py says why)
    name: str
    hint: str


XLA = Origin("XLA (JAX)", "XLA compiled this PTX where we cannot see it (a ptxas our PATH wrapper does not "
                          "front, or an executable from JAX's persistent compilation cache); its kernels are probed "
                          "when XLA compiles with libnvJitLink or with the ptxas first on PATH, with JAX's "
                          "persistent compilation cache off")
XLA_LIBRARY = Origin("a library XLA calls (cuBLAS, cuDNN, …)",
                     "XLA's own kernels were compiled where we see their PTX, so an unnamed SASS-only module in a "
                     "JAX process is one of NVIDIA's libraries: never probed")
CUBLAS = Origin("cuBLAS", "NVIDIA ships cuBLAS kernels as SASS only: never probed")
CUDNN = Origin("cuDNN", "NVIDIA ships cuDNN kernels as SASS only: never probed")
NCCL = Origin("NCCL", "NCCL ships its kernels as SASS only: never probed")
CUFFT = Origin("cuFFT/cuRAND/cuSPARSE", "NVIDIA libraries ship SASS only: never probed")
TORCH = Origin("PyTorch (ATen)", "PyTorch's precompiled kernels are SASS only: never probed (its Triton and "
                                 "TorchInductor kernels are)")
CUPY = Origin("CuPy", "CuPy hands PTX to the driver when CUPY_COMPILE_WITH_PTX=1 (neutrino sets it unless you "
                      "did); modules loaded from cubin files stay SASS only")
NVCC = Origin("a SASS-only build", "rebuild with a PTX target (nvcc -gencode arch=compute_XX,code=compute_XX, "
                                   "or code=[sm_XX,compute_XX]) to probe its kernels")

# Markers in kernel names (the image's string table), most specific first.
_NAME_MARKERS: tuple[tuple[bytes, Origin], ...] = (
    (rb"nccl(Dev)?Kernel|ncclFunction", NCCL),
    (rb"cudnn|xmma_(fprop|dgrad|wgrad)|conv2d_grouped|fft2d_r2c", CUDNN),
    (rb"cublas|xmma_gemm|nvjet_|cutlass_[0-9]+_(simt|tensorop|wmma)_|sgemm|hgemm|gemv2[NT]_kernel|gemmSN_|gemmk1_kernel|splitKreduce", CUBLAS),
    (rb"regular_fft|vector_fft|curand|cusparse|csrmv", CUFFT),
    (rb"_ZN2at6native|at::native|_ZN3c10", TORCH),
    (rb"(loop|input)_[A-Za-z0-9_]*fusion|_fusion(_[0-9]+)?\x00|wrapped_[a-z_]+|triton_gemm|gemm_fusion", XLA),
)
_NAME_RE = re.compile(b"|".join(b"(?:" + m + b")" for m, _ in _NAME_MARKERS))
# A literal inside every alternative of _NAME_MARKERS: `first_marker` finds them with bytes.find
# (memchr speed) and runs _NAME_RE only around them. Keep in step with _NAME_MARKERS.
_ANCHORS = (b"nccl", b"cudnn", b"xmma_", b"conv2d_grouped", b"fft2d_r2c", b"cublas", b"nvjet_", b"cutlass_", b"sgemm",
            b"hgemm", b"gemv2", b"gemmSN_", b"gemmk1_kernel", b"splitKreduce", b"regular_fft", b"vector_fft",
            b"curand", b"cusparse", b"csrmv", b"_ZN2at6native", b"at::native", b"_ZN3c10", b"fusion", b"wrapped_",
            b"triton_gemm")
_WINDOW = 512  # bytes searched either side of an anchor: longer than the kernel names we classify by


_FIRST_BOUND = 1 << 12  # anchors are first looked for in the image's first 4 KiB, then 4x further each time


def first_marker(image: bytes):
    """_NAME_RE's leftmost match in the image, as `_NAME_RE.search(image)` finds it for names shorter
    than _WINDOW, in time linear in the image at memchr speed: the regex alone scans a large fatbin
    at well under 10 MB/s (seconds per module load of a big library; issue 29). The anchors are
    looked for in a prefix that grows until a match is found: a match near the start (a library's
    first kernel names) costs no scan of the whole image per anchor absent from it."""
    import heapq

    heap: list = []  # (position, anchor) of every anchor occurrence known before `bound`
    pending = {anchor: 0 for anchor in _ANCHORS}  # anchors with no occurrence before `bound`: searched from
    bound = 0
    searched_to = 0
    while heap or pending:
        if (not heap or heap[0][0] >= bound) and bound < len(image):
            bound = min(len(image), max(_FIRST_BOUND, 4 * bound))
            for anchor, since in list(pending.items()):  # occurrences starting before the new bound
                at = image.find(anchor, since, bound + len(anchor) - 1)
                if at >= 0:
                    heapq.heappush(heap, (at, anchor))
                    del pending[anchor]
                else:
                    pending[anchor] = bound
            continue
        if not heap:
            return None
        at, anchor = heapq.heappop(heap)
        start = max(at - _WINDOW, searched_to)
        end = at + len(anchor) + _WINDOW
        if at + len(anchor) > searched_to:
            m = _NAME_RE.search(image, start, end)
            if m is not None:
                return m
            searched_to = max(searched_to, end - _WINDOW)  # a later match may still start before `end`
        following = image.find(anchor, at + 1, bound + len(anchor) - 1)
        if following >= 0:
            heapq.heappush(heap, (following, anchor))
        else:
            pending[anchor] = max(at + 1, bound)
    return None


_PATH_MARKERS = (("libcublas", CUBLAS), ("libcudnn", CUDNN), ("libnccl", NCCL), ("libcufft", CUFFT),
                 ("libcurand", CUFFT), ("libcusparse", CUFFT), ("libtorch", TORCH), ("xla_cuda", XLA),
                 ("cupy", CUPY))


def module_origin(image: bytes | None, path: str | None = None, modules=None, xla_compiles_seen: bool = False) -> Origin:
    """The likely origin of a module without PTX: its path, its kernel names, then the process's imports.
    `xla_compiles_seen`: XLA's compilations are visible to us (the subprocess wrappers are in place, or
    nvJitLink links were seen), so an unrecognised module in a JAX process is a library's, not XLA's."""
    low = (path or "").lower()
    for marker, origin in _PATH_MARKERS:
        if marker in low:
            return origin
    if image:
        m = _marker_in_kernel_names(image)
        if m is not None:
            for marker, origin in _NAME_MARKERS:
                if re.match(marker, m.group(0)):
                    return origin
    loaded = sys.modules if modules is None else modules
    if "jaxlib" in loaded or "jax" in loaded:
        return XLA_LIBRARY if xla_compiles_seen else XLA
    if "cupy" in loaded:
        return CUPY
    if "torch" in loaded:
        return TORCH
    return NVCC


_TEXT_SECTION = re.compile(rb"\.text\.([A-Za-z_$][\w$.]*)\x00")
_NAMES_LOOKED_AT = 256  # kernel names searched for an origin marker: a library names its kernels alike
_PREFIX_WITHOUT_NAMES = 1 << 16  # no visible names (compressed cubins): markers looked for this far only


def _text_sections(image: bytes):
    """`_TEXT_SECTION.finditer(image)`'s matches, found with bytes.find (memchr speed: a large
    SASS-only image without names, compressed, is passed over in milliseconds, not a regex scan)."""
    at = image.find(b".text.")
    while at >= 0:
        m = _TEXT_SECTION.match(image, at)
        at = image.find(b".text.", m.end() if m else at + 1)
        if m is not None:
            yield m


def _marker_in_kernel_names(image: bytes):
    """_NAME_RE's first match in the image's first kernel names (`.text.<kernel>` sections), or where
    it shows none (compressed cubins, a bare string) in its first 64 KiB: a SASS-only module's load
    costs a bounded search, not a scan of a many-megabyte library image per name anchor (issue 29)."""
    names = [m.group(1) for _, m in zip(range(_NAMES_LOOKED_AT), _text_sections(image))]
    if names:
        return _NAME_RE.search(b"\x00".join(names) + b"\x00")
    return first_marker(image[:_PREFIX_WITHOUT_NAMES])


def kernel_names(image: bytes | None, limit: int = 8) -> list[str]:
    """The first `limit` kernel names of a cubin (its `.text.<kernel>` section names), for the event log."""
    names: list[str] = []
    for m in _text_sections(image or b""):
        name = m.group(1).decode(errors="replace")
        if name not in names:
            names.append(name)
            if len(names) == limit:
                break
    return names


def summary_lines(counts, examples: dict[str, str] | None = None) -> list[str]:
    """The exit summary's lines for modules that had no PTX: `counts` is Counter(Origin)."""
    total = sum(counts.values())
    if not total:
        return []
    lines = [f"neutrino: {total} module(s) had no PTX and ran unprobed (likely origin; what makes them probe-able):"]
    for origin, n in counts.most_common():
        lines.append(f"  {n:6d}  {origin.name}: {origin.hint}")
        if examples and examples.get(origin.name):
            lines.append(f"          e.g. {examples[origin.name]}")
    return lines


# ---------------------------------------------------------------- the child's environment

XLA_FLAGS = "XLA_FLAGS"
# XLA records runs of fusions into CUDA graphs built node by node (command buffers); launches
# there never pass through cuLaunchKernel, so they could not be probed. Plain launches instead
# change no result, only the launch overhead.
XLA_PROBE_FLAGS = (("xla_gpu_enable_command_buffer", ""),)


def watch_for_jax(event=None, environ=None, on_wrappers=None, compile_window=None) -> AfterImport | None:
    """Give a JAX program our XLA flags when it imports jax (or now, if it already has): programs
    commonly set XLA_FLAGS themselves just before `import jax`; ours are appended to theirs then
    (XLA reads the variable later, when JAX starts its backend). `on_wrappers(index_dir)` is told
    where the compiler wrappers file their index. `compile_window` (a CompileWindow): wrapped
    around JAX's compile functions once jax's package has run. The import hook, or None (jax was loaded)."""
    def prepare():
        prepare_jax(environ, event, on_wrappers)

    after = {} if compile_window is None else {"jax": lambda module: compile_window.install(event)}
    if "jax" in sys.modules:
        prepare()
        for action in after.values():
            action(sys.modules["jax"])
        return None
    hook = AfterImport(after, before={"jax": prepare})
    sys.meta_path.insert(0, hook)
    return hook


def xla_flags_for_probing(current: str) -> tuple[str, list[str]]:
    """XLA_FLAGS with ours appended; a flag the user set is never overridden. Returns (value, added)."""
    added = [f"--{name}={value}" for name, value in XLA_PROBE_FLAGS if f"--{name}" not in current]
    return " ".join(p for p in [current.strip(), *added] if p), added


def route_ptxas_through_wrapper(env, event=None, index_dir: str | None = None) -> str | None:
    """XLA compiles PTX with a ptxas subprocess, and links parts with nvlink (jaxlib 0.11 without
    nvJitLink): put our wrappers (subprocess_compilers.py) first on PATH so what every cubin was made
    from is filed by the cubin's hash. Returns the wrappers' directory, or None (no real ptxas, or
    wrappers already in place)."""
    import tempfile
    from pathlib import Path

    from neutrino.runtime.modules import subprocess_compilers

    if env.get(subprocess_compilers.ENV_INDEX):
        return None
    real = {tool: subprocess_compilers.find_real(tool, env.get("PATH", "")) for tool in subprocess_compilers.TOOLS}
    if real["ptxas"] is None:
        return None
    real = {tool: path for tool, path in real.items() if path is not None}
    index = Path(index_dir or tempfile.mkdtemp(prefix="neutrino-xla-ptx-"))
    bin_dir = subprocess_compilers.install(index, real)
    env[subprocess_compilers.ENV_INDEX] = str(index)
    env["PATH"] = os.pathsep.join(p for p in (str(bin_dir), env.get("PATH", "")) if p)
    if event is not None:
        event("framework_flags", framework="jax", variable="PATH", added=[str(bin_dir)], real_ptxas=real["ptxas"],
              real_nvlink=real.get("nvlink"),
              why="XLA compiles PTX with a ptxas subprocess (and links parts with nvlink); the wrappers run them "
                  "unchanged and file each module's PTX by its cubin's hash, so the modules XLA loads are probed "
                  "from their own PTX")
    return str(bin_dir)


def prepare_jax(environ=None, event=None, on_wrappers=None) -> list[str]:
    """In a JAX process, before JAX starts its backend: append our XLA flags and route its ptxas
    and nvlink through our wrappers. Returns the flags added."""
    env = os.environ if environ is None else environ
    try:
        bin_dir = route_ptxas_through_wrapper(env, event)
        if bin_dir is not None and on_wrappers is not None:
            on_wrappers(os.path.dirname(bin_dir))
    except OSError:  # no room for the wrappers: XLA's modules stay unprobed, the program runs as it is
        pass
    value, added = xla_flags_for_probing(env.get(XLA_FLAGS, ""))
    if added:
        env[XLA_FLAGS] = value
        if event is not None:
            event("framework_flags", framework="jax", variable=XLA_FLAGS, added=added,
                  why="XLA command buffers launch kernels from CUDA graphs built node by node, which are not "
                      "probed; set the flag yourself to keep them")
    return added


# ---------------------------------------------------------------- XLA's compile window

# Where JAX hands a computation to XLA to compile, newest first: (module, function). Each is
# looked up by name; a JAX without any of them is said once in the event log.
COMPILE_FUNCTIONS = (("jax._src.compiler", "backend_compile_and_load"),  # jax >= 0.6
                     ("jax._src.compiler", "backend_compile"),  # jax 0.4.x-0.5: compile and load
                     ("jax._src.dispatch", "backend_compile"))  # jax < 0.4.6


class CompileWindow:
    """No probing while XLA compiles. XLA's autotuner times candidate kernels (Triton GEMM configs,
    cuBLAS algorithms) and keeps the fastest; probed, a candidate runs slower and another could win,
    changing the program's results in the last bits (issue 22). Launches XLA makes while compiling
    are not the program's computation: inside the window they run the original kernel, and each
    compile leaves one `xla_compile` event (launches left unprobed, seconds).

    `suspend(open: bool)` opens or closes the shim's window (a count: compiles on several threads
    overlap); `suspended()` is the shim's count of launches left unprobed so far. The window itself
    is autotune_window.SuspendWindow, shared with Triton's and TorchInductor's autotuners (autotune.py)."""

    def __init__(self, suspend, suspended):
        self.window = SuspendWindow(suspend, suspended)

    @property
    def event(self):
        return self.window.event

    def install(self, event=None, modules=None) -> list[str]:
        """Wrap JAX's compile functions (in `modules`, default sys.modules, importing the candidate
        modules); the names wrapped. None found: one `xla_compile_hook` event says so."""
        import importlib

        self.window.event = event
        found, wrapped = (sys.modules if modules is None else modules), []
        for module_name, function_name in COMPILE_FUNCTIONS:
            module = found.get(module_name)
            if module is None and modules is None:
                try:
                    module = importlib.import_module(module_name)
                except Exception:  # noqa: BLE001 - another JAX layout: try the next name
                    continue
            function = getattr(module, function_name, None)
            if not callable(function):
                continue
            if not getattr(function, WRAPPED, False):
                setattr(module, function_name, self.wrap(function, f"{module_name}.{function_name}"))
            wrapped.append(f"{module_name}.{function_name}")
        if not wrapped and event is not None:
            event("xla_compile_hook", found=False, tried=[".".join(c) for c in COMPILE_FUNCTIONS],
                  why="none of JAX's compile functions was found by name: launches XLA makes while compiling "
                      "(autotuning) are probed, and can change which kernels XLA picks")
        return wrapped

    def wrap(self, function, name: str):
        return self.window.wrap(function, "xla_compile", name)
