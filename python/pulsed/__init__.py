"""pulsed: streaming speech recognition from Python.

A thin layer over the Rust library (``pulsed::asr::Transcriber``): the same
models, short names, default model and results as the ``pulsed`` command.

    import pulsed
    model = pulsed.Model("whisper-tiny.en")          # or None: the default model
    r = model.transcribe("speech.wav")               # or a numpy array
    print(r.text, [(w.text, w.start, w.end) for w in r.words])

See docs/python.md for live sessions, many files and the Ray runner.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, List, Optional, Union

from . import _pulsed
from ._pulsed import (
    DEFAULT_LANGUAGE,
    DEFAULT_MODEL,
    SHIPPED_MODEL,
    LiveEvent,
    PulsedError,
    Segment,
    Transcription,
    Word,
    set_strict,
)

__all__ = [
    "DEFAULT_LANGUAGE",
    "DEFAULT_MODEL",
    "SHIPPED_MODEL",
    "LiveEvent",
    "Model",
    "PulsedError",
    "Segment",
    "Stream",
    "Transcription",
    "Word",
    "resample",
    "set_strict",
]

PathLike = Union[str, "os.PathLike[str]"]

# More channels than this in an (n, channels) array is taken for a
# channels-first array passed by mistake.
_MAX_CHANNELS = 64


def _samples(audio: Any) -> bytes:
    """Mono float32 little-endian bytes of an array: any float or integer
    dtype (integers scaled to [-1, 1) as a WAV's are: x / 2^(bits-1),
    unsigned ones centred first), 1-D or (n, channels) averaged to mono."""
    import numpy as np

    a = np.asarray(audio)
    if a.dtype.kind not in "fiu":
        raise PulsedError(f"samples: dtype {a.dtype} is not a float or integer type")
    if a.ndim == 2:
        if a.shape[1] > _MAX_CHANNELS:
            raise PulsedError(
                f"samples: expected (n, channels), got shape {a.shape}: "
                "pass array.T for a channels-first array"
            )
    elif a.ndim != 1:
        raise PulsedError(f"samples: expected a 1-D array or (n, channels), got shape {a.shape}")
    x: Any  # float32 or float64, (n,) or (n, channels)
    if a.dtype.kind == "f":
        x = a.astype(np.float64 if a.dtype.itemsize > 4 else np.float32, copy=False)
    else:
        half = float(2 ** (a.dtype.itemsize * 8 - 1))
        x = a.astype(np.float64)
        if a.dtype.kind == "u":
            x = x - half
        x = x / half
    if x.ndim == 2:
        x = x.mean(axis=1)
    return np.ascontiguousarray(x, dtype="<f4").tobytes()


def resample(audio: Any, from_rate: int, to_rate: int):
    """``audio`` (any dtype, 1-D or (n, channels)) as mono float32 at
    ``to_rate`` Hz, converted as files are read (rubato's FFT resampler)."""
    import numpy as np

    out = _pulsed.resample(_samples(audio), int(from_rate), int(to_rate))
    return np.frombuffer(out, dtype="<f4").copy()


class Model:
    """A speech-recognition model, opened once.

    ``name_or_dir``: a short name (``"whisper-tiny.en"``, ``"whisper-base"``,
    ``"whisper-base-streaming-640ms"``: Whisper checkpoints in the model
    cache; ``"pulsed-en-ctc"``: the shipped model, nothing to fetch) or a
    folder; ``None`` is the command line's default model (fetched on first
    use, English unless ``language`` is given). ``device``: ``"auto"`` (a
    usable GPU, else the CPU), ``"cpu"`` or ``"cuda"``; ``precision``:
    ``"f32"`` or ``"bf16"`` (GPU). Other options are ``pulsed transcribe``'s
    flags by their Python names (``beam``, ``task``, ``whole``, ``pulse``,
    ``word_timestamps``, ``initial_prompt``, ``vad``, ``batch_size``,
    ``no_speech_gate``, ``no_fallback``, ``padding``, ``ctc``, ``lm``, ``no_lm``, ...).

    Calls release the GIL; one model serves several threads at once.
    """

    def __init__(
        self,
        name_or_dir: Optional[PathLike] = None,
        device: str = "auto",
        precision: str = "f32",
        language: Optional[str] = None,
        **options: Any,
    ) -> None:
        if name_or_dir is not None:
            name_or_dir = os.fspath(name_or_dir)
        self._model = _pulsed.Model(name_or_dir, device, precision, language, **options)

    @property
    def name(self) -> str:
        """The short name or folder opened."""
        return self._model.name

    @property
    def family(self) -> str:
        """``"conformer"``, ``"whisper"`` or ``"whisper-ctc"``."""
        return self._model.family

    @property
    def device(self) -> str:
        """Where it runs: ``"CPU"`` or the GPU in one line."""
        return self._model.device

    @property
    def sample_rate(self) -> int:
        """The rate (Hz) the model runs at; arrays at other rates are converted."""
        return self._model.sample_rate

    def describe(self) -> Optional[str]:
        """What runs where, as ``pulsed transcribe`` says it."""
        return self._model.describe()

    def __repr__(self) -> str:
        return repr(self._model)

    def transcribe(self, audio: Any, sample_rate: Optional[int] = None) -> Transcription:
        """Transcribes a file (a path: WAV, FLAC, MP3, OGG Vorbis, M4A) or
        an array of samples at ``sample_rate`` Hz (default: the model's),
        of any float or integer dtype, 1-D or (n, channels)."""
        if isinstance(audio, (str, os.PathLike)):
            if sample_rate is not None:
                raise PulsedError("sample_rate is for arrays: a file says its own rate")
            return self._model.transcribe_file(os.fspath(audio))
        rate = self.sample_rate if sample_rate is None else int(sample_rate)
        return self._model.transcribe_samples(_samples(audio), rate)

    def transcribe_many(
        self,
        paths: Iterable[PathLike],
        jobs: Optional[int] = None,
        progress: Union[bool, Callable[[Transcription, int, int], Any]] = True,
        streams: Optional[int] = None,
    ) -> List[Transcription]:
        """Transcribes files on ``jobs`` parallel workers (default: one per
        core), as ``pulsed transcribe -j N`` does. One result per path, in
        order; a file that fails has ``error`` set and the others go on.
        ``progress``: ``True`` shows a line on a terminal's stderr, or a
        function called with (result, done, total) as each file finishes."""
        files = [os.fspath(p) for p in paths]
        callback: Optional[Callable[[Transcription, int, int], Any]]
        if progress is True:
            callback = _Progress() if sys.stderr.isatty() else None
        elif progress is False or progress is None:
            callback = None
        else:
            callback = progress
        try:
            return self._model.transcribe_many(files, jobs, streams, callback)
        finally:
            if isinstance(callback, _Progress):
                callback.close()

    def stream(self, sample_rate: Optional[int] = None, **options: Any) -> "Stream":
        """A live session: ``push`` samples as they come (at ``sample_rate``
        Hz, default the model's), read partial and final lines by iterating
        (or ``async for ev in s.events_async()``), ``finish`` at the end.
        Options are ``pulsed mic``'s flags: ``end_silence``, ``vad``,
        ``step``, ``trim``, ``paced`` (default True: every step decoded, as
        for a file; False for audio arriving in real time), ``policy``, ...
        """
        return Stream(self._model.stream(sample_rate=sample_rate, **options))


class _Progress:
    """``transcribe_many``'s progress line on a terminal."""

    def __init__(self) -> None:
        self.audio_s = 0.0
        self.failed = 0

    def __call__(self, result: Transcription, done: int, total: int) -> None:
        self.audio_s += result.duration
        self.failed += 0 if result.ok else 1
        failed = f", {self.failed} failed" if self.failed else ""
        sys.stderr.write(f"\rpulsed: {done}/{total} files, {self.audio_s:.1f} s of audio{failed}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class Stream:
    """A live session (from ``Model.stream``). Feed it with ``push`` from
    any thread; iterating blocks for the next event and stops once
    ``finish`` was called and every event was read. Usable as a context
    manager (``finish`` on exit) and from asyncio (``events_async``,
    ``push_async``, ``finish_async``)."""

    def __init__(self, session: "_pulsed.LiveSession") -> None:
        self._s = session

    @property
    def sample_rate(self) -> int:
        """The rate (Hz) pushed samples are taken at."""
        return self._s.sample_rate

    @property
    def ended(self) -> bool:
        """True once finished and every event has been read."""
        return self._s.ended

    def push(self, samples: Any) -> None:
        """Feeds samples (any dtype, 1-D or (n, channels)); waits while the
        session's buffer is full, so nothing is dropped."""
        self._s.push(_samples(samples))

    def finish(self) -> None:
        """The end of the audio: the utterance in progress becomes final."""
        self._s.finish()

    def poll(self) -> List[LiveEvent]:
        """The events ready now, without waiting."""
        return self._s.poll()

    def next_event(self, timeout: Optional[float] = None) -> Optional[LiveEvent]:
        """The next event, waiting up to ``timeout`` seconds (``None``: as
        long as it takes); ``None`` on timeout or at the end (``ended``)."""
        return self._s.next_event(timeout)

    def __iter__(self) -> Iterator[LiveEvent]:
        return self

    def __next__(self) -> LiveEvent:
        return next(self._s)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finish()

    async def push_async(self, samples: Any) -> None:
        """``push`` on a worker thread."""
        await asyncio.to_thread(self.push, samples)

    async def finish_async(self) -> None:
        """``finish`` on a worker thread."""
        await asyncio.to_thread(self.finish)

    async def events_async(self, poll_s: float = 0.1) -> AsyncIterator[LiveEvent]:
        """The events as an async iterator: each wait runs on a worker
        thread (at most ``poll_s`` seconds, so cancelling is prompt); ends
        once finished and every event was read."""
        while True:
            ev = await asyncio.to_thread(self._s.next_event, poll_s)
            if ev is not None:
                yield ev
            elif self._s.ended:
                return
