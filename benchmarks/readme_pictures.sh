#!/bin/bash
# The README's pictures on a GPU machine (benchmarks/readme_pictures.py): block_sched and dmat runs of a
# Triton matmul, their reports, the pictures and the traces copied to $OUT (default /tmp/readme_pictures).
OUT=${OUT:-/tmp/readme_pictures}; T=${T:-/tmp/rp}
mkdir -p "$OUT"; rm -rf "$T"; mkdir -p "$T"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$T/tc NEUTRINO_CACHE_DIR=$T/nc
nvidia-smi -L; date -u
python3 -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' || echo "matplotlib missing"
python3 -m neutrino -p block_sched -o "$T/bs" -- python3 benchmarks/readme_pictures.py 2048 2 || echo "block_sched run failed"
python3 -m neutrino -p dmat -o "$T/dm" -- python3 benchmarks/readme_pictures.py 512 2 || echo "dmat run failed"
python3 -m neutrino report "$T/bs" --out "$T/bs_report" > "$T/bs_report.txt" 2>&1; tail -30 "$T/bs_report.txt"
python3 -m neutrino report "$T/dm" --out "$T/dm_report" > "$T/dm_report.txt" 2>&1; tail -30 "$T/dm_report.txt"
ls -la "$T/bs_report" "$T/dm_report"
cp "$(ls "$T"/bs_report/*_block_sched.png | tail -1)" "$OUT/block_sched.png"
cp "$(ls "$T"/dm_report/*_dmat.png | tail -1)" "$OUT/dmat.png"
tar -C "$T" -cf "$OUT/reports.tar" bs_report dm_report bs_report.txt dm_report.txt
tar -C "$T" -cJf "$OUT/traces.tar.xz" bs dm && ls -la "$OUT"
