#!/usr/bin/env bash
# Issue 29 on the GPU machine, in one device call of at most ~200 s (run from the checkout's root;
# carry .whl). Writes to $OUT: diag.txt (device, launcher start), pytest.txt (tests/gpu/test_gpu_prebuild.py),
# build_parallel.txt (the host's cores, real ptxas), light.txt/.json (startup.py --program light,
# interleaved rounds), torch.txt/.json (the torch.compile rows the remaining time allows), logs.tgz.
LIMIT=${LIMIT:-195}
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; git log -1 --format=%h 2>/dev/null
  timeout 25 python3 benchmarks/launcher_start.py -n 5; } > $OUT/diag.txt 2>&1
echo "diag done at $SECONDS s"
timeout 30 python3 -m pytest -x -q tests/gpu/test_gpu_prebuild.py -k original -s -p no:cacheprovider \
  > $OUT/pytest.txt 2>&1
echo "pytest done at $SECONDS s: $(tail -1 $OUT/pytest.txt)"
timeout 30 python3 benchmarks/build_parallel.py --copies 6 --rounds 2 --threads 0,8 > $OUT/build_parallel.txt 2>&1
echo "build_parallel done at $SECONDS s"
timeout 45 python3 benchmarks/startup.py --program light --steps 20 --rows cold,plain,nomatch,warm --repeat 3 \
  --tools block_sched --budget 38 --json $OUT/light.json > $OUT/light.txt 2>&1
echo "light done at $SECONDS s"
LEFT=$((LIMIT - SECONDS - 8))
timeout $LEFT python3 benchmarks/startup.py --steps 50 --rows cold,nomatch,warm,plain,launches --repeat 1 \
  --tools block_sched --budget $((LEFT - 30)) --json $OUT/torch.json --keep /tmp/logs > $OUT/torch.txt 2>&1
echo "torch done at $SECONDS s"
tar czf $OUT/logs.tgz -C /tmp logs 2>/dev/null
