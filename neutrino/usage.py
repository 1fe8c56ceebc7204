"""The command line's words: its subcommands and the examples its help shows.

Here, below both, because the command line (neutrino/cli.py) and the launcher it
hands a program to (neutrino/runtime/launcher.py) print the same usage.
"""

SUBCOMMANDS = ("list", "demo", "print", "instrument", "report", "export", "query", "diff")

EXAMPLES = """\
examples:
  neutrino demo                                   what a probe does to a kernel (no GPU needed)
  neutrino list -v                                built-in tools, their maps and fields
  neutrino -p block_sched -- python train.py      probe every kernel launch; trace in ./trace/<time>_<pid>/
  neutrino -p gmem_bytes -k gemm -o gemm.trace -- ./app
                                                  only kernels whose name contains 'gemm'; trace in gemm.trace/
  neutrino -e 'position = "kernel", datamodel = "warp:8", after = "SAVE.u32 {%smid, %laneid};"' -- ./app
                                                  a one-off probe (TOML keys of one probe, on one line)
  neutrino report trace/<time>_<pid>              summary per kernel, plots
  neutrino report TRACE --format csv              the same numbers for scripts
  neutrino instrument kernel.ptx -p block_sched -o out.ptx --check

kernel names (-k, --filter): PATTERN selects the kernels whose (mangled) name contains it;
  =NAME selects the kernel named exactly NAME; PATTERN:PATTERN… or -k repeated: any of them.

exit status: 0 ok; 1 bad input (probe, PTX, trace) or a failure of ours; 2 usage error;
  when profiling, the program's own status (126/127: it could not be run; 128+N: killed by signal N).
  NO_COLOR set: no colour in messages (FORCE_COLOR: colour even when not on a terminal).
"""
