"""A Whisper model of our own, stored as its difference from a public
checkpoint that scripts/fetch_whisper.sh fetches: a student is about as
large as its teacher (whisper-base's encoder: 41 MB in f16), too large to
commit, but its difference from the teacher, in 7-bit steps per group of
64 values, rebuilds it to about twice f16's own rounding and compresses
to 16.7 MB (whisper-base-streaming-640ms).

  python3 weight_delta.py make BASE_DIR MODEL_DIR OUT_DIR BASE_NAME
      OUT_DIR/delta.safetensors.xz + OUT_DIR/delta.json: every tensor of
      MODEL_DIR/model.safetensors that differs from BASE_DIR's, and the
      config.json keys that differ or that the model drops (needs numpy)
  python3 weight_delta.py apply BASE_DIR DELTA_DIR OUT_DIR
      OUT_DIR: BASE_DIR's folder with the delta applied, checked against the
      sha256 that `make` recorded (standard library only: the fetch path
      needs nothing installed)

delta.json may name the weights of another model's delta ("weights":
"../NAME/delta.safetensors.xz"): the same weights with another config (an
operating point of one student), committed once.

Format: per changed float16 tensor NAME of at least GROUP * GROUP
elements, a multiple of GROUP, `NAME.q` (int8, [n/GROUP, GROUP], levels
-LEVELS..LEVELS) and `NAME.scale` (float16, [n/GROUP, 1]); the rebuilt value is
f16(base + q * scale), computed in double precision. Other changed
tensors are stored whole as `NAME` in their own dtype.
"""
import array
import hashlib
import json
import lzma
import os
import shutil
import struct
import sys

GROUP = 64
# 7-bit steps: whisper-base-streaming-640ms's changed tensors come back
# within 0.07 % (relative Frobenius error; f16's rounding alone is about
# 0.03 %), where 8-bit steps compress 2.4 MB larger
LEVELS = 63
FORMAT = 1
DELTA = "delta.safetensors.xz"
META = "delta.json"


class DeltaError(Exception):
    pass


ITEM = {"F16": 2, "BF16": 2, "F32": 4, "I8": 1, "U8": 1, "I32": 4, "I64": 8}


def read_safetensors(blob):
    """name -> (dtype, shape, bytes); DeltaError unless every tensor's bytes
    are there and of its dtype and shape."""
    if len(blob) < 8:
        raise DeltaError("shorter than a safetensors header")
    n = struct.unpack("<Q", blob[:8])[0]
    try:
        head = json.loads(blob[8:8 + n])
    except (ValueError, UnicodeDecodeError) as e:
        raise DeltaError(f"a damaged header ({e})") from None
    if not isinstance(head, dict):
        raise DeltaError("a damaged header (not a table of tensors)")
    head.pop("__metadata__", None)
    body = memoryview(blob)[8 + n:]
    out = {}
    for k, v in head.items():
        try:
            dt, shape, (a, b) = v["dtype"], list(v["shape"]), v["data_offsets"]
            size = ITEM[dt] * numel(shape)
        except (KeyError, TypeError, ValueError):
            raise DeltaError(f"{k}: a damaged header entry") from None
        if not 0 <= a <= b <= len(body) or b - a != size:
            raise DeltaError(f"{k}: its bytes are missing or not {dt} {shape}")
        out[k] = (dt, shape, bytes(body[a:b]))
    return out


def safetensors_bytes(tensors):
    head, off, parts = {}, 0, []
    for k in sorted(tensors):
        dt, shape, b = tensors[k]
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        parts.append(b)
        off += len(b)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(parts)


def load(path):
    try:
        with open(path, "rb") as f:
            return read_safetensors(f.read())
    except OSError as e:
        raise DeltaError(f"{path}: {e.strerror}") from None
    except DeltaError as e:
        raise DeltaError(f"{path}: not a whole safetensors file: {e}") from None


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise DeltaError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise DeltaError(f"{path}: not JSON ({e})") from None


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def quantizable(dtype, shape):
    n = numel(shape)
    return dtype == "F16" and n % GROUP == 0 and n >= GROUP * GROUP


def rebuild(base, q, scale):
    """f16(base + q * scale) for flat little-endian f16 `base`, int8 `q` and
    one f16 `scale` per GROUP values; bytes out."""
    n = len(base) // 2
    b = struct.unpack(f"<{n}e", base)
    s = struct.unpack(f"<{n // GROUP}e", scale)
    qs = array.array("b", q)
    out = [b[i] + qs[i] * s[i // GROUP] for i in range(n)]
    try:
        return struct.pack(f"<{n}e", *out)
    except (OverflowError, struct.error):
        raise DeltaError("a rebuilt value is out of float16's range") from None


def read_meta(delta_dir):
    path = os.path.join(delta_dir, META)
    meta = read_json(path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DeltaError(f"{path}: not a delta of format {FORMAT}")
    removed = meta.get("config_removed", [])
    if not (isinstance(meta.get("base"), str) and isinstance(meta.get("config"), dict)
            and isinstance(meta.get("model_sha256"), str) and isinstance(meta.get("weights", DELTA), str)
            and isinstance(removed, list) and all(isinstance(k, str) for k in removed)):
        raise DeltaError(f"{path}: needs `base`, `config` and `model_sha256`"
                         " (and `config_removed`, where given, a list of keys)")
    return meta


def rebuilt(base_dir, delta_dir, weights=DELTA):
    """The bytes of the model.safetensors that base + delta make (`weights`:
    the delta's file, relative to `delta_dir`)."""
    path = os.path.join(delta_dir, weights)
    try:
        with open(path, "rb") as f:
            delta = read_safetensors(lzma.decompress(f.read()))
    except OSError as e:
        raise DeltaError(f"{path}: {e.strerror}") from None
    except lzma.LZMAError as e:
        raise DeltaError(f"{path}: damaged ({e})") from None
    except DeltaError as e:
        raise DeltaError(f"{path}: {e}") from None
    model = load(os.path.join(base_dir, "model.safetensors"))
    done = set()
    for k in sorted(delta):
        if k.endswith(".q"):
            name = k[:-2]
            if name not in model or name + ".scale" not in delta:
                raise DeltaError(f"the delta changes {name}, which {base_dir} does not have")
            dt, shape, b = model[name]
            groups = numel(shape) // GROUP
            if not quantizable(dt, shape) or delta[k][:2] != ("I8", [groups, GROUP]) \
                    or delta[name + ".scale"][:2] != ("F16", [groups, 1]):
                raise DeltaError(f"{name}: the delta's shape does not fit {base_dir}'s {dt} {shape}")
            model[name] = (dt, shape, rebuild(b, delta[k][2], delta[name + ".scale"][2]))
            done |= {k, name + ".scale"}
    for k in sorted(set(delta) - done):
        if k not in model or model[k][:2] != delta[k][:2]:
            raise DeltaError(f"{k}: not in {base_dir}, or of another dtype or shape")
        model[k] = delta[k]
    return safetensors_bytes(model)


def apply(base_dir, delta_dir, out_dir):
    meta = read_meta(delta_dir)
    blob = rebuilt(base_dir, delta_dir, meta.get("weights", DELTA))
    got = hashlib.sha256(blob).hexdigest()
    if got != meta["model_sha256"]:
        raise DeltaError(f"the rebuilt weights do not match the ones the delta was made from "
                         f"(sha256 {got[:12]}, want {meta['model_sha256'][:12]}): is {base_dir} "
                         f"the {meta.get('base')} it was made against?")
    cfg = read_json(os.path.join(base_dir, "config.json"))
    for k in meta.get("config_removed", []):
        cfg.pop(k, None)
    cfg.update(meta["config"])
    try:
        write_folder(base_dir, out_dir, cfg, blob)
    except OSError as e:
        raise DeltaError(f"{out_dir}: {e.strerror} ({e.filename})") from None


def write_folder(base_dir, out_dir, cfg, blob):
    os.makedirs(out_dir, exist_ok=True)
    # a folder is whole once model.safetensors is there: an older one goes
    # first, so that an interrupted run leaves no new config beside old weights
    target = os.path.join(out_dir, "model.safetensors")
    if os.path.exists(target):
        os.remove(target)
    for f in os.listdir(base_dir):
        if f not in ("model.safetensors", "config.json") and os.path.isfile(os.path.join(base_dir, f)):
            shutil.copy(os.path.join(base_dir, f), out_dir)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    # written last, under a temporary name: a folder with model.safetensors is whole
    tmp = os.path.join(out_dir, "model.safetensors.partial")
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, target)


def make(base_dir, model_dir, out_dir, base_name):
    import numpy as np

    base = load(os.path.join(base_dir, "model.safetensors"))
    model = load(os.path.join(model_dir, "model.safetensors"))
    if set(base) != set(model):
        raise DeltaError(f"{model_dir} and {base_dir} do not hold the same tensors")
    delta = {}
    for k in sorted(model):
        dt, shape, b = model[k]
        if base[k][:2] != (dt, shape):
            raise DeltaError(f"{k}: {dt} {shape} in {model_dir}, {base[k][0]} {base[k][1]} in {base_dir}")
        if b == base[k][2]:
            continue
        if not quantizable(dt, shape):
            delta[k] = model[k]
            continue
        want = np.frombuffer(b, np.float16).astype(np.float64).reshape(-1, GROUP)
        have = np.frombuffer(base[k][2], np.float16).astype(np.float64).reshape(-1, GROUP)
        d = want - have
        if not np.isfinite(d).all():
            raise DeltaError(f"{k}: not finite in {model_dir} or {base_dir}")
        scale = (np.abs(d).max(1, keepdims=True) / LEVELS).astype(np.float16)
        s = scale.astype(np.float64)
        q = np.round(np.divide(d, s, out=np.zeros_like(d), where=s > 0)).clip(-LEVELS, LEVELS)
        delta[k + ".q"] = ("I8", list(q.shape), q.astype(np.int8).tobytes())
        delta[k + ".scale"] = ("F16", list(scale.shape), scale.tobytes())
    cfg_base = read_json(os.path.join(base_dir, "config.json"))
    cfg = read_json(os.path.join(model_dir, "config.json"))
    changed = {k: v for k, v in cfg.items() if cfg_base.get(k) != v}
    removed = sorted(k for k in cfg_base if k not in cfg)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, DELTA), "wb") as f:
        f.write(lzma.compress(safetensors_bytes(delta), preset=9 | lzma.PRESET_EXTREME))
    blob = rebuilt(base_dir, out_dir)
    new = read_safetensors(blob)
    keys = [k for k in sorted(model) if model[k][0] == "F16" and model[k][2] != base[k][2]]
    got = np.frombuffer(b"".join(new[k][2] for k in keys), np.float16).astype(np.float64)
    want = np.frombuffer(b"".join(model[k][2] for k in keys), np.float16).astype(np.float64)
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    # f16 rounding alone is ~3e-4: an error this large means a broken delta
    if not err < 1e-2:
        raise DeltaError(f"the rebuilt tensors are {err:.2e} (relative) from {model_dir}'s: not kept")
    # delta.json last: a delta without it is not one apply reads
    meta = {"format": FORMAT, "base": base_name, "config": changed,
            "model_sha256": hashlib.sha256(blob).hexdigest()}
    if removed:
        meta["config_removed"] = removed
    with open(os.path.join(out_dir, META), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{len(delta)} entries, {os.path.getsize(os.path.join(out_dir, DELTA)) / 1e6:.1f} MB; "
          f"config keys {sorted(changed)}, dropped {removed}; the changed tensors rebuilt within {err:.2e} (relative) of {model_dir}'s",
          file=sys.stderr)


if __name__ == "__main__":
    a = sys.argv[1:]
    try:
        if a[:1] == ["make"] and len(a) == 5:
            make(*a[1:])
        elif a[:1] == ["apply"] and len(a) == 4:
            apply(*a[1:])
        else:
            sys.exit(__doc__)
    except DeltaError as e:
        sys.exit(f"weight_delta.py: {e}")
    except OSError as e:
        sys.exit(f"weight_delta.py: {e.filename}: {e.strerror}")
