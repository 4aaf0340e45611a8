"""Offline transcription from Python equals `pulsed transcribe`: files,
numpy arrays of every dtype and rate, many files with a bad one, errors."""

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import pulsed
from conftest import HELDOUT, HELLO, LIBRIVOX, REALDEV, cli, cli_transcripts, read_wav, write_wav


def words_of(r):
    return [(w.text, round(w.start, 3), round(w.end, 3)) for w in r.words]


def cli_words(line):
    return [(w["word"], w["start"], w["end"]) for w in line["words"]]


def test_files_equal_the_cli_conformer(ctc):
    files = [HELLO, *HELDOUT[:4]]
    want = cli_transcripts("pulsed-en-ctc", files)
    for f in files:
        r = ctc.transcribe(f)
        line = want[str(f)]
        assert r.text == line["text"], f
        assert words_of(r) == cli_words(line), f
        assert round(r.duration, 3) == line["duration_s"]
        assert r.language is None and r.segments == []
        assert r.to_dict() == line


def test_file_equals_the_cli_whisper(tiny):
    want = cli_transcripts("whisper-tiny.en", [LIBRIVOX])[str(LIBRIVOX)]
    r = tiny.transcribe(str(LIBRIVOX))
    assert r.text == want["text"]
    assert r.text.startswith("He was not an ill")
    assert words_of(r) == cli_words(want)
    assert r.language == "en" == want["language"]
    assert [s.text for s in r.segments] == [s["text"] for s in want["segments"]]
    assert r.to_dict() == want


def test_arrays_of_any_dtype_equal_the_file(ctc):
    x, rate = read_wav(HELLO)
    assert x.dtype == np.int16 and rate == 16_000
    want = ctc.transcribe(HELLO)
    as_float = x.astype(np.float64) / 32768.0
    arrays = {
        "int16": x,
        "int32": x.astype(np.int32) << 16,
        "float32": as_float.astype(np.float32),
        "float64": as_float,
        "uint16": (x.astype(np.int32) + 32768).astype(np.uint16),
        "stereo": np.stack([x, x], axis=1),
    }
    for name, a in arrays.items():
        r = ctc.transcribe(a, sample_rate=16_000)
        assert r.text == want.text, name
        assert words_of(r) == words_of(want), name
        assert r.path is None
    # 8 bits keep too little for equal words; it must still read as speech
    r8 = ctc.transcribe((x >> 8).astype(np.int8))
    assert "anything" in r8.text


def test_other_rates_are_resampled_as_files_are(ctc, tmp_path):
    x, _ = read_wav(HELLO)
    for rate in (8_000, 44_100, 48_000):
        up = pulsed.resample(x, 16_000, rate)
        assert len(up) == round(len(x) * rate / 16_000)
        pcm = np.clip(np.round(up * 32768.0), -32768, 32767).astype(np.int16)
        path = write_wav(tmp_path / f"hello_{rate}.wav", pcm, rate)
        from_file = ctc.transcribe(path)
        from_array = ctc.transcribe(pcm, sample_rate=rate)
        assert from_array.text == from_file.text, rate
        assert words_of(from_array) == words_of(from_file), rate
        assert abs(from_array.duration - len(pcm) / rate) < 1e-9
    assert "anything can go wrong" in from_file.text


def test_many_files_with_a_bad_one(ctc, bad_wav):
    files = [str(f) for f in HELDOUT[:5]]
    files.insert(2, str(bad_wav))
    seen = []
    results = ctc.transcribe_many(files, jobs=2, progress=lambda r, d, t: seen.append((d, t)))
    assert [r.path for r in results] == files
    assert seen == [(i, len(files)) for i in range(1, len(files) + 1)]
    bad = results[2]
    assert not bad.ok and bad.text == ""
    assert str(bad_wav) in bad.error and "\n" not in bad.error
    assert bad.to_dict() == {"file": str(bad_wav), "error": bad.error}
    want = cli_transcripts("pulsed-en-ctc", files)
    for r in results[:2] + results[3:]:
        assert r.ok, r.error
        assert r.text == want[r.path]["text"]
        assert r.to_dict() == want[r.path]
    assert want[str(bad_wav)]["error"] == bad.error


def test_errors_are_pulsed_errors(ctc, bad_wav, tmp_path):
    with pytest.raises(pulsed.PulsedError, match="bad.wav"):
        ctc.transcribe(bad_wav)
    with pytest.raises(pulsed.PulsedError, match="missing.wav"):
        ctc.transcribe(tmp_path / "missing.wav")
    with pytest.raises(pulsed.PulsedError, match="NaN or infinity at sample 3"):
        ctc.transcribe(np.array([0.0, 0.1, 0.2, np.nan] + [0.0] * 100, dtype=np.float32))
    with pytest.raises(pulsed.PulsedError, match="shape"):
        ctc.transcribe(np.zeros((2, 3, 4), dtype=np.float32))
    with pytest.raises(pulsed.PulsedError, match="channels-first"):
        ctc.transcribe(np.zeros((2, 16_000), dtype=np.float32))
    with pytest.raises(pulsed.PulsedError, match="not a float or integer"):
        ctc.transcribe(np.array(["a", "b"]))
    with pytest.raises(pulsed.PulsedError, match="0 samples"):
        ctc.transcribe(np.zeros(0, dtype=np.float32))
    with pytest.raises(pulsed.PulsedError, match="sample rates must be positive"):
        ctc.transcribe(np.zeros(100, dtype=np.float32), sample_rate=0)
    with pytest.raises(pulsed.PulsedError, match="jobs must be at least 1"):
        ctc.transcribe_many([str(HELLO)], jobs=0)
    with pytest.raises(pulsed.PulsedError, match='device must be "auto", "cpu" or "cuda"'):
        pulsed.Model("pulsed-en-ctc", device="tpu")
    with pytest.raises(pulsed.PulsedError, match="whisper-nonexistent"):
        pulsed.Model("whisper-nonexistent")
    with pytest.raises(pulsed.PulsedError, match="no such model folder|not found"):
        pulsed.Model(tmp_path / "no-such-folder")
    with pytest.raises(pulsed.PulsedError, match="shipped model"):
        pulsed.Model("whisper-tiny.en", whole=True)
    with pytest.raises(TypeError):
        pulsed.Model("pulsed-en-ctc", no_such_option=1)
    assert issubclass(pulsed.PulsedError, RuntimeError)


def test_a_rust_panic_is_a_pulsed_error():
    with pytest.raises(pulsed.PulsedError, match="internal error: boom"):
        pulsed._pulsed._panic_for_tests("boom")


def test_the_gil_is_released_while_transcribing(tiny):
    """A Python thread keeps running while the engine works."""
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = count[0]
        tiny.transcribe(LIBRIVOX)
        during = count[0] - before
    finally:
        stop.set()
        t.join()
    assert during > 10_000, during


def test_properties(ctc, tiny):
    assert ctc.family == "conformer" and ctc.sample_rate == 16_000
    assert ctc.device == "CPU"
    assert tiny.family == "whisper" and "whisper-tiny.en" in tiny.describe()




@pytest.mark.skipif(
    not (REALDEV / "manifest.jsonl").is_file() or not os.environ.get("PULSED_SLOW"),
    reason="realdev (minutes): set PULSED_SLOW=1 where ../shared/realdev is reachable",
)
@pytest.mark.parametrize("model", os.environ.get("PULSED_SLOW_MODELS", "whisper-tiny.en").split(","))
def test_realdev_equals_the_cli(model):
    """Every realdev file: `Model.transcribe` and `transcribe_many` give
    `pulsed transcribe`'s lines (`default`: no --model, the default model)."""
    m = pulsed.Model(None if model == "default" else model, device="cpu")
    manifest = str(REALDEV / "manifest.jsonl")
    cli_model = [] if model == "default" else ["--model", model]
    out = cli("transcribe", "--manifest", manifest, *cli_model, "--device", "cpu", "--format", "jsonl", "-j", "2")
    want = {json.loads(l)["file"]: json.loads(l) for l in out.splitlines()}
    assert len(want) == 24
    for r in m.transcribe_many(list(want), jobs=2, progress=False):
        assert r.to_dict() == want[r.path], r.path
    for f, line in want.items():
        assert m.transcribe(f).text == line["text"], f
