"""Moves encoder weights between a pulsed Whisper folder and the training side
(standard library + numpy; no torch needed).

  python3 folder.py teacher MODEL_DIR OUT_DIR
      OUT_DIR/encoder-N.safetensors (the model.encoder.* tensors, in pieces of
      at most 24 MB, so that base's 41 MB reach the GPU machine in two
      carries) + config.json
  python3 folder.py student MODEL_DIR SHARDS_DIR OUT_DIR CHUNK LEFT RIGHT [PADDING [copies]]
      a whole Whisper folder: MODEL_DIR's files with the encoder tensors (and,
      from `distill.py --train-cross`, the decoder's cross-attention) taken
      from SHARDS_DIR/student-*.safetensors and config.json telling pulsed the
      encoder's attention context (`pulsed_encoder_context`) and the window
      padding it was distilled with (`pulsed_window_padding`: PADDING, zeros
      unless said: `distill.py --padding`); `copies` for a student of
      `distill.py --copies` (every layer looks RIGHT ahead through
      right-context copies)
  python3 folder.py soup OUT_DIR SHARDS_DIR SHARDS_DIR...
      OUT_DIR/student-*.safetensors: the uniform average of several students'
      shards (a "model soup" of runs from one start; the same tensors, each
      averaged in float32 and stored back in its own dtype)
  python3 folder.py ctc FOLDER HEAD.safetensors [LM.arpa]
      adds a CTC head (ctc_head.py's ctc-linear or ctc-mlp) to a student's
      FOLDER: ctc_head.safetensors, ctc_tokens.txt (the shipped model's
      characters, which the head was trained on) and, when given, lm.arpa
      (the word language model `--ctc --beam N` uses by default)
"""
import glob
import json
import os
import shutil
import sys


# the safetensors reader and writer of the fetch path (standard library only)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "whisper"))
from weight_delta import load as read, safetensors_bytes  # noqa: E402


def write(path, tensors):
    with open(path, "wb") as f:
        f.write(safetensors_bytes(tensors))


def pieces(tensors, limit, nbytes=lambda v: len(v[2])):
    """`tensors` (name -> (dtype, shape, bytes), or whatever `nbytes` sizes)
    in name order, cut into dicts of at most `limit` bytes each (a tensor
    larger than that alone)."""
    out, size = [{}], 0
    for k in sorted(tensors):
        n = nbytes(tensors[k])
        if out[-1] and size + n > limit:
            out.append({})
            size = 0
        out[-1][k] = tensors[k]
        size += n
    return out


def teacher(model, out, limit=24e6):
    os.makedirs(out, exist_ok=True)
    t = read(os.path.join(model, "model.safetensors"))
    enc = {k: v for k, v in t.items() if k.startswith("model.encoder.")}
    for i, part in enumerate(pieces(enc, limit)):
        write(os.path.join(out, f"encoder-{i}.safetensors"), part)
    shutil.copy(os.path.join(model, "config.json"), out)


def student(model, shards, out, chunk, left, right, padding="zeros", copies=False):
    os.makedirs(out, exist_ok=True)
    t = read(os.path.join(model, "model.safetensors"))
    new = {}
    for s in sorted(glob.glob(os.path.join(shards, "student-*.safetensors"))):
        new.update(read(s))
    missing = [k for k in t if k.startswith("model.encoder.") and k not in new]
    if missing:
        sys.exit(f"the shards lack {len(missing)} encoder tensors, e.g. {missing[0]}")
    for k, v in new.items():
        if k not in t or t[k][1] != v[1]:
            sys.exit(f"{k}: not in the model or of another shape")
        t[k] = v
    write(os.path.join(out, "model.safetensors"), t)
    for f in os.listdir(model):
        if f not in ("model.safetensors", "config.json"):
            shutil.copy(os.path.join(model, f), out)
    cfg = json.load(open(os.path.join(model, "config.json")))
    cfg["pulsed_encoder_context"] = {"chunk": chunk, "left": left, "right": right}
    if copies:
        cfg["pulsed_encoder_context"]["right_copies"] = True
    # the padding of the windows it was distilled on (distill.py --padding)
    cfg["pulsed_window_padding"] = padding
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)


def soup(out, dirs):
    import numpy as np

    names = [sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "student-*.safetensors"))) for d in dirs]
    if not names[0] or any(n != names[0] for n in names):
        sys.exit(f"the folders do not hold the same student-*.safetensors shards: {names}")
    os.makedirs(out, exist_ok=True)
    kinds = {"F16": np.float16, "F32": np.float32}
    for shard in names[0]:
        parts = [read(os.path.join(d, shard)) for d in dirs]
        mixed = {}
        for k, (dt, shape, _) in parts[0].items():
            if dt not in kinds or any(p.get(k, (None, None))[:2] != (dt, shape) for p in parts):
                sys.exit(f"{shard}: {k} is not a {'/'.join(kinds)} tensor of one shape in every folder")
            mean = sum(np.frombuffer(p[k][2], kinds[dt]).astype(np.float32) for p in parts) / len(parts)
            mixed[k] = (dt, shape, mean.astype(kinds[dt]).tobytes())
        write(os.path.join(out, shard), mixed)


def ctc(folder, head, lm=None):
    if not os.path.isfile(os.path.join(folder, "config.json")):
        sys.exit(f"{folder}: not a model folder (no config.json)")
    shutil.copy(head, os.path.join(folder, "ctc_head.safetensors"))
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from common import TOKENS
    with open(os.path.join(folder, "ctc_tokens.txt"), "w") as f:
        f.write("\n".join(TOKENS) + "\n")
    if lm:
        shutil.copy(lm, os.path.join(folder, "lm.arpa"))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["teacher"] and len(a) == 3:
        teacher(a[1], a[2])
    elif a[:1] == ["student"] and len(a) in (7, 8, 9) and a[7:8] in ([], ["zeros"], ["silence"]) \
            and a[8:] in ([], ["copies"]):
        student(a[1], a[2], a[3], int(a[4]), int(a[5]), int(a[6]), *a[7:8], copies=a[8:] == ["copies"])
    elif a[:1] == ["ctc"] and len(a) in (3, 4):
        ctc(*a[1:])
    elif a[:1] == ["soup"] and len(a) >= 4:
        soup(a[1], a[2:])
    else:
        sys.exit(__doc__)
