#!/usr/bin/env bash
# Fetches Silero VAD v6 (PyPI `silero-vad`) into third_party/silero/ (ignored by
# git): the 16 kHz weights for our engine and the ONNX model the reference
# probabilities came from. Idempotent: does nothing when they are there.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=6.2.3
DEST=third_party/silero
WHEEL="$DEST/silero_vad-$VERSION-py3-none-any.whl"
FILES=(silero_vad_16k_onnx.safetensors silero_vad_16k.safetensors silero_vad.onnx tinygrad_model.py)

have_all() {
    for f in "${FILES[@]}"; do [ -s "$DEST/$f" ] || return 1; done
}

if have_all; then
    exit 0
fi
mkdir -p "$DEST"
if [ ! -s "$WHEEL" ]; then
    PIP=(pip)
    command -v pip >/dev/null 2>&1 || PIP=(python3 -m pip)
    "${PIP[@]}" download "silero-vad==$VERSION" --no-deps --only-binary=:all: -d "$DEST" >&2 || {
        echo "fetch_silero.sh: could not download silero-vad==$VERSION from PyPI (no network?)" >&2
        exit 1
    }
fi
# the wheel pip saved, checked against the digest recorded here (pip checks
# PyPI's own while downloading; this catches a damaged or replaced copy)
WHEEL_SHA256=7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8
if [ "$(sha256sum "$WHEEL" | cut -d' ' -f1)" != "$WHEEL_SHA256" ]; then
    rm -f "$WHEEL"
    echo "fetch_silero.sh: $WHEEL does not match its recorded sha256; deleted it, run this again to fetch it anew" >&2
    exit 1
fi
# a wheel is a zip; python's zipfile works where `unzip` is not installed
python3 - "$WHEEL" "$DEST" <<'PY'
import sys, zipfile, os
wheel, dest = sys.argv[1], sys.argv[2]
want = {
    "silero_vad/data/silero_vad_16k.safetensors": "silero_vad_16k.safetensors",
    "silero_vad/data/silero_vad.onnx": "silero_vad.onnx",
    "silero_vad/tinygrad_model.py": "tinygrad_model.py",
}
with zipfile.ZipFile(wheel) as z:
    for src, name in want.items():
        tmp = os.path.join(dest, name + ".part")
        with z.open(src) as i, open(tmp, "wb") as o:
            o.write(i.read())
        os.replace(tmp, os.path.join(dest, name))
PY
# The engine's weights come from the ONNX model: the wheel's
# silero_vad_16k.safetensors does not hold the weights of the ONNX models it
# ships (only the STFT basis agrees), and the ONNX model is the ground truth.
# A minimal protobuf reader (standard library only) copies the 16 kHz
# branch's constants into silero_vad_16k_onnx.safetensors under the tinygrad
# model's names (stft_conv, conv1..4, lstm_cell, final_conv).
python3 - "$DEST/silero_vad.onnx" "$DEST/silero_vad_16k_onnx.safetensors.part" <<'PY'
import json
import struct
import sys

FLOAT = 1  # TensorProto.FLOAT


def varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def fields(b):
    """(field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v, i = b[i : i + 8], i + 8
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i : i + n], i + n
        elif wt == 5:
            v, i = b[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield f, wt, v


def tensor(b):
    dims, dtype, raw, floats = [], None, None, []
    for f, wt, v in fields(b):
        if f == 1:
            if wt == 2:  # packed
                j = 0
                while j < len(v):
                    d, j = varint(v, j)
                    dims.append(d)
            else:
                dims.append(v)
        elif f == 2:
            dtype = v
        elif f == 4:
            floats.append(v if wt == 2 else v)
        elif f == 9:
            raw = bytes(v)
    if dtype != FLOAT:
        return None
    if raw is None:
        raw = b"".join(bytes(x) for x in floats)
    return dims, raw


def graphs_with_constants(g, out):
    """Collects {output name: (dims, raw)} of Constant nodes per (sub)graph."""
    consts = {}
    for f, _, node in fields(g):
        if f != 1:  # GraphProto.node
            continue
        outputs, op, attrs = [], None, []
        for nf, _, v in fields(node):
            if nf == 2:
                outputs.append(bytes(v).decode())
            elif nf == 4:
                op = bytes(v).decode()
            elif nf == 5:
                attrs.append(v)
        for a in attrs:
            for af, _, v in fields(a):
                if af == 5 and op == "Constant" and outputs:
                    t = tensor(v)
                    if t is not None:
                        consts[outputs[0]] = t
                elif af == 6:  # a subgraph (If branches)
                    graphs_with_constants(v, out)
    out.append(consts)


NAMES = {"stft_conv.weight": "stft.forward_basis_buffer"}
for k in range(4):
    NAMES[f"conv{k + 1}.weight"] = f"encoder.{k}.reparam_conv.weight"
    NAMES[f"conv{k + 1}.bias"] = f"encoder.{k}.reparam_conv.bias"
for s in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
    NAMES[f"lstm_cell.{s}"] = f"decoder.rnn.{s}"
NAMES["final_conv.weight"] = "decoder.decoder.2.weight"
NAMES["final_conv.bias"] = "decoder.decoder.2.bias"


def main(src, dst):
    model = open(src, "rb").read()
    graph = next(v for f, _, v in fields(model) if f == 7)
    found = []
    graphs_with_constants(graph, found)
    for consts in found:
        by_suffix = {}
        for name, t in consts.items():
            for ours, theirs in NAMES.items():
                if name == theirs or name.endswith("__" + theirs):
                    by_suffix[ours] = t
        basis = by_suffix.get("stft_conv.weight")
        if len(by_suffix) == len(NAMES) and basis and basis[0] == [258, 1, 256]:
            break
    else:
        sys.exit(f"{src}: no subgraph with the 16 kHz weights")
    header, blobs, off = {}, [], 0
    for name in NAMES:
        dims, raw = by_suffix[name]
        n = 4
        for d in dims:
            n *= d
        if len(raw) != n:
            sys.exit(f"{src}: {name} has {len(raw)} bytes for shape {dims}")
        header[name] = {"dtype": "F32", "shape": dims, "data_offsets": [off, off + n]}
        blobs.append(raw)
        off += n
    header["__metadata__"] = {"source": src.rsplit("/", 1)[-1], "format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


main(sys.argv[1], sys.argv[2])
PY
mv "$DEST/silero_vad_16k_onnx.safetensors.part" "$DEST/silero_vad_16k_onnx.safetensors"
have_all || { echo "fetch_silero.sh: extraction incomplete in $DEST" >&2; exit 1; }
echo "fetch_silero.sh: Silero VAD $VERSION in $DEST" >&2
