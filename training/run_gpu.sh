#!/bin/bash
# usage: bash .gpu/run.sh TOTAL_TRAIN_SEC DEADLINE   (on the GPU machine, repo root)
set -o pipefail
mkdir -p /opt/es && for f in .deb/*.deb; do dpkg -x $f /opt/es; done
L=/opt/es/usr/lib/x86_64-linux-gnu
export ESPEAK_LD_PATH=$L:/opt/es/lib/x86_64-linux-gnu:$L/pulseaudio ESPEAK_LIB=$L/libespeak-ng.so.1 ESPEAK_DATA=$L PYTHONUNBUFFERED=1
[ -f .cache/text/train.txt ] || python3 training/text_prep.py /opt/es/usr/share/games/fortunes .cache/text
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader; nproc
python3 training/train.py --text .cache/text --work .cache/run --out $OUT --resume-dir .gpu/resume \
  --total-train-sec $1 --deadline $2 2>&1 | tee $OUT/log.txt
