"""Speech synthesis with libespeak-ng through ctypes (one engine per worker
process, no process start per utterance), resampled 22050 -> 16000 Hz.

Environment: ESPEAK_LIB (path of libespeak-ng.so.1), ESPEAK_DATA (folder that
holds espeak-ng-data). Defaults are the Debian locations.
"""
import ctypes
import os
import random

import numpy as np

ACCENTS = ["en-us", "en", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp",
           "en-gb-x-gbcwmd", "en-029", "en-us-nyc"]
TRAIN_VARIANTS = ["", "m1", "m2", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f5",
                  "klatt", "klatt2", "klatt3", "Alex", "Alicia", "Andy", "Annie", "adam",
                  "anika", "aunty", "belinda", "benjamin", "boris", "caleb", "david", "ed",
                  "edward", "grandma", "grandpa", "iven", "john", "linda", "max", "michael",
                  "norbert", "paul", "rob", "robert", "steph", "travis", "victor", "zac",
                  "quincy", "shelby", "Mr serious", "Lee", "Hugo", "Gene", "Jacky", "Mike"]
# never used for training: the held-out voice variants
HELDOUT_VARIANTS = ["m3", "f4"]

_engine = None
_chunks = []


def voice_name(accent, variant):
    return accent if not variant else f"{accent}+{variant}"


class Espeak:
    def __init__(self):
        libpath = os.environ.get("ESPEAK_LIB", "/usr/lib/x86_64-linux-gnu/libespeak-ng.so.1")
        data = os.environ.get("ESPEAK_DATA", "/usr/lib/x86_64-linux-gnu")
        self.lib = ctypes.CDLL(libpath)
        CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

        def cb(wav, n, events):
            if n > 0 and wav:
                _chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0

        self._cb = CB(cb)
        self.lib.espeak_Initialize.restype = ctypes.c_int
        sr = self.lib.espeak_Initialize(2, 0, data.encode(), 0)  # AUDIO_OUTPUT_SYNCHRONOUS
        if sr <= 0:
            raise RuntimeError(f"espeak_Initialize failed ({sr}) data={data}")
        self.sr = sr
        self.lib.espeak_SetSynthCallback(self._cb)
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                          ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]

    def synth(self, text, voice, rate=175, pitch=50, prange=50, wordgap=0):
        _chunks.clear()
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise RuntimeError(f"unknown voice {voice}")
        self.lib.espeak_SetParameter(1, int(rate), 0)    # espeakRATE
        self.lib.espeak_SetParameter(2, 100, 0)          # espeakVOLUME
        self.lib.espeak_SetParameter(3, int(pitch), 0)   # espeakPITCH
        self.lib.espeak_SetParameter(4, int(prange), 0)  # espeakRANGE
        self.lib.espeak_SetParameter(7, int(wordgap), 0)  # espeakWORDGAP (10 ms units)
        b = text.encode() + b"\0"
        self.lib.espeak_Synth(b, len(b), 0, 1, 0, 1, None, None)  # POS_CHARACTER, espeakCHARS_UTF8
        self.lib.espeak_Synchronize()
        if not _chunks:
            return np.zeros(0, np.int16)
        return np.concatenate(_chunks)


def _resample(x16, sr):
    import torch
    torch.set_num_threads(1)
    import torchaudio.functional as AF
    x = torch.from_numpy(x16.astype(np.float32) / 32768.0)
    y = AF.resample(x, sr, 16000)
    return np.clip(np.round(y.numpy() * 32767.0), -32768, 32767).astype(np.int16)


def _init_worker():
    global _engine
    _engine = Espeak()


def _job(item):
    text, voice, rate, pitch, prange, wordgap = item
    return _engine.synth(text, voice, rate, pitch, prange, wordgap)


def _job_16k(item):
    return _resample(_job(item), _engine.sr)


def random_params(rng: random.Random, variants):
    accent = rng.choice(ACCENTS)
    variant = rng.choice(variants)
    rate = int(rng.triangular(110, 195, 160))
    pitch = rng.randint(20, 80)
    prange = rng.randint(15, 90)
    wordgap = 0 if rng.random() < 0.8 else rng.randint(1, 3)
    return voice_name(accent, variant), rate, pitch, prange, wordgap


def synth_many(items, procs=None, chunksize=16, resample=True):
    """items: list of (text, voice, rate, pitch, range, wordgap). Returns list of int16
    arrays, at 16 kHz (resample=True) or at espeak's 22050 Hz (resample=False; the
    training data builder resamples those in batches on the GPU)."""
    import multiprocessing as mp
    procs = procs or os.cpu_count()
    # ESPEAK_LD_PATH: library folders for a libespeak-ng unpacked outside / (the GPU
    # machine). Only the synthesis workers, started fresh ("spawn"), get it on their
    # LD_LIBRARY_PATH, so the parent (torch, CUDA) never loads those libraries.
    extra = os.environ.get("ESPEAK_LD_PATH")
    old = os.environ.get("LD_LIBRARY_PATH")
    if extra:
        os.environ["LD_LIBRARY_PATH"] = extra + ((":" + old) if old else "")
    try:
        ctx = mp.get_context("spawn" if extra else "fork")
        with ctx.Pool(procs, initializer=_init_worker) as pool:
            return pool.map(_job_16k if resample else _job, items, chunksize=chunksize)
    finally:
        if extra:
            if old is None:
                os.environ.pop("LD_LIBRARY_PATH", None)
            else:
                os.environ["LD_LIBRARY_PATH"] = old


def write_wav(path, x16):
    import wave
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.asarray(x16, np.int16).tobytes())


def read_wav(path):
    import wave
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)
