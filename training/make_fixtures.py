"""Fixture WAVs for the Rust side (run on the CPU, with Debian's espeak-ng 1.51).

usage: python3 make_fixtures.py TEXT_DIR FIXTURE_DIR
Writes FIXTURE_DIR/hello.wav + hello.txt (a held-out sentence, training voice) and
FIXTURE_DIR/heldout/*.wav + manifest.jsonl (held-out sentences; 12 in training
voices, 8 in the held-out voice variants). All 16 kHz mono 16-bit, clean.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402


HELLO = "if anything can go wrong it will"


def main():
    text_dir, out = sys.argv[1], sys.argv[2]
    held = [t for t in open(os.path.join(text_dir, "heldout.txt")).read().split("\n") if t]
    rng = random.Random(7)
    short = [t for t in held if 5 <= len(t.split()) <= 11 and len(t) <= 60]
    rng.shuffle(short)
    eng = synth.Espeak()
    os.makedirs(os.path.join(out, "heldout"), exist_ok=True)

    # hello.wav: 2-4 s, default US voice
    assert HELLO in held, "hello sentence must be a held-out sentence"
    for t in [HELLO] + short:
        x = synth._resample(eng.synth(t, "en-us", 150, 50, 50, 0), eng.sr)
        if 2.0 <= len(x) / 16000 <= 4.0:
            synth.write_wav(os.path.join(out, "hello.wav"), x)
            open(os.path.join(out, "hello.txt"), "w").write(t + "\n")
            print("hello:", t, len(x) / 16000)
            used = t
            break
    rows = []
    pool = [t for t in short if t != used]
    for i in range(20):
        heldout_voice = i >= 12
        variants = synth.HELDOUT_VARIANTS if heldout_voice else synth.TRAIN_VARIANTS
        for _ in range(50):
            t = pool.pop()
            voice, rate, pitch, prange, gap = synth.random_params(rng, variants)
            x = synth._resample(eng.synth(t, voice, rate, pitch, prange, gap), eng.sr)
            if len(x) / 16000 <= 4.0:
                break
        fn = f"{i:02d}.wav"
        synth.write_wav(os.path.join(out, "heldout", fn), x)
        rows.append({"file": fn, "text": t, "voice": voice, "held_out_voice": heldout_voice,
                     "rate": rate, "pitch": pitch, "range": prange, "seconds": round(len(x) / 16000, 3)})
    with open(os.path.join(out, "heldout", "manifest.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{len(rows)} held-out fixtures, {sum(r['seconds'] for r in rows):.1f} s")


if __name__ == "__main__":
    main()
