#!/bin/bash
# The checks that need a real CUDA GPU, which CI has not: run from the repository root on a GPU machine whose python
# has torch with CUDA and this project's pins (transformers 4.57, huggingface_hub < 1.0). About 8 minutes on an H200.
#   1. tests/test_cuda.py (the GPU decodes as the CPU, bfloat16 and the caches) and the model tests that compare a
#      model with itself (caches, batches) with their models on the GPU (DICO_TEST_DEVICE=cuda);
#   2. the benchmarks on the GPU in its default bfloat16: throughput by batch size, the KV cache's speed-up at gen 256
#      (the embedded model, then a LLaDA-shaped model whose pass is compute: tests/gpu_cache_speed.py) and Table 1
#      at gen 96 (40 items a family), each side by side in one run as on the CPU.
# Logs and result files go to $OUT (default gpu-check/). Each step has a time limit, so one that hangs leaves the rest.
# On a GPU image whose python has other versions (transformers 5, say), put the pins first on the path, offline from
# wheels brought along: pip install --no-index --no-deps --target /tmp/site transformers-4.57.6-*.whl
# tokenizers-0.22.2-*.whl huggingface_hub-0.36.2-*.whl plotly-7.1.0-*.whl; export PYTHONPATH=/tmp/site:$PWD
set -u
out=${OUT:-gpu-check}
py=${PYTHON:-python3}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
log="$out/run.log"
step() { echo "== $(date -u +%T) $*" | tee -a "$log"; }

step "machine"
{ nvidia-smi -L; $py -c "import torch, transformers; print('torch', torch.__version__, 'transformers',
transformers.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee -a "$log"

step "tests on the GPU"
DICO_TEST_DEVICE=cuda timeout "${TEST_LIMIT:-200}" $py -m pytest -q -p no:cacheprovider --durations=8 \
    tests/test_cuda.py tests/test_cache.py tests/test_remote_cache.py tests/test_batch.py > "$out/pytest.log" 2>&1
echo "pytest rc $?" | tee -a "$log"; tail -n 25 "$out/pytest.log" >> "$log"

bench() { timeout "$1" $py -m dico.bench "${@:2}" --no-progress >> "$log" 2>&1; echo "rc $?" | tee -a "$log"; }
step "throughput by batch size"
bench 80 throughput --items 16 --json "$out/throughput_gpu.json"
step "KV cache"
bench 110 cache --items 8 --families pick --lengths 256/32 --speed-items 16 --methods vanilla,fast,dico \
    --json "$out/cache_gpu.json"
step "KV cache on a LLaDA-shaped model of LLaDA-8B's layer"
timeout 240 $py tests/gpu_cache_speed.py "$out" >> "$log" 2>&1; echo "rc $?" | tee -a "$log"
step "Table 1 at gen 96"
bench 80 --items 40 --lengths 96/32 --json "$out/table1_96_gpu.json" --markdown "$out/table1_96_gpu.md"
step "done"
