#!/bin/bash
# Issue 53's training stage on one GPU (an H100: minutes, where the 2-core CPU takes hours), from the shipped model:
# the chain family joins the mix and LLaDA 2.1's token-to-token editing objective is added (--edit-share). Then the
# chain family's Table 1 on the same GPU in float32 (Vanilla first) and the CUDA tests. Run from the repository root;
# MINUTES of training (default 5.5) on top of SOURCE's (default the shipped model, 875); DECAY minutes at the end
# fall to 10% of the lr (default 2.5); PREFIX_SHARE the share of semi-AR prefix rows (default 0.1; chain-1 had
# none); CHECKS=0 skips the checks after training; results in $OUT (default runs/gpu-stage): the
# float16 model (model.safetensors, config.json, train_log.json; its tokenizer is the shipped one) and the logs.
# The same command on a CPU (--device cpu) or resumed (--resume --out runs/chain) continues it.
# On a GPU image whose python has transformers 5, put the pins first on the path (see tests/gpu_check.sh).
set -u
out=${OUT:-runs/gpu-stage}
py=${PYTHON:-python3}
mkdir -p "$out"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
log="$out/train.log"
step() { echo "== $(date -u +%T) $*" | tee -a "$log"; }
source=${SOURCE:-assets/dico-tiny}
minutes=$($py -c "import json; print(json.load(open('$source/train_log.json'))['minutes'] + ${MINUTES:-5.5})")
decay=$($py -c "print(round(${DECAY:-2.5} / $minutes, 5))")

step "machine"
{ nvidia-smi -L; $py -c "import torch, transformers; print('torch', torch.__version__, 'transformers',
transformers.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee -a "$log"

step "train"
$py -m dico.embedded.train --out runs/chain --continue-from "$source" --minutes "$minutes" \
    --decay-share "$decay" --batch-size 128 --lr 5e-4 --warmup 300 --workers 12 --threads 4 \
    --mix word=2,list=1,pick=3,team=3,chain=6 --wording plain --tail-share 0.2 --long-share 0.1 \
    --edit-share 0.3 --edit-rate 0.2 --prefix-share "${PREFIX_SHARE:-0.1}" --seed 53 --checkpoint-minutes 2 \
    --log-every 250 2>&1 | tee -a "$log"
$py -m dico.embedded.train --export-from runs/chain --out runs/chain-fp16 >> "$log" 2>&1
cp runs/chain-fp16/model.safetensors runs/chain-fp16/config.json runs/chain-fp16/train_log.json "$out"/

[ "${CHECKS:-1}" = 0 ] && { step "done"; exit 0; }
step "chain, Vanilla, gen 256 (non-AR and blocks of 32), 64 held-out items, float32 on the GPU (200 took over 60 s: the loop's per-row work)"
timeout 150 $py -m dico.bench table1 --model runs/chain-fp16 --device cuda --dtype float32 --families chain \
    --lengths 256/32 --items 64 --methods vanilla --batch-size 64 --no-progress --json "$out/chain_vanilla.json" \
    >> "$log" 2>&1; echo "rc $?" | tee -a "$log"
step "chain, every method"
timeout 150 $py -m dico.bench table1 --model runs/chain-fp16 --device cuda --dtype float32 --families chain \
    --lengths 256/32 --items 64 --batch-size 64 --no-progress --json "$out/chain_table1.json" \
    >> "$log" 2>&1; echo "rc $?" | tee -a "$log"
step "tests on the GPU"
DICO_TEST_DEVICE=cuda timeout 60 $py -m pytest -q -p no:cacheprovider -x tests/test_cuda.py > "$out/pytest.log" 2>&1
echo "pytest rc $?" | tee -a "$log"
step "done"
