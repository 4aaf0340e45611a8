"""What the reference scripts share: reading realdev WAVs, src/asr/metrics.rs's
text normalisation and error counts, and the machine's name for reports."""
import os
import platform
import wave

import numpy as np

SR = 16000


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a):
        cur = [i + 1] + [0] * len(b)
        for j, y in enumerate(b):
            cur[j + 1] = min(prev[j] + (x != y), prev[j + 1] + 1, cur[j] + 1)
        prev = cur
    return prev[len(b)]


def normalize(text):
    """src/asr/metrics.rs's normalize."""
    text = text.lower().replace("-", " ")
    text = "".join(c for c in text if c.isalnum() or c == "_" or c == "'" or c.isspace())
    return " ".join(text.split())


class Counts:
    def __init__(self):
        self.char_edits = self.chars = self.word_edits = self.words = 0

    def add(self, reference, hypothesis):
        rw, hw = reference.split(), hypothesis.split()
        rc, hc = " ".join(rw), " ".join(hw)
        self.char_edits += edit_distance(rc, hc)
        self.chars += len(rc)
        self.word_edits += edit_distance(rw, hw)
        self.words += len(rw)

    def line(self):
        return (f"CER {100 * self.char_edits / max(self.chars, 1):6.2f} %, "
                f"WER {100 * self.word_edits / max(self.words, 1):6.2f} %")


def machine():
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} logical cores, {platform.system()}"
