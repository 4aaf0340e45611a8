"""Batch transcription on Ray: ``python -m pulsed.ray MANIFEST --out DIR``.

Reads a JSON-lines manifest (NeMo's ``audio_filepath``, or ``file``; plain
paths per line too; relative paths from the manifest's folder, as
``pulsed transcribe --manifest`` reads it), runs ``ray.data`` with
``map_batches`` over a pool of actors that each hold one ``pulsed.Model``,
and appends one JSON line per file to ``DIR/results.jsonl`` as batches
finish: ``pulsed transcribe --format jsonl``'s lines (``file``, ``text``,
``duration_s``, ``words``; Whisper's ``language``, ``segments``), or
``file`` and ``error`` for a file that failed. A rerun skips the files
the output already has a line for (and drops a line a killed run cut
short), so ``pulsed transcribe --resume -o DIR/results.jsonl`` and this
runner can carry on from each other.

``ray.init()`` with no address: a local runtime on this machine, or the
cluster ``ray start`` began here, or the one ``RAY_ADDRESS`` names. On a
cluster every node must see the audio files at the same paths, and the
model (a short name is looked up in each node's model cache; the default
model is fetched there on first use).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

import pulsed
from pulsed import _pulsed

RESULTS = "results.jsonl"


class Transcriber:
    """One actor of the pool: a ``pulsed.Model`` opened once, transcribing
    each batch of files on ``jobs`` threads."""

    def __init__(self, model: Optional[str], jobs: int, options: Dict[str, Any]) -> None:
        self.model = pulsed.Model(model, **options)
        self.jobs = jobs

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        files = [str(f) for f in batch["file"]]
        results = self.model.transcribe_many(files, jobs=self.jobs, progress=False)
        # compact, as `pulsed transcribe --format jsonl` writes its lines
        lines = [
            json.dumps(r.to_dict(), ensure_ascii=False, separators=(",", ":")) for r in results
        ]
        durations = [r.duration for r in results]
        return {
            "file": np.array(files, dtype=object),
            "line": np.array(lines, dtype=object),
            "duration": np.array(durations, dtype=np.float64),
            "failed": np.array([not r.ok for r in results], dtype=bool),
        }


def run(
    manifest: str,
    out: str,
    model: Optional[str] = None,
    workers: int = 1,
    gpus_per_worker: float = 0.0,
    batch_size: int = 4,
    jobs_per_worker: int = 1,
    address: Optional[str] = None,
    **options: Any,
) -> Dict[str, Any]:
    """Transcribes the manifest's files not yet in ``out/results.jsonl`` on
    ``workers`` actors (each ``jobs_per_worker`` CPU threads and
    ``gpus_per_worker`` GPUs), ``batch_size`` files per call; ``options``
    go to ``pulsed.Model`` (``device``, ``language``, ``beam``, ...).
    Returns counts: files, skipped (done before), transcribed, failed,
    audio_s, wall_s."""
    import ray

    if workers < 1 or batch_size < 1 or jobs_per_worker < 1:
        raise pulsed.PulsedError("workers, batch_size and jobs_per_worker must be at least 1")
    files = _pulsed.read_manifest(manifest)
    os.makedirs(out, exist_ok=True)
    results_path = os.path.join(out, RESULTS)
    done = set(_pulsed.resume_jsonl(results_path))
    todo = [f for f in files if f not in done]
    summary: Dict[str, Any] = {
        "files": len(files),
        "skipped": len(files) - len(todo),
        "transcribed": 0,
        "failed": 0,
        "audio_s": 0.0,
        "wall_s": 0.0,
    }
    if not todo:
        return summary
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    start = time.monotonic()
    items = ray.data.from_items([{"file": f} for f in todo], override_num_blocks=min(len(todo), 64))
    ds = items.map_batches(
        Transcriber,
        fn_constructor_kwargs={"model": model, "jobs": jobs_per_worker, "options": options},
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=jobs_per_worker,
        num_gpus=gpus_per_worker,
    )
    with open(results_path, "a", encoding="utf-8") as f:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for line, duration, failed in zip(batch["line"], batch["duration"], batch["failed"]):
                f.write(line + "\n")
                summary["failed" if failed else "transcribed"] += 1
                summary["audio_s"] += float(duration)
            f.flush()
    summary["wall_s"] = time.monotonic() - start
    return summary


def _pulsed_reason(error: BaseException) -> Optional[str]:
    """The one-line reason of a PulsedError an actor raised (a model that
    cannot be opened), which Ray hands on wrapped with its traceback."""
    e: Optional[BaseException] = error
    while e is not None:
        if isinstance(e, pulsed.PulsedError):
            return str(e)
        m = re.search(r"PulsedError: (.+)", str(e))
        if m:
            return m.group(1).strip()
        e = e.__cause__ or getattr(e, "cause", None)
    return None


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pulsed.ray",
        description="Transcribe a manifest's audio files on Ray (a local runtime, or the "
        "cluster `ray start` began / RAY_ADDRESS names); results in OUT/results.jsonl, "
        "resumed on a rerun.",
    )
    p.add_argument("manifest", help="JSON lines with audio_filepath or file (or one path per line)")
    p.add_argument("--out", required=True, help="folder for results.jsonl")
    p.add_argument("--model", help="short name or folder (default: pulsed's default model)")
    p.add_argument("--workers", type=int, default=1, help="actors, one model each (default 1)")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per actor (default 0)")
    p.add_argument("--batch-size", type=int, default=4, help="files per call (default 4)")
    p.add_argument("--jobs-per-worker", type=int, default=1, help="threads (CPUs) per actor (default 1)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    p.add_argument("--language", help="Whisper: spoken language code")
    p.add_argument("--beam", type=int, help="beam width (as pulsed transcribe --beam)")
    p.add_argument("--address", help="Ray address (default: ray.init()'s choice, RAY_ADDRESS)")
    a = p.parse_args(argv)
    options: Dict[str, Any] = {"device": a.device, "precision": a.precision}
    if a.language:
        options["language"] = a.language
    if a.beam is not None:
        options["beam"] = a.beam
    try:
        s = run(
            a.manifest,
            a.out,
            model=a.model,
            workers=a.workers,
            gpus_per_worker=a.gpus_per_worker,
            batch_size=a.batch_size,
            jobs_per_worker=a.jobs_per_worker,
            address=a.address,
            **options,
        )
    except pulsed.PulsedError as e:
        print(f"pulsed.ray: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - Ray's wrapping of an actor's error
        reason = _pulsed_reason(e)
        if reason is None:
            raise
        print(f"pulsed.ray: {reason}", file=sys.stderr)
        return 2
    speed = s["audio_s"] / s["wall_s"] if s["wall_s"] > 0 else 0.0
    print(
        f"pulsed.ray: {s['files']} files, {s['skipped']} done before; {s['transcribed']} "
        f"transcribed, {s['failed']} failed; {s['audio_s']:.1f} s of audio in "
        f"{s['wall_s']:.1f} s ({speed:.1f} audio s/s) -> {os.path.join(a.out, RESULTS)}",
        file=sys.stderr,
    )
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
