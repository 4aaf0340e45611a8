#!/usr/bin/env python3
"""A non-speech evaluation set: recordings in which nobody speaks, so that
any word a model prints is made up (issue 49, Whisper on silence).

usage: python3 scripts/nonspeech_set.py OUT_DIR [--padded SPEECH_MANIFEST...]

Writes OUT_DIR/*.wav (16 kHz mono 16-bit) and OUT_DIR/manifest.jsonl
(`file`, `text` = "", `kind`, `seconds`), for `pulsed eval` (whose word
count of the hypotheses is then the number of made-up words) or `pulsed
transcribe --manifest`. Standard library only, seeded: the same files on
every run. 30 files of 2-20 s: digital silence, dither, white, pink and
brown noise at several levels, hum, tones, a chirp, beeps, DTMF, clicks in
silence and in noise, noise bursts, a DC offset.

With --padded, also OUT_DIR/padded/: 10 recordings per speech manifest
(16 kHz mono WAVs) of its clips with 20-40 s of silence or noise before,
after or between them, the clips' texts joined as the reference: the
long quiet stretches Whisper writes words into within a recording that
does speak, and the speech a gate must not lose.
"""
import json
import math
import os
import random
import struct
import sys
import wave

RATE = 16_000


def clip16(x):
    return max(-32768, min(32767, int(round(x))))


def write(path, samples):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(b"".join(struct.pack("<h", clip16(s)) for s in samples))


def silence(secs):
    return [0.0] * int(secs * RATE)


def white(rng, secs, sigma):
    return [rng.gauss(0.0, sigma) for _ in range(int(secs * RATE))]


def pink(rng, secs, sigma):
    # Paul Kellet's economy filter over white noise, rescaled to `sigma`
    b0 = b1 = b2 = 0.0
    out = []
    for _ in range(int(secs * RATE)):
        w = rng.gauss(0.0, 1.0)
        b0 = 0.99765 * b0 + w * 0.0990460
        b1 = 0.96300 * b1 + w * 0.2965164
        b2 = 0.57000 * b2 + w * 1.0526913
        out.append(b0 + b1 + b2 + w * 0.1848)
    return rescale(out, sigma)


def brown(rng, secs, sigma):
    # leaky integration of white noise: a rumble
    y = 0.0
    out = []
    for _ in range(int(secs * RATE)):
        y = 0.995 * y + rng.gauss(0.0, 1.0)
        out.append(y)
    return rescale(out, sigma)


def rescale(xs, sigma):
    rms = math.sqrt(sum(x * x for x in xs) / max(1, len(xs))) or 1.0
    return [x * sigma / rms for x in xs]


def tone(secs, freq, amp, phase=0.0):
    return [amp * math.sin(2 * math.pi * freq * i / RATE + phase) for i in range(int(secs * RATE))]


def hum(secs, base, amp):
    # mains hum: the fundamental and its odd harmonics
    n = int(secs * RATE)
    return [
        amp * sum(math.sin(2 * math.pi * base * k * i / RATE) / k for k in (1, 3, 5, 7))
        for i in range(n)
    ]


def chirp(secs, f0, f1, amp):
    n = int(secs * RATE)
    out = []
    for i in range(n):
        t = i / RATE
        f = f0 + (f1 - f0) * t / (2 * secs)
        out.append(amp * math.sin(2 * math.pi * f * t))
    return out


def add(a, b):
    return [x + y for x, y in zip(a, b)]


def beeps(secs, freq, amp, every, length):
    out = silence(secs)
    n_len = int(length * RATE)
    start = int(0.5 * RATE)
    while start + n_len <= len(out):
        for j in range(n_len):
            # 5 ms ramps, as a beep tone has
            ramp = min(1.0, j / 80, (n_len - j) / 80)
            out[start + j] = amp * ramp * math.sin(2 * math.pi * freq * j / RATE)
        start += int(every * RATE)
    return out


def dtmf(digits, amp):
    rows = {"1": 697, "2": 697, "3": 697, "4": 770, "5": 770, "6": 770,
            "7": 852, "8": 852, "9": 852, "*": 941, "0": 941, "#": 941}
    cols = {"1": 1209, "2": 1336, "3": 1477, "4": 1209, "5": 1336, "6": 1477,
            "7": 1209, "8": 1336, "9": 1477, "*": 1209, "0": 1336, "#": 1477}
    out = silence(0.5)
    for d in digits:
        n = int(0.12 * RATE)
        out += [amp * (math.sin(2 * math.pi * rows[d] * i / RATE)
                       + math.sin(2 * math.pi * cols[d] * i / RATE)) / 2 for i in range(n)]
        out += silence(0.15)
    return out + silence(0.5)


def clicks(base, at_s, amp):
    out = list(base)
    for t in at_s:
        i = int(t * RATE)
        # a click: a few samples of a decaying impulse
        for j in range(24):
            if i + j < len(out):
                out[i + j] += amp * (1 if j % 2 == 0 else -1) * math.exp(-j / 4)
    return out


def bursts(rng, secs, sigma, every, length):
    out = silence(secs)
    n_len = int(length * RATE)
    start = int(0.7 * RATE)
    while start + n_len <= len(out):
        for j in range(n_len):
            env = math.exp(-5 * j / n_len)
            out[start + j] = rng.gauss(0.0, sigma) * env
        start += int(every * RATE)
    return out


def recordings(rng):
    """(name, kind, samples) of every file, in order."""
    yield "silence_02s", "silence", silence(2)
    yield "silence_05s", "silence", silence(5)
    yield "silence_10s", "silence", silence(10)
    yield "silence_20s", "silence", silence(20)
    yield "dither_08s", "silence", [float(rng.choice((-1, 0, 0, 1))) for _ in range(8 * RATE)]
    yield "dc_offset_06s", "silence", [200.0] * (6 * RATE)
    for secs, sigma in ((5, 30), (7, 100), (5, 300), (12, 300), (4, 1000), (9, 3000), (3, 8000)):
        yield f"white_s{sigma}_{secs:02d}s", "noise", white(rng, secs, sigma)
    yield "pink_s300_06s", "noise", pink(rng, 6, 300)
    yield "pink_s2000_15s", "noise", pink(rng, 15, 2000)
    yield "brown_s1500_10s", "noise", brown(rng, 10, 1500)
    yield "hum50_a800_08s", "tone", hum(8, 50, 800)
    yield "hum60_a300_noise_05s", "tone", add(hum(5, 60, 300), white(rng, 5, 100))
    yield "tone440_a3000_03s", "tone", tone(3, 440, 3000)
    yield "tone1k_a8000_06s", "tone", tone(6, 1000, 8000)
    yield "tone250_a200_10s", "tone", tone(10, 250, 200)
    yield "chirp_100_4k_08s", "tone", chirp(8, 100, 4000, 4000)
    yield "beeps1k_20s", "tone", beeps(20, 1000, 6000, 1.0, 0.2)
    yield "dtmf_digits", "tone", dtmf("5551234#", 6000)
    yield "click_silence_05s", "click", clicks(silence(5), [2.3], 12000)
    yield "click_silence_12s", "click", clicks(silence(12), [9.1], 20000)
    yield "clicks_silence_08s", "click", clicks(silence(8), [0.8, 2.0, 3.7, 5.1, 6.9], 15000)
    yield "clicks_noise_10s", "click", clicks(white(rng, 10, 150), [1.5, 4.2, 8.8], 16000)
    yield "bursts_noise_14s", "noise", bursts(rng, 14, 4000, 2.0, 0.3)
    yield "fan_18s", "noise", add(brown(rng, 18, 600), add(hum(18, 50, 200), white(rng, 18, 200)))


def read_clip(path):
    with wave.open(path, "rb") as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
            sys.exit(f"{path}: not 16 kHz mono 16-bit")
        raw = w.readframes(w.getnframes())
    return [float(x) for x in struct.unpack(f"<{len(raw) // 2}h", raw)]


def padded(rng, manifest, tag):
    """(name, text, samples): clips of `manifest` with long quiet stretches."""
    base = os.path.dirname(manifest)
    with open(manifest) as f:
        items = [json.loads(line) for line in f if line.strip()]
    picks = rng.sample(items, 15)
    clip = [(read_clip(os.path.join(base, it.get("file") or it["audio"])), it["text"]) for it in picks]
    quiet = [
        lambda s: silence(s),
        lambda s: white(rng, s, 100),
        lambda s: pink(rng, s, 300),
        lambda s: add(hum(s, 50, 300), white(rng, s, 60)),
    ]
    k = 0
    for i in range(10):
        q = quiet[i % len(quiet)]
        gap = 20 + 5 * (i % 5)
        if i % 3 == 0:  # speech, then quiet to the end
            (a, ta), k = clip[k], k + 1
            yield f"{tag}_{i:02d}_after", ta, a + q(gap)
        elif i % 3 == 1:  # quiet, then speech
            (a, ta), k = clip[k], k + 1
            yield f"{tag}_{i:02d}_before", ta, q(gap) + a + q(1)
        else:  # speech, a long pause, speech
            (a, ta), (b, tb), k = clip[k], clip[k + 1], k + 2
            yield f"{tag}_{i:02d}_between", f"{ta} {tb}", a + q(gap) + b


def main():
    args = sys.argv[1:]
    speech = []
    if "--padded" in args:
        at = args.index("--padded")
        speech = args[at + 1:]
        args = args[:at]
    if len(args) != 1 or (("--padded" in sys.argv) and not speech):
        sys.exit(__doc__)
    out_dir = args[0]
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(49)
    lines = []
    for name, kind, samples in recordings(rng):
        write(os.path.join(out_dir, name + ".wav"), samples)
        lines.append({"file": name + ".wav", "text": "", "kind": kind,
                      "seconds": round(len(samples) / RATE, 3)})
    with open(os.path.join(out_dir, "manifest.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"{len(lines)} files in {out_dir}", file=sys.stderr)
    if speech:
        pad_dir = os.path.join(out_dir, "padded")
        os.makedirs(pad_dir, exist_ok=True)
        lines = []
        for n, manifest in enumerate(speech):
            for name, text, samples in padded(rng, manifest, f"m{n}"):
                write(os.path.join(pad_dir, name + ".wav"), samples)
                lines.append({"file": name + ".wav", "text": text,
                              "seconds": round(len(samples) / RATE, 3)})
        with open(os.path.join(pad_dir, "manifest.jsonl"), "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        print(f"{len(lines)} files in {pad_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
