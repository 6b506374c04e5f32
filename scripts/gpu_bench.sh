#!/usr/bin/env bash
# The benchmarks on one CUDA GPU, sized to finish within 10 minutes: a reduced norm grid in fp32 and bf16, the
# GPT-2 small training benchmark (bf16 autocast) with nn.LayerNorm and fast_rmsnorm, preflight's memory estimate
# against the measured peak, then interleaved variants.
# Results go to $OUT when set (else reports/bench-gpu); PYTHON picks the interpreter (a CUDA build of torch).
# ONLY=smoke runs the shortened study-preset sweep alone. ONLY=attention runs the speed check once beside each attention
# (model.attention=sdpa, then the study's explicit softmax) under the study's fp16 autocast: a norm's share of a step
# beside each, written to attention-sdpa/ and attention-explicit/ (each variants.md's "norm share of step" column). ONLY=speed runs the speed check alone: the study's norms' forward+backward at gpt2_small's shapes and the kernels
# they dispatched, in fp32 and under bf16 autocast (SPEED_PRECISIONS), then interleaved whole steps. DEVICE=cpu runs
# that step on the CPU (SPEED_MODEL: the model overrides, e.g. a tiny one), which is how the tests run it.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT_DIR="${OUT:-reports/bench-gpu}"
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
mkdir -p "$OUT_DIR"

speed_check() {
    local cluster=gpu
    [ "$DEVICE" = cpu ] && cluster=cpu
    for precision in ${SPEED_PRECISIONS:-fp32 bf16_mixed}; do
        # shellcheck disable=SC2086  # SPEED_MODEL is a list of overrides
        timeout "${SPEED_TIMEOUT:-150}" "$PY" -m src.bench variants \
            --variants "${SPEED_VARIANTS:-hand_layernorm,torch_layernorm,hand_rmsnorm,torch_rmsnorm,fast_rmsnorm,no_norm}" \
            --rounds "${SPEED_ROUNDS:-10}" --kernel-seconds "${SPEED_KERNEL_S:-20}" --out "$OUT_DIR/speed-$precision" \
            ${SPEED_MODEL:-model=gpt2_small optim.micro_batch_size=8} precision="$precision" cluster="$cluster" logger=none \
            2>&1 | tee "$OUT_DIR/speed-$precision.log"
    done
}

# A norm's share of a step beside each attention: the denominator of the study's speed claims depends on it.
attention_check() {
    local cluster=gpu
    [ "$DEVICE" = cpu ] && cluster=cpu
    for attention in sdpa explicit; do
        # shellcheck disable=SC2086  # SPEED_MODEL is a list of overrides
        timeout "${SPEED_TIMEOUT:-150}" "$PY" -m src.bench variants \
            --variants "${ATTENTION_VARIANTS:-hand_layernorm,torch_layernorm,hand_rmsnorm,torch_rmsnorm,no_norm}" \
            --rounds "${SPEED_ROUNDS:-10}" --kernel-seconds "${SPEED_KERNEL_S:-20}" --out "$OUT_DIR/attention-$attention" \
            ${SPEED_MODEL:-model=gpt2_small optim.micro_batch_size=12} precision="${ATTENTION_PRECISION:-fp16_mixed}" \
            model.attention="$attention" cluster="$cluster" logger=none 2>&1 | tee "$OUT_DIR/attention-$attention.log"
    done
}

# The study preset's model, precision and batch for real, shortened: a 2-norm sweep of DDP jobs over every visible
# GPU (cluster=gpu_node: torchrun per job), on the bundled corpus (no FineWeb on an offline machine), then its
# re-run, which must start nothing. Its own store and folders under $OUT_DIR.
smoke() {
    local dir gpus
    dir="$(cd "$OUT_DIR" && pwd)/smoke"
    gpus="$(nvidia-smi -L | wc -l)"
    mkdir -p "$dir"
    for pass in first rerun; do
        # The preset's model, precision and batch (its FineWeb data fields do not apply to the bundled corpus).
        timeout 300 "$PY" -m src.train -m model=gpt2_small precision=fp16_mixed precision.matmul_precision=high seq_len=1024 \
            norm=hand_layernorm,torch_rmsnorm cluster=gpu_node cluster.devices="$gpus" optim.micro_batch_size=12 \
            optim.global_batch_size=$((12 * gpus)) optim.max_steps=60 optim.lr=1.4e-3 optim.grad_clip=3.5 \
            val_every_n_steps=30 data.val_max_windows=8 data.test_max_windows=64 checkpoint.enabled=true \
            checkpoint.every_n_steps=30 experiment_name=gpu_smoke progress_bar=false \
            paths.mlflow_db="$dir/mlflow.db" paths.mlflow_artifacts="$dir/mlartifacts" paths.checkpoints_dir="$dir/ckpt" \
            paths.reports_dir="$dir/reports" hydra.sweep.dir="$dir/multirun" 2>&1 | tee "$OUT_DIR/smoke-$pass.log" \
            || echo "smoke ($pass): exit status $? (see $OUT_DIR/smoke-$pass.log)"
    done
}

if [ "${ONLY:-}" = smoke ]; then
    smoke
    echo "results in $OUT_DIR"
    exit 0
fi

if [ "${ONLY:-}" = attention ]; then
    attention_check
    echo "results in $OUT_DIR"
    exit 0
fi

if [ "${ONLY:-}" = speed ]; then
    speed_check
    echo "results in $OUT_DIR"
    exit 0
fi

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT_DIR/nvidia-smi.csv"

# Norm kernels: 2 widths x 2 row counts x 2 dtypes; the compiled variants compile once per shape (the bulk of the time).
timeout 330 "$PY" -m src.bench norms --device cuda --widths 768,1600 --rows 4096,32768 --dtypes fp32,bf16 \
    --repeats 50 --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/norms.log"

# Training throughput, MFU against the datasheet dense bf16 peak, and the Lightning overhead.
for norm in torch_layernorm fast_rmsnorm; do
    timeout 120 "$PY" -m src.bench train --device cuda --model gpt2_small --norm "$norm" --batch 16 \
        --steps 40 --warmup 10 --rounds 2 --precision bf16-mixed --out "$OUT_DIR/train-$norm" 2>&1 \
        | tee "$OUT_DIR/train-$norm.log"
done
# Preflight's memory model against the device: the study's jobs (fp16, micro-batch 12, context 1024) estimated on
# fake tensors, then 3 real optimizer steps each, measured with torch.cuda.max_memory_allocated (est./measured).
# Its own store and checkpoint folder under $OUT_DIR; a failed check is reported, not fatal to the rest.
PF_DIR="$(cd "$OUT_DIR" && pwd)/preflight"
mkdir -p "$PF_DIR"
timeout 240 "$PY" -m src.preflight -m experiment=gpt2_small_study norm=hand_layernorm,torch_rmsnorm cluster=gpu \
    preflight.gpu=h200 preflight.steps=3 preflight.rehearsal_micro_batch=12 \
    paths.mlflow_db="$PF_DIR/mlflow.db" paths.checkpoints_dir="$PF_DIR/ckpt" 2>&1 \
    | tee "$OUT_DIR/preflight.log" || echo "preflight: exit status $? (see $OUT_DIR/preflight.log)"
# The study preset on every GPU, shortened (above): DDP jobs under torchrun, the plan decided by rank 0.
smoke
# The study's question on the real model: the speed check (above). Last, so that the results above survive if it fails.
speed_check
echo "results in $OUT_DIR"
