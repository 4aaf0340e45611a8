#!/usr/bin/env python3
"""faster-whisper's VAD-segmented batched mode (BatchedInferencePipeline) on
shared/realdev, and the goldens our batched mode (src/models/whisper/decode/
batched.rs) is tested against.

    pip install faster-whisper==1.2.1 ctranslate2==4.8.5 numpy
    scripts/fetch_whisper.sh whisper-tiny.en
    python3 scripts/whisper/reference_batched.py whisper-tiny.en [--hyp-out F]
    python3 scripts/whisper/reference_batched.py whisper-tiny.en --golden

Not run in CI; measuring only (nothing is tuned on realdev). Loads the
CTranslate2 folder the fetch script rebuilt (third_party/whisper/NAME/ct2/)
with WhisperModel(ct2_dir, device="cpu", compute_type="float32",
cpu_threads=1) and wraps it in BatchedInferencePipeline.

Default mode: transcribes the 24 files of ../shared/realdev/manifest.jsonl
(WAV read as int16 / 32768) one by one with the pipeline's defaults
(batch_size=8, beam_size=5, without_timestamps=True, its VAD; plus
language="en" for multilingual models), then prints WER / CER per group
and overall after pulsed's `metrics::normalize` (lower case, hyphens as
spaces, punctuation dropped, apostrophes kept), and audio seconds per
wall second (VAD, features, encoder and decoder; loading excluded).
--hyp-out writes each file's text as jsonl.

--golden writes src/models/whisper/decode/testdata/batched.json:
  - "vad": the pipeline's VAD arithmetic on synthetic probabilities (the
    Silero model replaced by a list of thousandths, as float32): get_speech_timestamps under several
    VadOptions, collect_chunks' offsets and durations, and
    SpeechTimestampsMap's original times for a set of queries;
  - "runs": the pipeline's speech segments (its own VAD) and output
    segments (tokens, times, scores, words) on fixtures/whisper/
    librivox_dev00.wav and on realdev dev00..dev09 joined by 0.5 s of
    silence, for a few option sets (and, with whisper-base, the clip with
    its language detected, and with each chunk's own language). Our tests
    feed the same speech
    segments to our pipeline and compare token for token.
The VAD section writes times as Python's repr strings: serde_json's
default float parsing can miss the closest double by one unit in the
last place, and those times are compared exactly.
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realdev_common import SR, Counts, machine, normalize, read_wav  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REALDEV = os.path.join(ROOT, "..", "shared", "realdev")
GOLDEN = os.path.join(ROOT, "src", "whisper", "decode", "testdata", "batched.json")

def load(name):
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    ct2_dir = os.path.join(ROOT, "third_party", "whisper", name, "ct2")
    if not os.path.isdir(ct2_dir):
        sys.exit(f"reference_batched.py: {ct2_dir} missing: delete "
                 f"$XDG_CACHE_HOME/pulsed/models/{name} and run scripts/fetch_whisper.sh {name}")
    model = WhisperModel(ct2_dir, device="cpu", compute_type="float32", cpu_threads=1)
    extra = {"language": "en"} if model.model.is_multilingual else {}
    return BatchedInferencePipeline(model), extra


def measure(name, argv):
    pipeline, extra = load(name)
    items = []
    with open(os.path.join(REALDEV, "manifest.jsonl")) as f:
        for line in f:
            if line.strip():
                it = json.loads(line)
                it["audio"] = read_wav(os.path.join(REALDEV, it["file"]))
                items.append(it)
    audio_s = sum(len(it["audio"]) for it in items) / SR
    print(f"{len(items)} files, {audio_s:.1f} s of audio; machine: {machine()}; one thread")
    list(pipeline.transcribe(items[0]["audio"], **extra)[0])  # warm-up
    hyps, seconds = [], 0.0
    for it in items:
        t0 = time.perf_counter()
        segments, _ = pipeline.transcribe(it["audio"], **extra)
        text = "".join(s.text for s in segments).strip()
        seconds += time.perf_counter() - t0
        hyps.append(text)
    groups = {it["group"]: Counts() for it in items}
    groups["all"] = Counts()
    for it, h in zip(items, hyps):
        for g in (it["group"], "all"):
            groups[g].add(normalize(it["text"]), normalize(h))
    print(f"{name} BatchedInferencePipeline (batch_size 8, beam 5, no timestamps), float32:")
    for g, c in groups.items():
        print(f"  {g:>13}: {c.line()}")
    print(f"speed: {seconds:.1f} s, {audio_s / seconds:.1f} audio s per s (one thread)")
    if "--hyp-out" in argv:
        path = argv[argv.index("--hyp-out") + 1]
        with open(path, "w") as f:
            for it, h in zip(items, hyps):
                f.write(json.dumps({"file": it["file"], "text": h, "reference": it["text"]}) + "\n")


def synthetic_probs(rng, n, mean_run):
    """Runs of speech and silence with jitter, in thousandths, never on a
    threshold (0.35, 0.5 and 0.2 are thresholds; f32 and f64 differ there)."""
    out, level = [], 0.0
    while len(out) < n:
        run = int(rng.integers(1, 2 * mean_run))
        out.extend(np.clip(level * 0.8 + rng.random(run) * 0.25, 0, 1))
        level = 1.0 - level
    milli = np.round(np.array(out[:n]) * 1000).astype(int)
    milli[np.isin(milli, [350, 500, 200])] += 1
    return [int(m) for m in milli]


def vad_golden():
    from faster_whisper import vad as fw_vad

    rng = np.random.default_rng(7)
    cases = []
    settings = [
        # the pipeline's options
        dict(max_speech_duration_s=30, min_silence_duration_ms=160),
        # cuts within seconds, so the longest-segment split runs often
        dict(max_speech_duration_s=2, min_silence_duration_ms=160),
        dict(max_speech_duration_s=1.5, min_silence_duration_ms=500, speech_pad_ms=30,
             min_speech_duration_ms=100),
        dict(max_speech_duration_s=3, threshold=0.6, speech_pad_ms=200, min_silence_duration_ms=60),
    ]
    for seed in range(8):
        n = int(rng.integers(200, 1500))
        milli = synthetic_probs(rng, n, int(rng.integers(4, 120)))
        probs = np.array([m / 1000 for m in milli], dtype=np.float32)
        total = (n - 1) * 512 + int(rng.integers(0, 512))
        results = []
        for kw in settings:
            options = fw_vad.VadOptions(**kw)
            saved = fw_vad.get_vad_model
            fw_vad.get_vad_model = lambda: (lambda audio: probs)
            try:
                speech = fw_vad.get_speech_timestamps(np.zeros(total, np.float32), options)
            finally:
                fw_vad.get_vad_model = saved
            max_duration = kw["max_speech_duration_s"]
            _, meta = fw_vad.collect_chunks(np.zeros(total, np.float32), speech, max_duration=max_duration)
            queries = []
            if speech:
                m = fw_vad.SpeechTimestampsMap(speech, SR)
                joined = sum(s["end"] - s["start"] for s in speech) / SR
                points = [round(float(t), 3) for t in rng.random(8) * joined]
                points += [c["offset"] + c["duration"] for c in meta] + [c["offset"] for c in meta]
                for t in points:
                    queries.append([repr(t), repr(m.get_original_time(t)), repr(m.get_original_time(t, is_end=True))])
            results.append({
                "options": {
                    "threshold": options.threshold,
                    "min_speech_ms": options.min_speech_duration_ms,
                    "max_speech_s": options.max_speech_duration_s,
                    "min_silence_ms": options.min_silence_duration_ms,
                    "speech_pad_ms": options.speech_pad_ms,
                },
                "speech": [[s["start"], s["end"]] for s in speech],
                "chunks": [[repr(c["offset"]), repr(c["duration"])] for c in meta if speech],
                "queries": queries,
            })
        cases.append({"seed": seed, "total": total, "probs_milli": milli, "results": results})
    return cases


def realdev_joined(count):
    audio = []
    for i in range(count):
        if i:
            audio.append(np.zeros(8000, np.float32))
        audio.append(read_wav(os.path.join(REALDEV, "wav", f"dev{i:02}.wav")))
    return np.concatenate(audio)


def run_golden(pipeline, audio, kwargs):
    from faster_whisper import vad as fw_vad

    options = fw_vad.VadOptions(max_speech_duration_s=30, min_silence_duration_ms=160)
    speech = fw_vad.get_speech_timestamps(audio, options)
    segments, info = pipeline.transcribe(audio, **kwargs)
    out = []
    for s in segments:
        seg = {
            "id": s.id, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text,
            "tokens": s.tokens, "avg_logprob": s.avg_logprob, "no_speech_prob": s.no_speech_prob,
            "compression_ratio": s.compression_ratio, "temperature": s.temperature,
        }
        if s.words is not None:
            seg["words"] = [[w.start, w.end, w.word, w.probability] for w in s.words]
        out.append(seg)
    return {
        "kwargs": kwargs,
        "language": info.language,
        "language_probability": info.language_probability,
        "speech": [[c["start"], c["end"]] for c in speech],
        "duration": info.duration,
        "segments": out,
    }


def golden(name):
    """tiny.en-style runs with `name`; language runs with whisper-base
    when its CTranslate2 folder is there."""
    pipeline, extra = load(name)
    runs = {}
    clip = read_wav(os.path.join(ROOT, "fixtures", "whisper", "librivox_dev00.wav"))
    runs["librivox_defaults"] = run_golden(pipeline, clip, {**extra})
    runs["librivox_greedy_timestamps"] = run_golden(
        pipeline, clip, {**extra, "beam_size": 1, "without_timestamps": False})
    if os.path.isdir(REALDEV):
        joined = realdev_joined(10)
        runs["realdev10_defaults"] = run_golden(pipeline, joined, {**extra})
        runs["realdev10_timestamps"] = run_golden(
            pipeline, joined, {**extra, "without_timestamps": False})
        runs["realdev10_words"] = run_golden(
            pipeline, joined, {**extra, "beam_size": 1, "word_timestamps": True})
    else:
        print(f"no {REALDEV}: the realdev runs are left out")
    for run in runs.values():
        run["model"] = name
    base = "whisper-base"
    if os.path.isdir(os.path.join(ROOT, "third_party", "whisper", base, "ct2")):
        pipeline, _ = load(base)
        # language detected on the joined speech; each chunk's own language
        runs["base_librivox_detect"] = run_golden(pipeline, clip, {"beam_size": 1})
        runs["base_librivox_multilingual"] = run_golden(
            pipeline, clip, {"beam_size": 1, "multilingual": True, "language": "en"})
        runs["base_librivox_detect"]["model"] = base
        runs["base_librivox_multilingual"]["model"] = base
    else:
        print(f"no {base} CTranslate2 folder: its runs are left out")
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    data = {
        "made_by": "python3 scripts/whisper/reference_batched.py " + name + " --golden",
        "vad": vad_golden(),
        "runs": runs,
    }
    with open(GOLDEN + ".part", "w") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    os.replace(GOLDEN + ".part", GOLDEN)
    print(f"wrote {GOLDEN} ({os.path.getsize(GOLDEN)} bytes)")


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: python3 scripts/whisper/reference_batched.py NAME [--golden | --hyp-out F]")
    if "--golden" in argv:
        golden(argv[0])
    else:
        measure(argv[0], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
