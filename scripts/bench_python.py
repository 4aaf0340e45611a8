"""Throughput of the Python package against the command line, side by
side in one run: `pulsed transcribe -j N`, `Model.transcribe_many(jobs=N)`
and `python -m pulsed.ray`'s runner with 1 and 2 workers, on the same
files, in audio seconds per wall second.

    python scripts/bench_python.py MANIFEST [--model M] [--rounds R]

Each figure is end to end (process or call, model opening included; Ray's
runtime started beforehand, as on a cluster, and only for the Ray runs);
the CLI's own figure (its pool alone, after the model opened) is given
beside it."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pulsed
import pulsed.ray as pulsed_ray

ROOT = Path(__file__).resolve().parents[1]


def audio_s(files):
    import wave

    total = 0.0
    for f in files:
        with wave.open(f) as w:
            total += w.getnframes() / w.getframerate()
    return total


def cli(exe, manifest, model, jobs):
    t = time.monotonic()
    r = subprocess.run(
        [exe, "transcribe", "--manifest", manifest, "--model", model, "--device", "cpu",
         "--format", "jsonl", "-j", str(jobs)],
        capture_output=True, text=True, check=True,
    )
    wall = time.monotonic() - t
    own = re.search(r"\(([\d.]+) audio s/s", r.stderr)
    return wall, float(own.group(1)) if own else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("manifest")
    p.add_argument("--model", default="whisper-tiny.en")
    p.add_argument("--rounds", type=int, default=1)
    a = p.parse_args()
    exe = os.environ.get("PULSED_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "pulsed"
    )
    files = pulsed._pulsed.read_manifest(a.manifest)
    total = audio_s(files)
    import ray

    print(f"{len(files)} files, {total:.1f} s of audio, model {a.model}, {os.cpu_count()} cores")
    rows = []
    for rnd in range(a.rounds):
        for jobs in (1, 2):
            wall, own = cli(exe, a.manifest, a.model, jobs)
            rows.append((rnd, f"pulsed transcribe -j {jobs}", total / wall, own))
            t = time.monotonic()
            m = pulsed.Model(a.model, device="cpu")
            res = m.transcribe_many(files, jobs=jobs, progress=False)
            assert all(r.ok for r in res)
            rows.append((rnd, f"Model.transcribe_many(jobs={jobs})", total / (time.monotonic() - t), None))
            del m
        # Ray's runtime (its daemons take CPU too) only while Ray runs
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        for workers, per in ((1, 1), (2, 1), (1, 2)):
            with tempfile.TemporaryDirectory() as out:
                t = time.monotonic()
                s = pulsed_ray.run(a.manifest, out, model=a.model, workers=workers,
                                   jobs_per_worker=per, device="cpu")
                assert s["transcribed"] == len(files), s
                rows.append((rnd, f"pulsed.ray --workers {workers} --jobs-per-worker {per}",
                             total / (time.monotonic() - t), None))
        ray.shutdown()
        for r in rows[-7:]:
            own = f"  (its own figure: {r[3]:.1f})" if r[3] else ""
            print(f"round {r[0]}: {r[1]:<45} {r[2]:6.2f} audio s/s{own}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
