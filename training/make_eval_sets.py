"""Clean evaluation sets for LM / beam-search tuning (CPU, Debian's espeak-ng 1.51).

usage: python3 make_eval_sets.py TEXT_DIR OUT_ROOT [--procs 2]
  TEXT_DIR: train.txt + heldout.txt from text_prep.py
Writes, each as OUT_ROOT/SET/*.wav + manifest.jsonl (16 kHz mono 16-bit, clean,
no noise/gain augmentation, like make_fixtures.py):
  dev        200 TRAINING sentences (random.Random(11)), training voice variants
  test       300 held-out sentences (random.Random(12)), training voice variants
  test_voice 150 held-out sentences (random.Random(13), drawn independently of
             `test`), held-out voice variants m3/f4 in any accent
Each set's rng draws the sentences (rng.sample) and then, per sentence in order,
synth.random_params(rng, variants) -- the parameter function used for training.
Also test_voice/tune.jsonl: the test_voice lines whose sentence is not in test
(for tuning the language model's weights).
Manifest lines: file, text, voice, held_out_voice, rate, pitch, range, wordgap, seconds.

e.g. /usr/bin/python3 training/make_eval_sets.py /work/data/text /work/data --procs 2
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402

SETS = [  # name, source file, n, seed, held-out voice
    ("dev", "train.txt", 200, 11, False),
    ("test", "heldout.txt", 300, 12, False),
    ("test_voice", "heldout.txt", 150, 13, True),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("text_dir")
    ap.add_argument("out_root")
    ap.add_argument("--procs", type=int, default=2)
    a = ap.parse_args()
    for name, src, n, seed, hv in SETS:
        sents = [t for t in open(os.path.join(a.text_dir, src)).read().split("\n") if t]
        rng = random.Random(seed)
        chosen = rng.sample(sents, n)
        variants = synth.HELDOUT_VARIANTS if hv else synth.TRAIN_VARIANTS
        items = [(t,) + synth.random_params(rng, variants) for t in chosen]
        wavs = synth.synth_many(items, procs=a.procs, chunksize=4, resample=True)
        out = os.path.join(a.out_root, name)
        os.makedirs(out, exist_ok=True)
        rows = []
        for i, ((t, voice, rate, pitch, prange, gap), x) in enumerate(zip(items, wavs)):
            fn = f"{i:03d}.wav"
            synth.write_wav(os.path.join(out, fn), x)
            rows.append({"file": fn, "text": t, "voice": voice, "held_out_voice": hv,
                         "rate": rate, "pitch": pitch, "range": prange, "wordgap": gap,
                         "seconds": round(len(x) / 16000, 3)})
        with open(os.path.join(out, "manifest.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        secs = [r["seconds"] for r in rows]
        print(f"{name}: {len(rows)} files, {sum(secs) / 3600:.3f} h, "
              f"{min(secs):.2f}-{max(secs):.2f} s, outside 1-10 s: {sum(not 1 <= s <= 10 for s in secs)}",
              flush=True)
    # the language model's weights are tuned on held-out-voice sentences that
    # are not in `test`, so `test` stays unseen by every choice
    test = {json.loads(l)["text"] for l in open(os.path.join(a.out_root, "test", "manifest.jsonl"))}
    tv = os.path.join(a.out_root, "test_voice")
    tune = [l for l in open(os.path.join(tv, "manifest.jsonl")) if json.loads(l)["text"] not in test]
    with open(os.path.join(tv, "tune.jsonl"), "w") as f:
        f.writelines(tune)
    print(f"test_voice/tune.jsonl: {len(tune)} lines", flush=True)


if __name__ == "__main__":
    main()
