#!/usr/bin/env bash
# Throughput on the GPU machine, side by side in one call: realdev four
# times over (and each count in KS, default "4 8": the steady state is the
# difference of the last two) through `pulsed eval --device cuda` at each
# worker count in JOBS, each beam in BEAMS and each precision in PRECISIONS
# (default f32), then the transformers fp16 peer at the same
# beams (after scripts/gpu_run.sh unpacked the binaries and joined the
# staged folder). Prints one line per run; logs go to $OUT.
#   carry [".gpu", ".cache/realdev", ".cache/gpuw/partN"]
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
MODEL=${MODEL:-whisper-tiny.en}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/xdg}
P=.gpu/bin/pulsed
M=.cache/realdev/manifest.jsonl
[ -s $M ] || { echo "gpu_throughput.sh: carry .cache/realdev (a copy of ../shared/realdev)" >&2; exit 1; }
# beside the manifest (its audio paths are relative to it): four and
# eight times over; the difference of the two runs' times is the steady
# state, without the workers' set-up (networks built, steps captured)
KS=${KS:-4 8}
read -r K1 K2 <<<"$(echo $KS | awk '{print $(NF-1), $NF}')"
for k in $KS; do
    python3 - $M $k >.cache/realdev/x$k.jsonl <<'PY'
import sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
sys.stdout.write("".join(lines * int(sys.argv[2])))
PY
done
X4=.cache/realdev/x4.jsonl
LOGS=/tmp/throughput-logs && mkdir -p $LOGS
for beam in ${BEAMS:-5 1}; do
    for prec in ${PRECISIONS:-f32}; do
        for j in ${JOBS:-8 16}; do
            for k in $KS; do
                log=$LOGS/x$k-j$j-beam$beam-$prec.txt
                t0=$(date +%s.%N)
                $P eval .cache/realdev/x$k.jsonl --model $MODEL --device cuda --precision $prec --beam $beam -j $j ${EXTRA:-} >$log 2>&1
                echo "process wall $(python3 -c "print(f'{$(date +%s.%N) - $t0:.3f}')") s" >>$log
                echo "pulsed cuda $prec beam $beam -j $j ${EXTRA:-}, x$k: $(grep -E 'audio s/s|all:|process wall' $log | tr '\n' ' ')"
            done
            python3 - $LOGS/x$K1-j$j-beam$beam-$prec.txt $LOGS/x$K2-j$j-beam$beam-$prec.txt $K1 $K2 <<'PY'
import re, sys
def secs(p):
    t = open(p).read()
    m = re.search(r"([0-9.]+) s of audio in", t)
    w = re.search(r"process wall ([0-9.]+) s", t)
    return (float(m.group(1)), float(w.group(1))) if m and w else None
a, b = secs(sys.argv[1]), secs(sys.argv[2])
if a and b and b[1] > a[1]:
    print(f"  steady state (x{sys.argv[4]} - x{sys.argv[3]}, process walls): {b[0] - a[0]:.1f} s of audio in {b[1] - a[1]:.2f} s = {(b[0] - a[0]) / (b[1] - a[1]):.1f} audio s/s")
PY
        done
    done
    if [ "${PEER:-1}" = 1 ]; then
        python3 scripts/whisper/peer_transformers.py $XDG_CACHE_HOME/pulsed/models/$MODEL $X4 \
            --beam $beam 2>$OUT/peer-beam$beam.err | tee -a $OUT/peer.txt || tail -3 $OUT/peer-beam$beam.err
    fi
done
