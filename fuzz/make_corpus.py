"""Writes the fuzz targets' seed corpora (fuzz/corpus/TARGET/), small valid
inputs of every kind each reader takes. Run from the repository root:

    python3 fuzz/make_corpus.py [TOKENIZER_JSON]

ffmpeg makes the compressed audio; TOKENIZER_JSON (default: whisper-tiny.en's
in the model cache) is cut down to its byte-level vocabulary, a few merges
and its special tokens.
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile

OUT = "fuzz/corpus"


def put(target, name, data):
    os.makedirs(f"{OUT}/{target}", exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(f"{OUT}/{target}/{name}", "wb") as f:
        f.write(data)


def tone(n, rate):
    return [math.sin(2 * math.pi * 440 * i / rate) * 0.5 for i in range(n)]


def wav(rate, channels, bits, fmt_tag=1, n=64, data_size=None, extensible=False):
    """A RIFF/WAVE file; `data_size` overrides the data chunk's length (a pipe's)."""
    samples = [s for s in tone(n, rate) for _ in range(channels)]
    if fmt_tag == 3:
        body = b"".join(struct.pack("<f", s) for s in samples)
    elif bits == 8:
        body = bytes(int(s * 127) + 128 for s in samples)
    else:
        scale = 2 ** (bits - 1) - 1
        body = b"".join(int(s * scale).to_bytes(bits // 8, "little", signed=True) for s in samples)
    block = channels * bits // 8
    if extensible:
        guid = struct.pack("<H", fmt_tag) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * block, block, bits, 22, bits, 0) + guid
    else:
        fmt = struct.pack("<HHIIHH", fmt_tag, channels, rate, rate * block, block, bits)
    size = len(body) if data_size is None else data_size
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", size) + body
    riff = 4 + len(chunks) if data_size is None else 0xFFFFFFFF
    return b"RIFF" + struct.pack("<I", riff & 0xFFFFFFFF) + b"WAVE" + chunks


def audio_seeds():
    wavs = {
        "s16_16k_mono.wav": wav(16000, 1, 16),
        "u8_8k_stereo.wav": wav(8000, 2, 8),
        "s24_44k_mono.wav": wav(44100, 1, 24),
        "s32_48k_stereo.wav": wav(48000, 2, 32),
        "f32_22k_mono.wav": wav(22050, 1, 32, fmt_tag=3),
        "extensible_s16_stereo.wav": wav(16000, 2, 16, extensible=True),
        "pipe_size_ffffffff.wav": wav(16000, 1, 16, data_size=0xFFFFFFFF),
        "pipe_size_0.wav": wav(16000, 1, 16, data_size=0),
        "truncated.wav": wav(16000, 1, 16, n=400)[:300],
    }
    for name, data in wavs.items():
        put("wav", name, data)
    # the audio target: first byte picks the extension (0 none, 1 wav, 2 flac, 3 mp3, 4 ogg, 5 m4a)
    put("audio", "s16_16k_mono.wav", b"\x01" + wavs["s16_16k_mono.wav"])
    put("audio", "pipe_size_0.wav", b"\x00" + wavs["pipe_size_0.wav"])
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/in.wav"
        with open(src, "wb") as f:
            f.write(wav(16000, 1, 16, n=3200))
        for ext, pick, args in [
            ("flac", 2, []),
            ("mp3", 3, ["-b:a", "32k"]),
            ("ogg", 4, ["-c:a", "libvorbis", "-q:a", "0"]),
            ("m4a", 5, ["-c:a", "aac", "-b:a", "24k"]),
            ("m4a", 0, ["-c:a", "alac"]),
        ]:
            out = f"{tmp}/out.{ext}"
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", src, *args, out], check=True)
            with open(out, "rb") as f:
                data = f.read()
            put("audio", f"tone_{pick}_{args[1] if args else 'flac'}.{ext}", bytes([pick]) + data)


def safetensors_seed(tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def weight_seeds():
    f32 = struct.pack("<6f", *[0.5, -1, 2, 0, 1e-3, 3])
    put("safetensors", "f32.safetensors", safetensors_seed({"w": ("F32", [2, 3], f32)}))
    put("safetensors", "mixed.safetensors", safetensors_seed({
        "a.weight": ("F16", [2, 2], struct.pack("<4e", 1, 2, 3, 4)),
        "a.bias": ("BF16", [2], b"\x80\x3f\x00\x40"),
        "ids": ("I64", [3], struct.pack("<3q", 1, 2, 3)),
        "mask": ("BOOL", [2], b"\x01\x00"),
        "scalar": ("F32", [], struct.pack("<f", 1)),
        "empty": ("F32", [0, 4], b""),
    }))


def config_seeds():
    put("config", "conformer_config.json", open("models/pulsed-en-ctc/config.json").read())
    put("config", "whisper_config.json", json.dumps({
        "d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6, "decoder_layers": 4,
        "decoder_attention_heads": 6, "encoder_ffn_dim": 1536, "decoder_ffn_dim": 1536,
        "num_mel_bins": 80, "vocab_size": 51864, "max_source_positions": 1500,
        "max_target_positions": 448, "model_type": "whisper",
        "pulsed_encoder_context": {"chunk": 16, "left": 64, "right": 4},
        "begin_suppress_tokens": [220, 50256], "suppress_tokens": [1, 2, 7],
        "alignment_heads": [[2, 2], [3, 0]], "is_multilingual": False,
        "lang_to_id": {"<|en|>": 50259}, "max_length": 448,
    }))


ARPA = """\\data\\
ngram 1=5
ngram 2=3
ngram 3=1

\\1-grams:
-1.0\t<s>\t-0.3
-0.7\t</s>
-1.2\t<unk>
-0.5\thello\t-0.2
-0.6\tworld\t-0.1

\\2-grams:
-0.3\t<s> hello\t-0.1
-0.2\thello world
-0.4\tworld </s>

\\3-grams:
-0.1\t<s> hello world

\\end\\
"""


def tokenizer_seed(path):
    t = json.load(open(path))
    byte_tokens = {k: v for k, v in t["model"]["vocab"].items() if v < 256}
    merges = []
    vocab = dict(byte_tokens)
    for m in t["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in t["model"]["vocab"]:
            merges.append(m)
            vocab[a + b] = t["model"]["vocab"][a + b]
        if len(merges) == 40:
            break
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    keep = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>", "<|0.00|>", "<|0.02|>")
    t["added_tokens"] = [a for a in t["added_tokens"] if a["content"] in keep]
    for a in t["added_tokens"]:
        vocab[a["content"]] = a["id"]
    return json.dumps(t, ensure_ascii=False)


def main():
    audio_seeds()
    weight_seeds()
    config_seeds()
    put("arpa", "tiny.arpa", ARPA)
    put("arpa", "unigrams.arpa", "\\data\\\nngram 1=2\n\n\\1-grams:\n-0.5\ta\n-0.5\t</s>\n\n\\end\\\n")
    put("tokens", "tokens.txt", open("models/pulsed-en-ctc/tokens.txt").read())
    put("tokens", "with_ids.txt", "<blank> 0\n<sp> 1\na 2\nb 3\n' 4\n")
    cache = os.path.expanduser("~/.cache/pulsed/models/whisper-tiny.en/tokenizer.json")
    put("tokenizer", "whisper_small.json", tokenizer_seed(sys.argv[1] if len(sys.argv) > 1 else cache))
    pcm = struct.pack("<8h", 0, 1000, -1000, 32767, -32768, 5, 6, 7)
    import base64
    b64 = base64.b64encode(pcm).decode()
    put("realtime", "ga.jsonl", "\n".join(json.dumps(e) for e in [
        {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "transcription": {"model": "default", "language": "en", "prompt": "hi"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 300}}}}},
        {"type": "input_audio_buffer.append", "audio": b64, "event_id": "e1"},
        {"type": "input_audio_buffer.commit"},
        {"type": "input_audio_buffer.clear"},
    ]))
    put("realtime", "beta.jsonl", "\n".join(json.dumps(e) for e in [
        {"type": "transcription_session.update", "session": {"input_audio_format": "pcm16",
            "input_audio_transcription": {"model": "default", "language": "en"},
            "turn_detection": None}},
        {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}},
        {"type": "input_audio_buffer.append", "audio": b64},
        {"type": "input_audio_buffer.commit"},
    ]))
    boundary = "XyZ"
    parts = [("file", "a.wav", wav(16000, 1, 16, n=16)), ("model", None, b"default"),
             ("language", None, b"en"), ("response_format", None, b"verbose_json"),
             ("stream", None, b"false"), ("temperature", None, b"0")]
    body = b""
    for name, fname, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{fname}"' if fname else "")
        body += f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode()
        if fname:
            body += b"Content-Type: audio/wav\r\n"
        body += b"\r\n" + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    put("form", "upload.txt", f"multipart/form-data; boundary={boundary}\n".encode() + body)


main()
