#!/usr/bin/env python3
"""Candidate rules against Whisper's made-up text on silence (issue 49),
scored offline on one ungated decoding: each rule only drops segments, so
one run of the decoder serves them all.

usage: python3 scripts/whisper/silence_rules.py MANIFEST SEGMENTS VAD [-v]

  MANIFEST  jsonl with `file` (relative to it) and `text` ("" for the
            non-speech set of scripts/nonspeech_set.py)
  SEGMENTS  pulsed transcribe --manifest MANIFEST --format jsonl
            --word-timestamps false --no-speech-gate --order input ...
  VAD       pulsed vad --probs FILES (the manifest's files, same paths)

Prints, per rule, the WER (the hypotheses' word count when every reference
is empty) and how many files it changed; -v lists the dropped segments.
Text is normalised as `pulsed eval` does (lower case, hyphens as spaces,
punctuation but apostrophes dropped). The speech segments follow silero's
`get_speech_timestamps` (no maximum length), as `pulsed::vad::Segmenter`.
"""
import json
import os
import sys

RATE = 16_000
CHUNK = 512


def normalize(text):
    text = text.lower().replace("-", " ")
    kept = "".join(c for c in text if c.isalnum() or c in "_'" or c.isspace())
    return " ".join(kept.split())


def edits(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a):
        cur = [i + 1] + [0] * len(b)
        for j, y in enumerate(b):
            cur[j + 1] = min(prev[j] + (x != y), prev[j + 1] + 1, cur[j] + 1)
        prev = cur
    return prev[-1]


def speech(probs, samples, thr=0.5, min_speech_ms=250, min_silence_ms=2000, pad_ms=400):
    """Padded speech spans in seconds (the shared-silence rule of the
    padding is left out: it moves no span's outer edge)."""
    neg = max(thr - 0.15, 0.01)
    min_speech = RATE * min_speech_ms / 1000
    min_silence = RATE * min_silence_ms / 1000
    out, start, temp_end = [], None, 0
    for i, p in enumerate(probs):
        cur = i * CHUNK
        if p >= thr and temp_end:
            temp_end = 0
        if start is None:
            if p >= thr:
                start = cur
            continue
        if p < neg:
            if not temp_end:
                temp_end = cur
            if cur - temp_end < min_silence:
                continue
            if temp_end - start > min_speech:
                out.append((start, temp_end))
            start, temp_end = None, 0
    if start is not None and samples - start > min_speech:
        out.append((start, samples))
    pad = RATE * pad_ms / 1000
    return [(max(0, a - pad) / RATE, min(samples, b + pad) / RATE) for a, b in out]


def rules():
    """(name, keep(segment, spans_of)) where spans_of(**vad options) gives
    the recording's speech spans."""
    out = [("Whisper alone (no gate)", lambda g, sp: True)]
    for t in (0.6, 0.7, 0.8, 0.9):
        out.append((f"no_speech_prob > {t} dropped", lambda g, sp, t=t: g["no_speech_prob"] <= t))
    out.append(("VAD: recording without speech", lambda g, sp: bool(sp())))
    # and, in a recording with speech (0.5, 250 ms), a segment over none of
    # the speech found at this threshold and shortest speech, its span
    # widened by `tol` seconds on each side
    for thr in (0.5, 0.35, 0.2, 0.15, 0.1):
        for ms in (250, 0):
            for tol in (0.0, 0.5, 1.0):
                def keep(g, sp, thr=thr, ms=ms, tol=tol):
                    spans = sp(thr=thr, min_speech_ms=ms)
                    return bool(sp()) and any(
                        g["start"] - tol < b and a < g["end"] + tol for a, b in spans)
                name = f"VAD: and segment over no speech (thr {thr}, min {ms} ms, +-{tol} s)"
                out.append((name, keep))
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    if len(args) != 3:
        sys.exit(__doc__)
    manifest, segments, vad = args
    base = os.path.dirname(manifest)
    with open(manifest) as f:
        refs = {os.path.normpath(os.path.join(base, j["file"])): j["text"]
                for j in map(json.loads, f)}
    with open(vad) as f:
        probs = {os.path.normpath(j["file"]): j["probs"] for j in map(json.loads, f)}
    with open(segments) as f:
        runs = [j for j in map(json.loads, f) if "segments" in j]
    empty = all(not normalize(t) for t in refs.values())
    for name, keep in rules():
        errors = words = out_words = changed = 0
        for j in runs:
            path = os.path.normpath(j["file"])
            samples = int(round(j["duration_s"] * RATE))
            cache = {}

            def spans_of(**o):
                key = tuple(sorted(o.items()))
                if key not in cache:
                    cache[key] = speech(probs[path], samples, **o)
                return cache[key]

            kept = [g for g in j["segments"] if keep(g, spans_of)]
            hyp = normalize(" ".join(g["text"] for g in kept)).split()
            ref = normalize(refs[path]).split()
            errors += edits(ref, hyp)
            words += len(ref)
            out_words += len(hyp)
            if len(kept) != len(j["segments"]):
                changed += 1
                if "-v" in sys.argv:
                    for g in j["segments"]:
                        if g not in kept:
                            print(f"    {os.path.basename(path)} {g['start']}-{g['end']} "
                                  f"nsp {g['no_speech_prob']} lp {g['avg_logprob']}: {g['text']}")
        score = f"{out_words} words" if empty else f"WER {100 * errors / max(1, words):.2f} %"
        print(f"{name:60s} {score:>14s}  {changed} files changed")


if __name__ == "__main__":
    main()
