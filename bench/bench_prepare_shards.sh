#!/bin/bash
# medqa_usmle_medr2 on N items (default 20; N=8 bash bench/bench_prepare_shards.sh), CPU twin settings, one prompt per forward pass: unsharded vs 2 shards (run at the
# same time, as two array tasks would, each with half the cores: SHARD_THREADS, default nproc/2, as a Slurm task's
# cpuset gives it; 2 threads per shard on 2 cores oversubscribe them) + assembly, each with its own fresh stage cache;
# packs compared byte for byte.
cd "$(dirname "$0")/.."
export MEDR2_DATA_DIR=${MEDR2_DATA_DIR:-$(cd .. && pwd)/shared/data} HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
MD='{"method_override": {"iterations": 2, "retrieve_k": 3, "coarse_k": 3, "conflict": {"top": 2}, "max_demos": 2, "cot_max_new_tokens": 32, "reformulate_max_new_tokens": 24, "max_doc_tokens": 128, "llm": {"backend": "hf", "model": "embedded:gemma-270m", "batch_size": 1}}}'
N=${N:-20}; T=${SHARD_THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}; R=${OUT_DIR:-/tmp/medr2-shards}; rm -rf $R; mkdir -p $R
for c in A B; do mkdir -p $R/$c; ln -s ${MEDR2_CACHE_DIR:-~/.cache/medr2}/indexes $R/$c/indexes; ln -s ${MEDR2_CACHE_DIR:-~/.cache/medr2}/models $R/$c/models; done
t0=$(date +%s.%N)
MEDR2_CACHE_DIR=$R/A MEDR2_RESULTS_DIR=$R/A-res .venv/bin/medr2 prepare --tasks medqa_usmle_medr2 --limit $N --metadata "$MD" --json > $R/A.json 2> $R/A.err
t1=$(date +%s.%N)
OMP_NUM_THREADS=$T MEDR2_CACHE_DIR=$R/B MEDR2_RESULTS_DIR=$R/B-res .venv/bin/medr2 prepare --tasks medqa_usmle_medr2 --limit $N --metadata "$MD" --shard 0/2 --json > $R/B0.json 2> $R/B0.err &
OMP_NUM_THREADS=$T MEDR2_CACHE_DIR=$R/B MEDR2_RESULTS_DIR=$R/B-res .venv/bin/medr2 prepare --tasks medqa_usmle_medr2 --limit $N --metadata "$MD" --shard 1/2 --json > $R/B1.json 2> $R/B1.err &
wait
t2=$(date +%s.%N)
MEDR2_CACHE_DIR=$R/B MEDR2_RESULTS_DIR=$R/B-res .venv/bin/medr2 prepare --tasks medqa_usmle_medr2 --limit $N --metadata "$MD" --json > $R/B.json 2> $R/B.err
t3=$(date +%s.%N)
python3 - "$t0" "$t1" "$t2" "$t3" "$R" "$T" <<'PY'
import json, sys, hashlib
t0, t1, t2, t3 = map(float, sys.argv[1:5])
a = json.load(open(sys.argv[5] + "/A.json"))["medqa_usmle_medr2"]; b = json.load(open(sys.argv[5] + "/B.json"))["medqa_usmle_medr2"]
ha = hashlib.sha256(open(a["packs"], "rb").read()).hexdigest(); hb = hashlib.sha256(open(b["packs"], "rb").read()).hexdigest()
print(json.dumps({"items": a["items"], "unsharded_s": round(t1 - t0, 1), "shard_threads": int(sys.argv[6]), "two_shards_s": round(t2 - t1, 1), "assembly_s": round(t3 - t2, 1),
                  "unsharded_calls": a.get("model_calls"), "assembly_calls": b.get("model_calls"),
                  "packs_identical": ha == hb, "sha256": [ha, hb]}, indent=1))
PY
