"""Real speech for distillation: the recordings real_speech.py fetched, cut
into utterances of at most 20 s with a text each, written as a store that
natural_tts.py packs for the GPU machine (`pack`) and unpacks there into an
AudioSet (`unpack ... WORK real`, then distill.py --extra real:SHARE).

The student learns from the teacher's outputs, so the text only steers the
decoder's KL term: a recording's own transcript when it has one and fits
one utterance, else the teacher's (tiny.en's) segments from `pulsed
transcribe --format jsonl`, merged up to 20 s. Texts are normalised as the
training sentences are (lower case, letters, apostrophes and spaces); a
piece whose text has digits is left out (spelling them would guess). The
sentences go to OUT/texts.txt for decoder_pack.py, which must tokenise them.

`--untranscribed PACKAGE ...` keeps those packages' recordings without a
teacher transcript (no `pulsed transcribe`, which runs for hours here): each
recording of at most 20 s is one utterance with text "" (longer ones are
left out, with a count; none of Beneath a Steel Sky's is). Such
utterances serve MSE-only (encoder) distillation only: a decoder-KL run
cannot use them (distill.py's token_batch finds no tokens for "" in the
decoder pack) and a --ctc-head run would learn silence for speech, so keep
them out of a set that such a run draws.
`--only PACKAGE ...` builds the store from just those packages, and
`--shard NAME` names its shard, so a store for one new source sits beside
the existing one without rebuilding it, e.g. Beneath a Steel Sky:

    python3 training/streaming_whisper/real_segments.py .cache/realtrain \
        .cache/distill_real/store_bass --only beneath-a-steel-sky \
        --untranscribed beneath-a-steel-sky --shard real_r001_p0

usage: python3 real_segments.py REALTRAIN_DIR OUT_STORE [--pulsed BIN]
       [--skip PACKAGE ...] [--only PACKAGE ...] [--untranscribed PACKAGE ...]
       [--shard NAME]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import wave

import numpy as np

SR = 16000
MAX_S = 20.0
# left out by default, for their copyleft licences: the share-alike prompts of
# one speaker (asterisk-core-sounds, CC-BY-SA-3.0) and Hedgewars' voice packs
# (hedgewars-data, GFDL-1.3)
SKIP = ["asterisk-core-sounds-en-g722", "hedgewars-data"]


def normalise(text):
    t = re.sub(r"[^a-z' ]+", " ", text.lower().replace("-", " "))
    return " ".join(t.split())


def read_wav(path):
    with wave.open(path, "rb") as w:
        if w.getframerate() != SR or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: not 16 kHz mono int16")
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


def teacher_segments(pulsed, files, cache):
    """{file: [(start_s, end_s, text)]} from tiny.en's transcripts.

    One `pulsed transcribe` for all files, listed in CACHE/files.txt (thousands
    of paths); its jsonl goes to CACHE/segments.jsonl with --resume, so a run
    that stops (tiny.en reads ~2 s of audio a wall second on this box: hours for
    the 6.6 h set) goes on where it was. A file that fails gets no pieces."""
    os.makedirs(cache, exist_ok=True)
    listing, out = os.path.join(cache, "files.txt"), os.path.join(cache, "segments.jsonl")
    with open(listing, "w") as f:
        f.write("".join(os.path.abspath(p) + "\n" for p in files))
    subprocess.run([pulsed, "transcribe", "--model", "whisper-tiny.en", "--format", "jsonl",
                    "--word-timestamps", "false", "--manifest", listing, "-o", out, "--resume"], check=True)
    segs = {}
    for line in open(out):
        r = json.loads(line)
        segs[os.path.abspath(r["file"])] = [(s["start"], s["end"], s["text"]) for s in r.get("segments", [])]
    return segs


def merged(segs):
    """Consecutive segments joined while the piece stays within MAX_S."""
    pieces = []
    for s, e, t in segs:
        if pieces and e - pieces[-1][0] <= MAX_S:
            pieces[-1] = (pieces[-1][0], e, pieces[-1][2] + " " + t)
        else:
            pieces.append((s, e, t))
    return pieces


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("realtrain")
    ap.add_argument("out")
    ap.add_argument("--pulsed", default="target/release/pulsed")
    ap.add_argument("--skip", nargs="*", default=SKIP)
    ap.add_argument("--only", nargs="+", metavar="PACKAGE", help="just these packages' recordings")
    ap.add_argument("--untranscribed", nargs="+", default=[], metavar="PACKAGE",
                    help="these packages' recordings (<= 20 s each) kept whole with text \"\": MSE-only runs")
    ap.add_argument("--shard", default="real_r000_p0", help="the store's shard name")
    a = ap.parse_args()
    rows = [r.rstrip("\n").split("\t") for r in open(os.path.join(a.realtrain, "SOURCES.tsv"))]
    head = rows[0]
    package = {os.path.basename(r[head.index("file")]): r[head.index("package")] for r in rows[1:]}
    items = [json.loads(l) for l in open(os.path.join(a.realtrain, "manifest.jsonl"))]
    def of(m, names):
        return any(package.get(os.path.basename(m["audio"]), "").startswith(p + "==") for p in names)
    keep = [m for m in items if not of(m, a.skip) and (a.only is None or of(m, a.only))]
    audio = {m["audio"]: read_wav(os.path.join(a.realtrain, m["audio"])) for m in keep}
    bare = {m["audio"] for m in keep if of(m, a.untranscribed)}
    too_long = [m for m in keep if m["audio"] in bare and len(audio[m["audio"]]) > MAX_S * SR]
    if too_long:
        print(f"{len(too_long)} untranscribed recordings over {MAX_S:.0f} s left out "
              f"({sum(len(audio[m['audio']]) for m in too_long) / SR / 60:.1f} min)")
    whole = {m["audio"] for m in keep if m["audio"] not in bare
             and m.get("text") and len(audio[m["audio"]]) <= MAX_S * SR}
    os.makedirs(a.out, exist_ok=True)
    rest = [os.path.join(a.realtrain, m["audio"]) for m in keep if m["audio"] not in whole | bare]
    # the teacher's transcripts are kept beside the shards (a folder, which
    # natural_tts.py's read_store does not look into)
    segs = teacher_segments(a.pulsed, rest, os.path.join(a.out, "teacher")) if rest else {}
    base = os.path.join(a.out, a.shard)
    n = skipped = samples = 0
    texts = []
    with open(base + ".pcm", "wb") as pcm, open(base + ".jsonl", "w") as js:
        for m in keep:
            x = audio[m["audio"]]
            if m["audio"] in bare:  # no transcript: the whole recording, text ""
                pieces = [(0.0, len(x) / SR, "")] if len(x) <= MAX_S * SR else []
            elif m["audio"] in whole:
                pieces = [(0.0, len(x) / SR, m["text"])]
            else:
                pieces = merged(segs.get(os.path.abspath(os.path.join(a.realtrain, m["audio"])), []))
            for s, e, t in pieces:
                text = normalise(t)
                if (not text and m["audio"] not in bare) or re.search(r"\d", t):
                    skipped += 1
                    continue
                y = x[max(0, int((s - 0.1) * SR)):min(len(x), int((e + 0.2) * SR))]
                off = pcm.tell() // 2
                pcm.write(y.tobytes())
                js.write(json.dumps({"text": text, "engine": "real", "voice": m["audio"],
                                     "source": package.get(os.path.basename(m["audio"]), "?"),
                                     "off": off, "len": len(y)}) + "\n")
                if text:
                    texts.append(text)
                n += 1
                samples += len(y)
    with open(os.path.join(a.out, "texts.txt"), "w") as f:
        f.write("\n".join(sorted(set(texts))) + "\n")
    print(f"{n} utterances, {samples / SR / 60:.1f} min from {len(keep)} recordings "
          f"({len(whole)} whole with their transcript, {len(bare)} untranscribed), {skipped} pieces left out")


if __name__ == "__main__":
    sys.exit(main())
