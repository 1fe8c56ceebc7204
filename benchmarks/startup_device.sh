#!/usr/bin/env bash
# Issue 29 on the GPU machine, in one device call of at most ~200 s (run from the checkout's root;
# carry .whl). MODE threads: the --build-threads default measured (startup_many.py: 64 kernels looked
# up, 1 launched; the torch.compile program), and the light program's phase accounting.
# MODE table: the re-measured table (the light program's phase accounting, 3 interleaved rounds (LIGHT_ROUNDS,
# LIGHT_ROWS, LIGHT_BUDGET); with TINY_ROUNDS=N the ctypes program's too (startup_tiny.py, N rounds); the
# torch.compile program: plain, nothing probed, block_sched cold and warm; the light program: the other
# built-in tools cold then warm, as many as the time left allows).
# MODE accept (LIMIT=540, one call of <= 600 s): the light program, 10 interleaved rounds of cold, plain,
# nothing probed, warm, cold with the probe checked (coldk: the cold row less the launcher's probe compile;
# the add-up on paired differences: startup.py's paired table), then the torch.compile
# program's rows cold, plain, nothing probed, warm in interleaved rounds until the time is spent (3 fit:
# ~24 s a run on an H200; LIGHT_ROUNDS, LIGHT_BUDGET, TORCH_ROUNDS).
# MODE nomatch (LIMIT=150, one call of <= 150 s): the nothing-probed row after the fatbin header check
# (h-startup2): the synthetic module loads and the cold check on this machine's CPU (modules.txt, check.txt),
# one nothing-probed run of the torch.compile program (its --timings line: `modules ... ptx x30`), then the
# light program's plain and nothing-probed rows in interleaved rounds (up to 10) until the limit (the paired table).
# Writes to $OUT: diag.txt, <part>.txt/.json per part, logs.tgz (the event logs).
MODE=${1:-table}
LIMIT=${LIMIT:-190}
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
# as an installed package has them: byte code compiled once (a checkout under PYTHONDONTWRITEBYTECODE
# would compile every module in every profiled process)
python3 -m compileall -q -j 0 neutrino benchmarks /tmp/site > /dev/null 2>&1
{ env | grep -E '^PYTHON|^CUDA|^NEUTRINO' ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; python3 -V
  python3 -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'
  timeout 20 python3 benchmarks/launcher_start.py -n 5; } > $OUT/diag.txt 2>&1
echo "diag done at $SECONDS s"
part() {  # part NAME SECONDS startup.py-args...: one startup.py run, its tables to $OUT/NAME.txt
  local name=$1 budget=$2; shift 2
  timeout $((budget + ${PART_MARGIN:-25})) python3 benchmarks/startup.py --budget $budget --json $OUT/$name.json \
    --keep /tmp/logs/$name "$@" > $OUT/$name.txt 2>&1
  echo "$name done at $SECONDS s"
}
if [ "$MODE" = accept ]; then  # issue 29's acceptance in one call (LIMIT=540): the add-up, then the torch table
  part light ${LIGHT_BUDGET:-85} --program light --steps 20 --rows cold,plain,nomatch,warm,coldk \
    --repeat ${LIGHT_ROUNDS:-10} --tools block_sched
  PART_MARGIN=40 part torch $((LIMIT - SECONDS - 45)) --steps 20 --rows cold,plain,nomatch,warm \
    --repeat ${TORCH_ROUNDS:-4} --tools block_sched  # a torch run started at the budget's end takes ~25-30 s
elif [ "$MODE" = nomatch ]; then  # LIMIT=150
  timeout 20 python3 benchmarks/startup_modules.py --repeat 9 > $OUT/modules.txt 2>&1
  timeout 25 python3 benchmarks/startup_check.py --repeat 5 > $OUT/check.txt 2>&1
  echo "modules, check done at $SECONDS s"
  # torch first: its warm-up and the tool's fill run (~24 s each on an H200) must end inside the budget
  PART_MARGIN=35 part torch ${TORCH_BUDGET:-58} --steps 20 --rows nomatch --repeat 1 --tools block_sched
  PART_MARGIN=15 part light $((LIMIT - SECONDS - 30)) --program light --steps 20 --rows plain,nomatch \
    --repeat ${LIGHT_ROUNDS:-10} --tools block_sched  # ends by LIMIT
elif [ "$MODE" = threads ]; then
  part many 45 --program many --steps 1 --rows plain,cold,warm --repeat 3 --build-threads 0,4 --tools block_sched
  part light 30 --program light --steps 20 --rows cold,plain,nomatch,warm --repeat 3 --tools block_sched
  part torch $((LIMIT - SECONDS - 35)) --steps 20 --rows cold,warm --repeat 1 --build-threads 0,4 \
    --tools block_sched
else
  part light ${LIGHT_BUDGET:-30} --program light --steps 20 --rows ${LIGHT_ROWS:-cold,plain,nomatch,warm} \
    --repeat ${LIGHT_ROUNDS:-3} --tools block_sched
  [ "${TINY_ROUNDS:-0}" -gt 0 ] && part tiny ${TINY_BUDGET:-16} --program tiny --steps 20 \
    --rows cold,plain,nomatch,bare,warm --repeat $TINY_ROUNDS --tools block_sched
  part torch $((LIMIT - SECONDS - 55)) --steps 20 --rows cold,plain,nomatch,warm --repeat 1 --tools block_sched
  part tools $((LIMIT - SECONDS - 12)) --program light --steps 20 --repeat 1 \
    --tools gmem_bytes,program_progress,tensorop,dmat,gmem_bytes_thread,tensorop_thread,lines_light,lines
fi
tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null
