#!/usr/bin/env bash
# Word-end-to-committed-text latency of live Whisper (`pulsed mic --model M
# --input F --realtime`: the file delivered at real-time pace, the policy
# decoding as fast as this machine allows) on ../shared/realdev. For each
# word of each final line: the wall-clock time it was first committed (a
# stable word of a partial, or the final) minus the moment its end was
# delivered, two ways:
#   - the word's end as the live path's own word timestamp says;
#   - the word's end in the offline transcript (`pulsed transcribe`, word
#     timestamps), the live word matched to it by text (difflib), so that
#     the live path's own timing cannot flatter itself.
# Prints median, p90 and max over all words, and the machine's load.
#
#   bash scripts/whisper/live_latency.sh [whisper-tiny.en] [extra mic flags...]
# PULSED=path runs that binary instead of building one (the GPU machine has no
# Rust); MANIFEST=path reads another copy of realdev (it does not travel).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-whisper-tiny.en}
shift || true
MANIFEST=${MANIFEST:-../shared/realdev/manifest.jsonl}
BASE=$(dirname "$MANIFEST")
OUT=$(mktemp -d)
if [ -z "${PULSED:-}" ]; then
    cargo build --release --quiet
    PULSED=$PWD/target/release/pulsed
fi
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
FILES=$(python3 -c "import json,sys; [print(json.loads(l)['file']) for l in open('$MANIFEST') if l.strip()]")
# offline word times, one worker (the live runs below are alone on the machine)
(cd "$BASE" && "$PULSED" transcribe --model "$MODEL" --format jsonl -j 1 $FILES) \
    > "$OUT/offline.jsonl" 2>/dev/null
for f in $FILES; do
    "$PULSED" mic --model "$MODEL" --input "$BASE/$f" --realtime --format jsonl "$@" \
        > "$OUT/$(basename "$f").live.jsonl" 2>/dev/null
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" $FILES <<'EOF'
import difflib, json, os, re, sys
out, files = sys.argv[1], sys.argv[2:]
key = lambda w: re.sub(r"[^0-9a-z]", "", w.lower())
offline = {}
for l in open(os.path.join(out, "offline.jsonl")):
    v = json.loads(l)
    offline[os.path.basename(v["file"])] = v.get("words", [])
own, vs_offline = [], []
for f in files:
    name = os.path.basename(f)
    live = []  # (text, end, committed at)
    for l in open(os.path.join(out, name + ".live.jsonl")):
        v = json.loads(l)
        if v["type"] == "final":
            for w, lat in zip(v["words"], v["word_latency_ms"]):
                live.append((w["word"], w["end"], w["end"] + lat / 1000))
    own += [(c - e) * 1000 for _, e, c in live]
    ref = offline.get(name, [])
    sm = difflib.SequenceMatcher(a=[key(w[0]) for w in live], b=[key(w["word"]) for w in ref], autojunk=False)
    for a, b, n in sm.get_matching_blocks():
        for k in range(n):
            vs_offline.append((live[a + k][2] - ref[b + k]["end"]) * 1000)
def show(name, xs):
    xs = sorted(xs)
    q = lambda p: xs[round((len(xs) - 1) * p)]
    print(f"{name}: median {q(0.5):.0f} ms, p90 {q(0.9):.0f} ms, max {xs[-1]:.0f} ms over {len(xs)} words")
show("latency, word end from the live word timestamps", own)
show("latency, word end from the offline transcript (matched words)", vs_offline)
EOF
rm -rf "$OUT"
