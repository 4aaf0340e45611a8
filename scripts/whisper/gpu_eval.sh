#!/usr/bin/env bash
# Whisper's figures on the GPU machine, side by side in one call (after
# scripts/gpu_run.sh unpacked the binaries and joined the staged folder):
# realdev transcripts and WER on the CPU, the GPU in f32 and in bf16, the
# per-part times of `pulsed bench`, and, when the machine's transformers can
# load the folder, its fp16 batched pipeline as the GPU peer.
#   carry [".gpu", ".cache/realdev", ".cache/gpuw/partN"]
#   command: bash scripts/gpu_run.sh; bash scripts/whisper/gpu_eval.sh
# RUNS picks the evaluations (default "cpu-f32 cuda-f32 cuda-bf16"); the
# bench and throughput runs follow unless ONLY_EVAL=1.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
MODEL=${MODEL:-whisper-tiny.en}
export XDG_CACHE_HOME=/tmp/xdg
M=.cache/realdev/manifest.jsonl
[ -s $M ] || { echo "gpu_eval.sh: carry .cache/realdev (a copy of ../shared/realdev)" >&2; exit 1; }
P=.gpu/bin/pulsed
for run in ${RUNS:-cpu-f32 cuda-f32 cuda-bf16}; do
    set -- ${run/-/ }
    for beam in 1 5; do
        tag=$1-$2-beam$beam
        /usr/bin/time -f "%e s wall, %M KB peak" $P eval $M --model $MODEL --device $1 --precision $2 \
            --beam $beam -j ${JOBS:-8} --hyp-out $OUT/hyp-$tag.jsonl >$OUT/eval-$tag.txt 2>&1
        echo "$tag: $(grep -E 'audio s/s|all:|wall' $OUT/eval-$tag.txt | tr '\n' ' ')"
    done
done
for beam in 1 5; do
    [ -s "$OUT/hyp-cpu-f32-beam$beam.jsonl" ] && [ -s "$OUT/hyp-cuda-f32-beam$beam.jsonl" ] || continue
    python3 - "$OUT/hyp-cpu-f32-beam$beam.jsonl" "$OUT/hyp-cuda-f32-beam$beam.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = {x["file"]: x["text"] for x in map(json.loads, open(sys.argv[2]))}
same = sum(x["text"] == b.get(x["file"]) for x in a)
print(f"{sys.argv[1].split('hyp-')[1]}: cuda f32 transcripts equal to the cpu's on {same} of {len(a)} files")
for x in a:
    if x["text"] != b.get(x["file"]):
        print("  differs:", x["file"], "|", x["text"], "|", b.get(x["file"]))
PY
done
[ "${ONLY_EVAL:-0}" = 1 ] && exit 0
$P bench --model $MODEL --device cuda 2>&1 | tee $OUT/bench-whisper.txt
# throughput side by side: the manifest four times over (warm-up costs less),
# pulsed on the GPU (f32, workers of their own streams) and the peer
python3 - $M >.cache/realdev/x4.jsonl <<'PY'
import sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
sys.stdout.write("".join(lines * 4))
PY
for beam in 1 5; do
    $P eval .cache/realdev/x4.jsonl --model $MODEL --device cuda --beam $beam -j ${JOBS:-8} >$OUT/x4-cuda-beam$beam.txt 2>&1
    echo "pulsed cuda f32 beam $beam, realdev x4: $(grep -E 'audio s/s|all:' $OUT/x4-cuda-beam$beam.txt | tr '\n' ' ')"
    python3 scripts/whisper/peer_transformers.py $XDG_CACHE_HOME/pulsed/models/$MODEL .cache/realdev/x4.jsonl \
        --beam $beam 2>$OUT/peer-beam$beam.err | tee -a $OUT/peer.txt || tail -3 $OUT/peer-beam$beam.err
done
