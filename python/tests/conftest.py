"""Shared fixtures: the repository's paths, the `pulsed` binary the Python
results are compared with, and the models (opened once per session)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import pulsed

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
HELLO = FIXTURES / "asr" / "hello.wav"
HELDOUT = sorted((FIXTURES / "asr" / "heldout").glob("*.wav"))
LIBRIVOX = FIXTURES / "whisper" / "librivox_dev00.wav"


def find_realdev() -> Path:
    """realdev: `PULSED_REALDEV`, else `shared/realdev` beside this clone or
    beside a folder above it, else the workplace's `/work/shared/realdev`
    (so that a clean clone made anywhere, as CI's, still finds it)."""
    if os.environ.get("PULSED_REALDEV"):
        return Path(os.environ["PULSED_REALDEV"])
    for d in ROOT.parents:
        if (d / "shared" / "realdev" / "manifest.jsonl").is_file():
            return d / "shared" / "realdev"
    return Path("/work/shared/realdev")


REALDEV = find_realdev()


def pulsed_bin() -> str:
    """The command-line tool built from this tree: $PULSED_BIN, else the
    release build in $CARGO_TARGET_DIR or target/."""
    if os.environ.get("PULSED_BIN"):
        return os.environ["PULSED_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "release" / "pulsed"
    if not exe.is_file():
        pytest.fail(f"no {exe}: run `cargo build --release` (or set PULSED_BIN)")
    return str(exe)


def cli(*args: str) -> str:
    """Runs `pulsed ARGS` from the repository root; its standard output."""
    r = subprocess.run(
        [pulsed_bin(), *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if r.returncode not in (0, 1):
        raise AssertionError(f"pulsed {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return r.stdout


def cli_transcripts(model: str, files, *extra: str) -> dict:
    """`pulsed transcribe FILES --model M --format jsonl`, by file (absolute paths)."""
    out = cli("transcribe", *map(str, files), "--model", model, "--format", "jsonl", *extra)
    return {json.loads(l)["file"]: json.loads(l) for l in out.splitlines() if l.strip()}


def cli_live_finals(model, path, *extra: str) -> list:
    """The final lines `pulsed mic --input F [--model M]` prints."""
    model_arg = [] if model is None else ["--model", model]
    out = cli("mic", "--input", str(path), *model_arg, "--format", "jsonl", *extra)
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return [l["text"] for l in lines if l["type"] == "final"]


def whisper_tiny_available() -> bool:
    try:
        pulsed.Model("whisper-tiny.en", device="cpu")
        return True
    except pulsed.PulsedError:
        return False


@pytest.fixture(scope="session")
def ctc():
    return pulsed.Model("pulsed-en-ctc", device="cpu")


@pytest.fixture(scope="session")
def tiny():
    """whisper-tiny.en (scripts/test.sh fetches it into the model cache)."""
    try:
        return pulsed.Model("whisper-tiny.en", device="cpu")
    except pulsed.PulsedError as e:
        pytest.fail(f"whisper-tiny.en: {e} (pulsed fetch whisper-tiny.en)")


@pytest.fixture
def bad_wav(tmp_path):
    p = tmp_path / "bad.wav"
    p.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk")
    return p


def read_wav(path):
    """A 16-bit PCM WAV's samples (numpy int16, (n,) or (n, channels)) and rate."""
    import wave

    import numpy as np

    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        ch = w.getnchannels()
        return (x.reshape(-1, ch) if ch > 1 else x), w.getframerate()


def write_wav(path, samples, rate):
    """Writes int16 samples ((n,) or (n, channels)) as a PCM WAV."""
    import wave

    import numpy as np

    x = np.asarray(samples, dtype="<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1 if x.ndim == 1 else x.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(x.tobytes())
    return path


def copy(src, dst_dir, name=None):
    dst = Path(dst_dir) / (name or Path(src).name)
    shutil.copyfile(src, dst)
    return dst
