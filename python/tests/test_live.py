"""Live sessions fed in 20 ms blocks give `pulsed mic --input F`'s final
lines (the CLI's path: the inference thread, every step decoded)."""

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import pulsed
from conftest import HELLO, LIBRIVOX, REALDEV, cli_live_finals, read_wav


def feed(stream, samples, rate):
    block = rate // 50  # 20 ms, as `pulsed mic --input` feeds a file
    for i in range(0, len(samples), block):
        stream.push(samples[i : i + block])
    stream.finish()
    return list(stream)


def check_events(events):
    assert events and events[-1].kind == "final"
    for ev in events:
        assert ev.kind in ("partial", "final")
        assert 0 <= ev.stable <= len(ev.words)
        assert ev.text == "" or ev.words
        if ev.is_final:
            assert ev.stable == len(ev.words)
    # final lines in utterance order (an utterance without words gives
    # none), no line of an utterance after its final one
    finals = [ev.utterance for ev in events if ev.is_final]
    assert finals == sorted(set(finals))
    for i, ev in enumerate(events):
        if ev.is_final:
            assert all(e.utterance != ev.utterance for e in events[i + 1 :])


@pytest.mark.parametrize("path", [HELLO, LIBRIVOX])
def test_conformer_live_equals_the_cli(ctc, path):
    x, rate = read_wav(path)
    events = feed(ctc.stream(), x, rate)
    check_events(events)
    finals = [e.text for e in events if e.is_final]
    assert finals == cli_live_finals("pulsed-en-ctc", path)
    assert any(e.kind == "partial" for e in events)


def test_whisper_live_equals_the_cli(tiny):
    x, rate = read_wav(LIBRIVOX)
    events = feed(tiny.stream(), x, rate)
    check_events(events)
    finals = [e.text for e in events if e.is_final]
    assert finals == cli_live_finals("whisper-tiny.en", LIBRIVOX)
    assert finals[0].startswith("He was not an ill")


def test_live_at_another_rate_and_dtype(ctc):
    x, _ = read_wav(HELLO)
    up = pulsed.resample(x, 16_000, 48_000)
    s = ctc.stream(sample_rate=48_000)
    assert s.sample_rate == 48_000
    finals = [e.text for e in feed(s, up.astype(np.float64), 48_000) if e.is_final]
    assert finals == ["if anything can go wrong it will"]


def test_live_from_asyncio(ctc):
    x, rate = read_wav(HELLO)

    async def main():
        s = ctc.stream()

        async def producer():
            for i in range(0, len(x), 320):
                await s.push_async(x[i : i + 320])
            await s.finish_async()

        task = asyncio.create_task(producer())
        events = [ev async for ev in s.events_async()]
        await task
        return events

    events = asyncio.run(main())
    check_events(events)
    assert [e.text for e in events if e.is_final] == cli_live_finals("pulsed-en-ctc", HELLO)


def test_live_session_errors(ctc):
    s = ctc.stream()
    s.push(np.zeros(320, dtype=np.float32))
    with pytest.raises(pulsed.PulsedError, match="NaN"):
        s.push(np.array([np.inf], dtype=np.float32))
    s.finish()
    s.finish()  # idempotent
    list(s)
    assert s.ended and s.next_event(0.01) is None and s.poll() == []
    with pytest.raises(pulsed.PulsedError, match="finished"):
        s.push(np.zeros(320, dtype=np.float32))
    with pytest.raises(pulsed.PulsedError, match="policy"):
        ctc.stream(policy="nope")
    with pytest.raises(pulsed.PulsedError, match="cannot resample 0 Hz to 16000 Hz"):
        ctc.stream(sample_rate=0)
    with ctc.stream() as s2:  # finished on leaving the block
        s2.push(np.zeros(3200, dtype=np.int16))
    silence = list(s2)
    assert s2.ended and all(not e.words for e in silence)




@pytest.mark.skipif(
    not (REALDEV / "manifest.jsonl").is_file() or not os.environ.get("PULSED_SLOW"),
    reason="realdev live (minutes): set PULSED_SLOW=1 where ../shared/realdev is reachable",
)
@pytest.mark.parametrize("model", os.environ.get("PULSED_SLOW_MODELS", "whisper-tiny.en").split(","))
def test_realdev_live_equals_the_cli(model):
    """Every realdev file fed in 20 ms blocks: `pulsed mic --input F`'s final lines."""
    m = pulsed.Model(None if model == "default" else model, device="cpu")
    cli_model = [] if model == "default" else ["--model", model]
    files = pulsed._pulsed.read_manifest(str(REALDEV / "manifest.jsonl"))
    with ThreadPoolExecutor(1) as pool:  # the CLI beside the Python session
        want = {f: pool.submit(cli_live_finals, None, f, *cli_model) for f in files}
        for f in files:
            x, rate = read_wav(f)
            finals = [e.text for e in feed(m.stream(), x, rate) if e.is_final]
            assert finals == want[f].result(), f


def test_a_session_dropped_unfinished_lets_other_threads_run(tiny):
    """A session dropped unfinished stops after the step in hand (here the
    whole push: seconds of decoding), with the GIL released: a Python
    thread ticks meanwhile."""
    import threading
    import time

    x, rate = read_wav(LIBRIVOX)
    audio = np.tile(x, int(np.ceil(5.0 * rate / len(x))))[: int(5.0 * rate)]
    s = tiny.stream()
    s.push(audio)  # 5 s in one push, inside the session's buffer
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    t = threading.Thread(target=tick)
    t.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    del s  # the last reference: the session stops here
    t1 = time.monotonic()
    stop.set()
    t.join()
    inside = [k for k in ticks if t0 < k < t1]
    assert t1 - t0 > 0.2, f"the drop took {t1 - t0:.3f} s: no step was in hand"
    assert len(inside) >= 10, f"{len(inside)} ticks in a {t1 - t0:.2f} s drop"
