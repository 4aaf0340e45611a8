#!/bin/bash
# Short pilots, side by side on the one GPU, to choose --kl-weight and --lr by
# the synthetic held-out losses (never by realdev). Needs the data of
# `run_gpu.sh prepare` in /tmp/distill (the same warm machine) and the decoder
# pack (carry [".cache/distill_dec"] and run `run_gpu.sh stage` first).
#   bash training/streaming_whisper/sweep.sh DEADLINE_S KL:LR [KL:LR ...] [-- distill.py args]
# Each pilot gets a work folder of its own (links to the data), so none
# resumes from or overwrites /tmp/distill/student.pt; all use the same seed,
# hence the same windows and contexts. Logs: $OUT/sweep-kl<KL>-lr<LR>.txt.
W=/tmp/distill
D=$1; shift
L=$W/es/usr/lib/x86_64-linux-gnu
export ESPEAK_LD_PATH=$L:$W/es/lib/x86_64-linux-gnu:$L/pulseaudio ESPEAK_LIB=$L/libespeak-ng.so.1 ESPEAK_DATA=$L PYTHONUNBUFFERED=1
[ -f $W/dec/decoder.safetensors ] && [ -f $W/distill_train.json ] || { echo "no data or decoder pack in $W"; exit 3; }
pairs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do pairs+=("$1"); shift; done
[ "$1" = "--" ] && shift
i=0
for kv in "${pairs[@]}"; do
  k=${kv%%:*}; lr=${kv#*:}
  P=$W/sweep$i; rm -rf $P; mkdir -p $P/out
  ln -s $W/distill_train.npy $W/distill_train.json $W/distill_held.npy $W/distill_held.json $P/
  python3 training/streaming_whisper/distill.py --teacher $W/teacher --text $W/text --work $P --out $P/out \
    --deadline $D --decoder $W/dec --kl-weight $k --lr $lr "$@" > $OUT/sweep-kl$k-lr$lr.txt 2>&1 &
  i=$((i + 1))
done
wait
for f in $OUT/sweep-*.txt; do echo "== $f"; grep "held loss\|Error" $f; grep " s/step" $f | tail -n 1; done
