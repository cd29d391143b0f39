#!/bin/bash
# The runtime on a machine with one real NVIDIA GPU (prints; no asserts): the lease runner on CUDA
# (NCCL process group of one rank), `hadar run` on a one-node Ray cluster with that GPU (once more
# under a packed policy: pairs run as two processes on the GPU; not yet run on a GPU), then
# `hadar serve` on the same node fed by `hadar submit`. Meant for a dedicated GPU machine: it ends
# with `ray stop`. Needs torch (a CUDA build), ray, fastapi, uvicorn and hadar importable by $PY.
# Results go to $OUT (default /tmp/gpu-check).
#   PY=python3 bash bench/gpu_check.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-check}; mkdir -p "$OUT"
PY=${PY:-python3}
CLI='import sys; from hadar.cli import main; sys.exit(main())'
hadar() { $PY -c "$CLI" "$@"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, ray; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'nccl', torch.distributed.is_nccl_available(), 'ray', ray.__version__)"
echo "== lease runner"
[ -n "${SKIP_RUNNER:-}" ] || timeout 150 $PY bench/bench_job_runner.py --lease-s 3 2>&1 | tee "$OUT/job_runner.txt"
echo "== hadar run on a Ray node with one GPU (labelled v100: any type in Gavel's table will do)"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0  # a throwaway one-machine cluster
$PY -c "from ray.scripts.scripts import main; main()" start --head --port 6399 --num-gpus 1 \
    --resources '{"hadar_gpu:v100": 1}' --disable-usage-stats > "$OUT/ray_start.txt" 2>&1 || { tail -20 "$OUT/ray_start.txt"; exit 4; }
timeout 240 $PY -c "$CLI" run --address 127.0.0.1:6399 --jobs examples/gpu_jobs.yaml --round-s 10 --out /tmp/gpu-check-run \
    --no-progress 2>&1 | tee "$OUT/run.txt"
rc=${PIPESTATUS[0]}
echo "== hadar run with pairs: max_min_fairness_packed runs two jobs at once on the GPU (two processes)"
printf 'jobs:\n  - {job_type: resnet, total_steps: 3000}\n  - {job_type: transformer, total_steps: 2000}\n  - {job_type: lstm, total_steps: 3000}\n' > "$OUT/pairs.yaml"
timeout 240 $PY -c "$CLI" run --address 127.0.0.1:6399 --jobs "$OUT/pairs.yaml" --policy max_min_fairness_packed \
    --pair-workers eager --round-s 10 --out /tmp/gpu-check-pairs --no-progress --json > "$OUT/pairs.json" 2> "$OUT/pairs.err"
echo "pairs run exit code $?"; tail -5 "$OUT/pairs.err"
$PY -c "import json, sys; s = json.load(open(sys.argv[1])); print({k: s.get(k) for k in ('jobs_completed', 'paired_leases', 'failed_leases', 'makespan_s', 'emulated')})" "$OUT/pairs.json"
echo "== hadar serve on the same node, fed by hadar submit"
STATE=/tmp/gpu-check-state
$PY -c "$CLI" serve --state "$STATE" --address 127.0.0.1:6399 --round-s 10 > "$OUT/serve.txt" 2>&1 &
server=$!
for _ in $(seq 60); do [ -f "$STATE/server.json" ] && break; sleep 1; done
for _ in $(seq 30); do  # 503 while the server is still connecting to Ray
    hadar submit examples/gpu_jobs.yaml --state "$STATE" > "$OUT/submit.txt" 2>&1 && break; sleep 2
done
cat "$OUT/submit.txt"
for _ in $(seq 30); do
    sleep 5
    hadar status --state "$STATE" --json > "$OUT/status.json" 2>&1 || continue
    $PY -c "import json, sys; j = json.load(open(sys.argv[1]))['jobs']; sys.exit(0 if j and all(x['status'] in ('done', 'failed', 'cancelled') for x in j) else 1)" "$OUT/status.json" && break
done
hadar status --state "$STATE" 2>&1 | tee -a "$OUT/submit.txt"
kill -TERM "$server"; wait "$server"; echo "server exit code $?" | tee -a "$OUT/submit.txt"
$PY -c "from ray.scripts.scripts import main; main()" stop > /dev/null 2>&1  # every Ray process on this machine
exit "$rc"
