"""The teacher's decoder, small enough to carry to the GPU machine, for
distilling through the decoder (distill.py --decoder): the decoder tensors
in f16 with the token embedding cut down to the tokens that the training
sentences use (plus the special tokens of the prompt), and every sentence
already tokenised into that sub-vocabulary. The KL between teacher and
student is then taken over the sub-vocabulary (renormalised), which holds
nearly all of the probability on teacher-forced training text.

usage: python3 decoder_pack.py MODEL_DIR TEXT_DIR OUT_DIR [MORE.txt ...]
  MODEL_DIR: a pulsed Whisper folder (tiny.en, or base: its prompt then
  names English and the task); TEXT_DIR: train.txt and
  heldout.txt from training/text_prep.py; MORE: further sentences, one a
  line (the pseudo-labels of real_speech.py's segments); needs the
  `tokenizers` package.
Writes OUT_DIR/decoder.safetensors, OUT_DIR/texts.json. A pack larger
than one carry (base's, 68 MB) goes to the GPU machine in parts:
`bash scripts/carry.sh split OUT_DIR/decoder.safetensors OUT_DIR 30
OUT_DIR/texts.json`, then one call per part carrying OUT_DIR/partN:
`DEC=OUT_DIR/partN bash training/streaming_whisper/run_gpu.sh stage`,
which joins them once all are there.
"""
import json
import os
import sys

from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from folder import read, write  # noqa: E402


def main(model, text_dir, out, *more):
    os.makedirs(out, exist_ok=True)
    gen = json.load(open(os.path.join(model, "generation_config.json")))
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    # a multilingual checkpoint (base) is distilled on English: its prompt
    # names the language and the task, as `pulsed --language en` decodes
    lang = [gen["lang_to_id"]["<|en|>"], gen["task_to_id"]["transcribe"]] if gen.get("is_multilingual") else []
    prompt = [gen["decoder_start_token_id"], *lang, gen["no_timestamps_token_id"]]
    eot = gen["eos_token_id"]
    texts = {}
    for name in [os.path.join(text_dir, "train.txt"), os.path.join(text_dir, "heldout.txt"), *more]:
        for line in open(name):
            t = line.strip()
            if t:
                texts[t] = tok.encode(" " + t, add_special_tokens=False).ids
    used = sorted({i for ids in texts.values() for i in ids} | set(prompt) | {eot})
    remap = {v: k for k, v in enumerate(used)}
    t = read(os.path.join(model, "model.safetensors"))
    dec = {k: v for k, v in t.items() if k.startswith("model.decoder.")}
    dt, shape, body = dec["model.decoder.embed_tokens.weight"]
    width = shape[1] * 2  # f16 rows
    rows = b"".join(body[i * width:(i + 1) * width] for i in used)
    dec["model.decoder.embed_tokens.weight"] = (dt, [len(used), shape[1]], rows)
    write(os.path.join(out, "decoder.safetensors"), dec)
    json.dump({"vocab": used, "prompt": [remap[i] for i in prompt], "eot": remap[eot],
               "texts": {k: [remap[i] for i in v] for k, v in texts.items()}},
              open(os.path.join(out, "texts.json"), "w"))
    size = os.path.getsize(os.path.join(out, "decoder.safetensors"))
    print(f"{len(texts)} sentences, {len(used)} of {shape[0]} tokens, decoder {size / 1e6:.1f} MB")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    main(*args)
