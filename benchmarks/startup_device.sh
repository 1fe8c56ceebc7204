#!/usr/bin/env bash
# Issue 29 on the GPU machine, in one device call of at most ~200 s (run from the checkout's root;
# carry .whl). MODE threads: the --build-threads default measured (startup_many.py: 64 kernels looked
# up, 1 launched; the torch.compile program), and the light program's phase accounting.
# MODE table: the re-measured table (the light program's phase accounting, 3 interleaved rounds (LIGHT_ROUNDS,
# LIGHT_ROWS, LIGHT_BUDGET); with TINY_ROUNDS=N the ctypes program's too (startup_tiny.py, N rounds); the
# torch.compile program: plain, nothing probed, block_sched cold and warm; the light program: the other
# built-in tools cold then warm, as many as the time left allows).
# MODE accept (LIMIT=540, one call of <= 540 s): issue 29's table on the torch.compile program (~24 s a run on
# an H100/H200): TORCH_ROUNDS (3) interleaved rounds of TORCH_ROWS (block_sched cold, plain, nothing probed
# (-k nomatchxyz), warm, --launches 0:1 warm, gmem_bytes warm (its first round's run: gmem_bytes cold)), then
# EXTRA_TOOLS cold and warm while the torch part's time lasts; its tables (medians, the add-up on paired
# differences with and without the program's pre-CUDA step, segments, program steps) in $OUT/torch.txt; then
# the light program's cold, plain, nothing probed, warm rows in interleaved rounds in the last LIGHT_TAIL (50) s
# ($OUT/light.txt). DRY=1: the same on this CPU machine's fake driver (tests/fakecuda, its libcupti and ptxas;
# the tiny program for both parts; OUT defaults to a new directory): checks the script, not the figures.
# MODE quiet (LIMIT <= 540): the torch rows (TORCH_ROWS, TORCH_ROUNDS (8) interleaved rounds) with the GPU held
# between runs (startup.py --hold-gpu) and TORCHINDUCTOR_COMPILE_THREADS=COMPILE_THREADS (1), for plain and profiled
# runs alike: the program's own variation (the GPU's initialisation, Inductor's worker pool) taken out of the walls.
# MODE lanes (LIMIT <= 560, LANES GPUs): the torch rows in rounds whose runs are made at the same time, one per
# GPU (startup.py --lanes), each profiled run paired with its round's plain run.
# MODE nomatch (LIMIT=150, one call of <= 150 s): the nothing-probed row after the fatbin header check
# (h-startup2): the synthetic module loads and the cold check on this machine's CPU (modules.txt, check.txt),
# one nothing-probed run of the torch.compile program (its --timings line: `modules ... ptx x30`), then the
# light program's plain and nothing-probed rows in interleaved rounds (up to 10) until the limit (the paired table).
# Writes to $OUT: diag.txt, <part>.txt/.json per part, logs.tgz (the event logs).
MODE=${1:-table}
LIMIT=${LIMIT:-190}
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
TORCH_PROGRAM=() LIGHT_PROGRAM=(--program light) LOGS=${LOGS_DIR:-/tmp/logs}
if [ -n "$DRY" ]; then  # the fake driver of the tests: the script's logic on a machine without a GPU
  OUT=${OUT:-$(mktemp -d /tmp/startup-dry.XXXXXX)}
  FAKES=$(mktemp -d /tmp/startup-fakes.XXXXXX)
  cc -O1 -shared -fPIC -o $FAKES/libcuda.so.1 tests/fakecuda/fakecuda.c &&
    cc -O1 -shared -fPIC -Ishim -Wl,-soname,libcupti.so.13 -o $FAKES/libcupti.so.13 tests/fakecuda/fakecupti.c -lpthread ||
    exit 1
  export LD_LIBRARY_PATH=$FAKES NEUTRINO_CUPTI=$FAKES/libcupti.so.13 \
    NEUTRINO_PTXAS=$PWD/tests/fakecuda/fake_ptxas.py
  TORCH_PROGRAM=(--program tiny) LIGHT_PROGRAM=(--program tiny) LOGS=$OUT/event-logs
  echo "dry run: the fake driver in $FAKES, tables in $OUT"
fi
# as an installed package has them: byte code compiled once (a checkout under PYTHONDONTWRITEBYTECODE
# would compile every module in every profiled process)
python3 -m compileall -q -j 0 neutrino benchmarks /tmp/site > /dev/null 2>&1
{ env | grep -E '^PYTHON|^CUDA|^NEUTRINO' ; [ -z "$DRY" ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nproc; date -u; python3 -V; git log -1 --format='%H %s' 2>/dev/null
  [ -z "$DRY" ] && python3 -c 'import torch, cupy; print("torch", torch.__version__, "cupy", cupy.__version__)'
  timeout 20 python3 benchmarks/launcher_start.py -n 5; } > $OUT/diag.txt 2>&1
echo "diag done at $SECONDS s"
part() {  # part NAME SECONDS startup.py-args...: one startup.py run, its tables to $OUT/NAME.txt
  local name=$1 budget=$2; shift 2
  timeout $((budget + ${PART_MARGIN:-25})) python3 benchmarks/startup.py --budget $budget --json $OUT/$name.json \
    --keep $LOGS/$name "$@" > $OUT/$name.txt 2>&1
  # cut off by the timeout: the tables from the runs it saved
  grep -q "accounted / difference" $OUT/$name.txt || python3 benchmarks/startup.py --tables $OUT/$name.json \
    >> $OUT/$name.txt 2>&1
  echo "$name done at $SECONDS s"
}
if [ "$MODE" = accept ]; then  # issue 29's acceptance in one call (LIMIT=540): the torch table, then light rounds
  TORCH_END=$((LIMIT - ${LIGHT_TAIL:-50}))
  # no torch run starts after its budget; one started then takes ~25-30 s: the part ends by TORCH_END
  PART_MARGIN=35 part torch $((TORCH_END - SECONDS - 35)) "${TORCH_PROGRAM[@]}" --steps 20 \
    --rows ${TORCH_ROWS:-cold,plain,nomatch,warm,launches,warm:gmem_bytes} --repeat ${TORCH_ROUNDS:-3} \
    --tools block_sched --extra-tools ${EXTRA_TOOLS:-program_progress,tensorop,dmat,lines_light}
  [ $((LIMIT - SECONDS)) -gt 25 ] && PART_MARGIN=5 part light $((LIMIT - SECONDS - 15)) "${LIGHT_PROGRAM[@]}" \
    --steps 20 --rows cold,plain,nomatch,warm --repeat ${LIGHT_ROUNDS:-10} --tools block_sched
elif [ "$MODE" = quiet ]; then  # the torch rows with the program's own variation cut (LIMIT <= 540)
  # The GPU kept initialised between runs by a process of ours (--hold-gpu: as persistence mode would) and
  # Inductor's compile in the program's process (TORCHINDUCTOR_COMPILE_THREADS, COMPILE_THREADS=1): the same for
  # plain and profiled runs; what a plain run varies by is then small enough for pairs to resolve ~0.3 s.
  export TORCHINDUCTOR_COMPILE_THREADS=${COMPILE_THREADS:-1}
  PART_MARGIN=35 part torch $((LIMIT - SECONDS - 35)) "${TORCH_PROGRAM[@]}" --steps 20 --hold-gpu \
    --rows ${TORCH_ROWS:-cold,plain,nomatch,warm,warm:gmem_bytes} --repeat ${TORCH_ROUNDS:-8} --tools block_sched
elif [ "$MODE" = lanes ]; then  # LIMIT <= 560, a host of LANES (4) GPUs: the torch rows made at the same time
  # Each round runs TORCH_ROWS (plain, nothing probed, block_sched warm, gmem_bytes warm: its first round cold) at
  # once, one per GPU and CPU share, rotated round by round; each profiled run is paired with its round's plain run,
  # so the host's drift and slow spells (sessions 11-12: the walls of one configuration spread over 5 s) fall on
  # both runs of a pair alike.
  PART_MARGIN=35 part torch $((LIMIT - SECONDS - 35)) "${TORCH_PROGRAM[@]}" --steps 20 --lanes ${LANES:-4} \
    --rows ${TORCH_ROWS:-plain,nomatch,warm,warm:gmem_bytes} --repeat ${TORCH_ROUNDS:-40} --tools block_sched
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
tar czf $OUT/logs.tgz -C $(dirname $LOGS) $(basename $LOGS) 2>/dev/null
