"""The GPU peer of issue 19's throughput figure: Hugging Face transformers'
Whisper on the GPU machine's PyTorch (fp16, SDPA attention, every file of
the manifest in batches), on the same folder pulsed loads, with the same
beam. Prints audio seconds per second (after one warm-up pass) and the WER
under src/asr/metrics.rs's normalisation.

usage (GPU machine): python3 peer_transformers.py MODEL_DIR MANIFEST [--beam N] [--batch N]
    [--dtype float16|float32] [--hyp-out FILE (JSON lines, as `pulsed eval --hyp-out`)]
"""
import argparse
import json
import os
import sys
import time

import torch
import transformers
from tokenizers import Tokenizer
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realdev_common import Counts, SR, machine, normalize, read_wav  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("manifest")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--hyp-out", default=None)
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    base = os.path.dirname(a.manifest)
    items = [json.loads(line) for line in open(a.manifest) if line.strip()]
    audio = [read_wav(os.path.join(base, it["file"])) for it in items]
    seconds = sum(len(x) for x in audio) / SR
    fe = WhisperFeatureExtractor.from_pretrained(a.model)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    model = WhisperForConditionalGeneration.from_pretrained(
        a.model, torch_dtype=dtype, attn_implementation="sdpa").cuda().eval()

    def run():
        texts = []
        for i in range(0, len(audio), a.batch):
            feats = fe(audio[i:i + a.batch], sampling_rate=SR, return_tensors="pt").input_features
            with torch.inference_mode():
                ids = model.generate(feats.cuda().to(dtype), num_beams=a.beam, do_sample=False,
                                     max_new_tokens=440)
            texts += [tok.decode(r.tolist(), skip_special_tokens=True).strip() for r in ids.cpu()]
        torch.cuda.synchronize()
        return texts

    run()  # warm-up: kernels, cuBLAS plans
    t = time.perf_counter()
    texts = run()
    wall = time.perf_counter() - t
    counts = Counts()
    for it, h in zip(items, texts):
        counts.add(normalize(it["text"]), normalize(h))
    if a.hyp_out:
        with open(a.hyp_out, "w") as f:
            for it, h in zip(items, texts):
                f.write(json.dumps({"file": it["file"], "text": h, "reference": it["text"]}) + "\n")
    print(f"transformers {transformers.__version__} (torch {torch.__version__}) {a.dtype} sdpa, beam {a.beam}, batch {a.batch}: "
          f"{seconds:.1f} s of audio in {wall:.2f} s ({seconds / wall:.1f} audio s/s); "
          f"{counts.line()}; {torch.cuda.get_device_name()}; {machine()}")


if __name__ == "__main__":
    main()
