#!/bin/bash
# The device command (repo root on the GPU machine). State lives in /tmp/distill
# there, which stays while the machine is warm, so a run can take two calls
# when the teacher, the student to start from and espeak do not fit one carry
# (64 MiB with the tree):
#   call 1, carry [".deb", ".cache/distill/teacher"]:
#       bash training/streaming_whisper/run_gpu.sh prepare [distill.py args...]
#   (another teacher: TEACHER=DIR, each call carrying some of DIR's files,
#   config.json in the first)
#   (to distil through the decoder too) carry [".cache/distill_dec"]:
#       bash training/streaming_whisper/run_gpu.sh stage
#   (a pack in parts, scripts/carry.sh split: one call per part, carry
#   [DIR/partN], DEC=DIR/partN)
#   (natural and real speech, natural_tts.py pack / real_segments.py) carry
#   [".cache/distill_tts/carry", ".cache/distill_real/carry"]:
#       bash training/streaming_whisper/run_gpu.sh stage
#   (a pack in several parts: one call per part, each carrying a directory
#   .cache/distill_tts/carry that holds that part alone; UNPACK=0 on all
#   but the last)
#   call 2, carry [".cache/distill/init"] (or nothing), at once:
#       bash training/streaming_whisper/run_gpu.sh DEADLINE_S [distill.py args...]
#   (the sets staged are drawn for SHARES of the utterances, default
#   natural:0.4,real:0.08; the rest espeak)
# With a carry that holds all of them, call 2 alone does everything.
set -o pipefail
W=/tmp/distill
mkdir -p $W
if [ -d .deb ]; then
  mkdir -p $W/es && for f in .deb/*.deb; do dpkg -x $f $W/es; done
fi
L=$W/es/usr/lib/x86_64-linux-gnu
export ESPEAK_LD_PATH=$L:$W/es/lib/x86_64-linux-gnu:$L/pulseaudio ESPEAK_LIB=$L/libespeak-ng.so.1 ESPEAK_DATA=$L PYTHONUNBUFFERED=1
# the teacher's folder (folder.py teacher; TEACHER, tiny.en's by default):
# its files accumulate in $W/teacher, so a teacher too big for one carry
# (base) comes in pieces, each call carrying some of its files
T=${TEACHER:-.cache/distill/teacher}
[ -d $T ] && mkdir -p $W/teacher && cp $T/* $W/teacher/
# decoder_pack.py's output (tiny.en's 33 + 4 MB: a call of its own when the
# carry is short). DEC=DIR: its files accumulate in $W/dec, so a pack cut
# into parts by scripts/carry.sh (base's is 68 MB) comes in several calls,
# each carrying one part's directory; the pieces are joined once their
# checksum holds
D0=${DEC:-.cache/distill_dec}
[ -d $D0 ] && mkdir -p $W/dec && cp $D0/* $W/dec/
# (a pack still in pieces is fine while staging, not for a run)
if [ -d $W/dec ] && ! bash scripts/carry.sh join $W/dec && [ "$1" != stage ] && [ "$1" != prepare ]; then
  echo "the decoder pack is incomplete: stage its missing parts"; exit 3
fi
# Opus parts decoded into AudioSets (natural_tts.py unpack: numpy and the
# libsndfile inside the carried wheel)
# (parts accumulate in $W/carry_*, so a set too big for one carry comes in
# several calls, each unpacking every part staged so far)
for set in tts:natural real:real; do
  d=.cache/distill_${set%%:*}/carry
  if [ -d $d ]; then
    mkdir -p $W/carry_${set%%:*} && cp -r $d/part* $W/carry_${set%%:*}/
    # UNPACK=0 on all but a set's last part: decoding hours of Opus each call
    # costs a minute of device time
    [ "${UNPACK:-1}" = 0 ] || python3 training/streaming_whisper/natural_tts.py unpack $W/carry_${set%%:*} $W ${set#*:}
  fi
done
ls $W/teacher/encoder*.safetensors >/dev/null 2>&1 || { echo "no teacher in $W: the machine is a fresh one, start over with call 1"; exit 3; }
[ -f $W/text/train.txt ] || python3 training/text_prep.py $W/es/usr/share/games/fortunes $W/text
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader; nproc
D=$1; shift
if [ "$D" = prepare ]; then set -- --prepare-only "$@"; D=600; fi
if [ "$D" = stage ]; then echo "staged: $(ls $W)"; exit 0; fi
[ -f $W/dec/decoder.safetensors ] && set -- --decoder $W/dec "$@"
extra=()
for kv in $(echo ${SHARES:-natural:0.4,real:0.08} | tr , ' '); do
  [ -f $W/${kv%%:*}.json ] && extra+=($kv)
done
[ ${#extra[@]} -gt 0 ] && set -- --extra $(IFS=,; echo "${extra[*]}") "$@"
# RUN=NAME: a run of its own (student.pt in $W/run-NAME, output in $OUT/NAME)
# beside others in one call on the staged data, e.g.
#   RUN=a run_gpu.sh 545 ... & RUN=b run_gpu.sh 545 ... & wait
O=$OUT
[ -n "$RUN" ] && O=$OUT/$RUN && mkdir -p $O && set -- --state $W/run-$RUN "$@"
# SCRIPT=ctc_head.py: a CTC head over a frozen student instead (same data)
python3 training/streaming_whisper/${SCRIPT:-distill.py} --teacher $W/teacher --text $W/text \
  --work $W --out $O --deadline $D "$@" 2>&1 | tee $O/log.txt
