"""CER / WER of a shipped model (model.safetensors, f16 weights upcast to f32) on the CPU.

usage:
  python3 eval.py MODEL_DIR --manifest fixtures/asr/heldout/manifest.jsonl
  python3 eval.py MODEL_DIR --synth TEXT_DIR [--n 300]   # fresh espeak-ng renditions of
      held-out sentences: one set in training voices, one in the held-out voice variants
Greedy CTC decoding, utterance by utterance (no padding effects).
"""
import argparse
import json
import os
import random
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402
from common import cer_wer, ctc_greedy  # noqa: E402
from export import load_shipped  # noqa: E402


@torch.no_grad()
def decode(m, x16):
    x = torch.from_numpy(np.asarray(x16).astype(np.float32) / 32768.0)[None]
    return ctc_greedy(m(x)[0].argmax(-1).tolist())


def report(name, pairs, show=3):
    cer, wer = cer_wer(pairs)
    print(f"{name}: CER {cer * 100:.2f}%  WER {wer * 100:.2f}%  (n={len(pairs)})")
    bad = [p for p in pairs if p[0] != p[1]][:show]
    for r, h in bad:
        print(f"    REF {r}\n    HYP {h}")
    return {"cer": cer, "wer": wer, "n": len(pairs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--manifest")
    ap.add_argument("--synth")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    m = load_shipped(a.model_dir)
    res = {}
    if a.manifest:
        d = os.path.dirname(a.manifest)
        rows = [json.loads(l) for l in open(a.manifest)]
        groups = {False: [], True: []}
        for r in rows:
            groups[r["held_out_voice"]].append((r["text"], decode(m, synth.read_wav(os.path.join(d, r["file"])))))
        res["fixtures_training_voices"] = report("fixtures, training voices", groups[False])
        res["fixtures_heldout_voice"] = report("fixtures, held-out voice", groups[True])
    if a.synth:
        held = [t for t in open(os.path.join(a.synth, "heldout.txt")).read().split("\n") if t][: a.n]
        rng = random.Random(99)
        eng = synth.Espeak()
        for name, variants in (("synth_training_voices", synth.TRAIN_VARIANTS), ("synth_heldout_voice", synth.HELDOUT_VARIANTS)):
            pairs = []
            for t in held:
                v = synth.random_params(rng, variants)
                pairs.append((t, decode(m, synth._resample(eng.synth(t, *v), eng.sr))))
            res[name] = report(name, pairs)
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
