"""The Ray runner on a local runtime with 2 workers: one row per file
equal to `pulsed transcribe`'s line, a bad file one error row, a rerun
resumes. On realdev too where it is reachable (not in a clean clone)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

import pulsed
import pulsed.ray as pulsed_ray
from conftest import HELDOUT, HELLO, LIBRIVOX, REALDEV, cli_transcripts



@pytest.fixture(scope="module")
def local_ray():
    # a runtime of its own, whatever cluster this machine may be part of
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def rows_of(out):
    lines = (Path(out) / "results.jsonl").read_text().splitlines()
    return [json.loads(l) for l in lines]


def write_manifest(path, files):
    """A manifest mixing NeMo's `audio_filepath` and `file`, relative paths too."""
    with open(path, "w") as m:
        for i, f in enumerate(files):
            key = "audio_filepath" if i % 2 else "file"
            m.write(json.dumps({key: str(f), "duration": 1.0}) + "\n")


def test_two_workers_equal_the_cli_and_resume(local_ray, tmp_path, bad_wav):
    files = [HELLO, *HELDOUT[:5], LIBRIVOX]
    manifest = tmp_path / "manifest.jsonl"
    write_manifest(manifest, files[:3] + [Path("bad.wav")] + files[3:])
    names = pulsed._pulsed.read_manifest(str(manifest))
    assert names[3] == str(bad_wav)
    out = tmp_path / "out"
    s = pulsed_ray.run(str(manifest), str(out), model="pulsed-en-ctc", workers=2, batch_size=2, device="cpu")
    assert (s["files"], s["skipped"], s["transcribed"], s["failed"]) == (8, 0, 7, 1)
    rows = rows_of(out)
    want = cli_transcripts("pulsed-en-ctc", [], "--manifest", str(manifest))
    assert sorted(r["file"] for r in rows) == sorted(names) == sorted(want)
    for r in rows:
        assert r == want[r["file"]], r["file"]
    assert [r for r in rows if "error" in r] == [want[str(bad_wav)]]

    # a rerun has nothing to do
    again = pulsed_ray.run(str(manifest), str(out), model="pulsed-en-ctc", workers=2, device="cpu")
    assert (again["skipped"], again["transcribed"], again["failed"]) == (8, 0, 0)
    assert rows_of(out) == rows

    # a killed run: three lines lost and one cut short; `python -m
    # pulsed.ray` starts its own local runtime and redoes those four
    text = (out / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(text[:4]) + text[4][:20])
    r = subprocess.run(
        [sys.executable, "-m", "pulsed.ray", str(manifest), "--out", str(out),
         "--model", "pulsed-en-ctc", "--workers", "2", "--device", "cpu"],
        capture_output=True, text=True, env={**os.environ, "RAY_ADDRESS": ""},
    )
    assert r.returncode in (0, 1), r.stderr
    assert "8 files, 4 done before" in r.stderr, r.stderr
    resumed = rows_of(out)
    assert len(resumed) == 8
    assert sorted(map(json.dumps, resumed)) == sorted(map(json.dumps, rows))


@pytest.mark.skipif(not (REALDEV / "manifest.jsonl").is_file(), reason=f"no realdev at {REALDEV}")
def test_realdev_on_two_workers_equals_the_cli(local_ray, tmp_path, tiny):
    manifest = REALDEV / "manifest.jsonl"
    want = cli_transcripts("whisper-tiny.en", [], "--manifest", str(manifest), "-j", "2")
    assert len(want) == 24
    s = pulsed_ray.run(str(manifest), str(tmp_path), model="whisper-tiny.en", workers=2, device="cpu")
    assert (s["transcribed"], s["failed"]) == (24, 0)
    for r in rows_of(tmp_path):
        assert r["text"] == want[r["file"]]["text"], r["file"]
        assert r == want[r["file"]], r["file"]
    # and the Python API's pool on the same files
    for r in tiny.transcribe_many(list(want), jobs=2, progress=False):
        assert r.to_dict() == want[r.path], r.path


def test_a_model_that_cannot_open_is_a_one_line_reason(local_ray, tmp_path):
    manifest = tmp_path / "m.jsonl"
    write_manifest(manifest, [HELLO])
    with pytest.raises(Exception) as e:
        pulsed_ray.run(str(manifest), str(tmp_path / "out"), model="whisper-nonexistent")
    reason = pulsed_ray._pulsed_reason(e.value)
    assert reason.startswith("model `whisper-nonexistent` is not in the model cache"), reason
    assert "\n" not in reason
