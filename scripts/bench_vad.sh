#!/usr/bin/env bash
# Real-time factor of `pulsed vad` beside onnxruntime running the package's
# own ONNX model, same file, same chunk protocol, one thread each.
#   scripts/bench_vad.sh [FILE.wav] [REPS]
# Needs python3 with numpy and onnxruntime for the reference figure.
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:-fixtures/vad/mix.wav}
REPS=${2:-5}
scripts/fetch_silero.sh
cargo build --release --quiet
echo "machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores visible)"
RAYON_NUM_THREADS=1 target/release/pulsed vad --bench --reps "$REPS" "$FILE"
python3 - "$FILE" "$REPS" third_party/silero/silero_vad.onnx <<'PY'
import sys, time, wave
import numpy as np
import onnxruntime as ort

path, reps, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with wave.open(path) as w:
    assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, "bench file: 16 kHz mono 16-bit"
    x = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0
opts = ort.SessionOptions()
opts.inter_op_num_threads = 1
opts.intra_op_num_threads = 1
sess = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
n = -(-len(x) // 512)
padded = np.zeros(n * 512, np.float32)
padded[: len(x)] = x
sr = np.array(16000, dtype=np.int64)

def run():
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros((1, 64), np.float32)
    for i in range(n):
        inp = np.concatenate([context, padded[None, i * 512 : (i + 1) * 512]], axis=1)
        out, state = sess.run(None, {"input": inp, "state": state, "sr": sr})
        context = inp[:, -64:]

run()
times = []
for _ in range(reps):
    t = time.perf_counter()
    run()
    times.append(time.perf_counter() - t)
t = sorted(times)[len(times) // 2]
dur = len(x) / 16000
print(f"onnxruntime {ort.__version__} {path} ({dur:.2f} s, one thread, official per-chunk loop from Python): {t*1e3:.2f} ms, RTF {t/dur:.5f}")
PY
