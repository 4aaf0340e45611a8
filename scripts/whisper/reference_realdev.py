#!/usr/bin/env python3
"""faster-whisper's transcripts, error rates and speed on shared/realdev: the
reference our Whisper engine is measured against.

    pip install faster-whisper==1.2.1 ctranslate2==4.8.5 numpy
    scripts/fetch_whisper.sh whisper-tiny.en
    python3 scripts/whisper/reference_realdev.py whisper-tiny.en [--no-int8]

Not run in CI; measuring only (nothing is tuned on realdev). Loads the
CTranslate2 folder the fetch script rebuilt (third_party/whisper/NAME/ct2/)
with WhisperModel(ct2_dir, device="cpu", compute_type=..., cpu_threads=1)
and transcribes the 24 files of ../shared/realdev/manifest.jsonl (WAV read
as int16 / 32768) in two modes:

    greedy: beam_size=1, temperature=0.0 (no fallback), without_timestamps=True
    beam5:  faster-whisper's defaults (beam_size=5, the temperature fallback
            0.0..1.0, timestamps on)

plus language="en" for multilingual models. The float32 runs write
fixtures/whisper/realdev_NAME_MODE.jsonl (`file`, `text`, `tokens`: the
segments' tokens joined, timestamps included in beam5). Prints CER / WER
per group and overall, twice: compared as `pulsed eval` compares (only
whitespace collapsed: case and punctuation count as errors; the references
are lower case without punctuation), and after lower-casing and dropping
punctuation; then audio seconds per wall second (features, encoder and
decoder; model loading excluded) for float32 and int8 on this machine.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realdev_common import Counts, machine, normalize, read_wav  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REALDEV = os.path.join(ROOT, "..", "shared", "realdev")
FIXTURES = os.path.join(ROOT, "fixtures", "whisper")
MODES = {
    "greedy": dict(beam_size=1, temperature=0.0, without_timestamps=True),
    "beam5": dict(beam_size=5),
}


def run(model, items, opts):
    out, seconds = [], 0.0
    for it in items:
        t0 = time.perf_counter()
        segments, _ = model.transcribe(it["audio"], **opts)
        segments = list(segments)
        seconds += time.perf_counter() - t0
        out.append({
            "file": it["file"],
            "text": "".join(s.text for s in segments).strip(),
            "tokens": [t for s in segments for t in s.tokens],
        })
    return out, seconds


def report(name, mode, compute, items, hyps):
    groups = {it["group"]: (Counts(), Counts()) for it in items}
    groups["all"] = (Counts(), Counts())
    for it, h in zip(items, hyps):
        for g in (it["group"], "all"):
            repo, norm = groups[g]
            repo.add(it["text"], h["text"])
            norm.add(normalize(it["text"]), normalize(h["text"]))
    print(f"{name} {mode} {compute}:")
    for g, (repo, norm) in groups.items():
        print(f"  {g:>13}: exact text: {repo.line()} | normalised (as pulsed eval): {norm.line()}")


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: " + next(l.strip() for l in __doc__.splitlines() if "python3 scripts/whisper/reference_realdev.py" in l))
    name = argv[0]
    computes = ["float32"] + ([] if "--no-int8" in argv else ["int8"])
    from faster_whisper import WhisperModel

    ct2_dir = os.path.join(ROOT, "third_party", "whisper", name, "ct2")
    if not os.path.isdir(ct2_dir):
        sys.exit(f"reference_realdev.py: {ct2_dir} missing: delete "
                 f"$XDG_CACHE_HOME/pulsed/models/{name} and run scripts/fetch_whisper.sh {name}")
    items = []
    with open(os.path.join(REALDEV, "manifest.jsonl")) as f:
        for line in f:
            if line.strip():
                it = json.loads(line)
                it["audio"] = read_wav(os.path.join(REALDEV, it["file"]))
                items.append(it)
    audio_s = sum(len(it["audio"]) for it in items) / 16000
    print(f"{len(items)} files, {audio_s:.1f} s of audio; machine: {machine()}; one thread")
    speed = []
    for compute in computes:
        model = WhisperModel(ct2_dir, device="cpu", compute_type=compute, cpu_threads=1)
        extra = {"language": "en"} if model.model.is_multilingual else {}
        model.transcribe(items[0]["audio"], **MODES["greedy"], **extra)  # warm-up
        for mode, opts in MODES.items():
            hyps, seconds = run(model, items, {**opts, **extra})
            report(name, mode, compute, items, hyps)
            speed.append((mode, compute, seconds))
            if compute == "float32":
                os.makedirs(FIXTURES, exist_ok=True)
                path = os.path.join(FIXTURES, f"realdev_{name}_{mode}.jsonl")
                with open(path + ".part", "w") as f:
                    for h in hyps:
                        f.write(json.dumps(h, ensure_ascii=False) + "\n")
                os.replace(path + ".part", path)
        del model
    print("speed (one thread; features + encoder + decoder):")
    for mode, compute, seconds in speed:
        print(f"  {name} {mode:>6} {compute:>7}: {seconds:6.1f} s, {audio_s / seconds:6.1f} audio s per s")


if __name__ == "__main__":
    main(sys.argv[1:])
