//! A Whisper model of our own rebuilt from the public checkpoint it was
//! trained from and its committed difference (`models/NAME/delta.json` and
//! an xz-compressed `delta.safetensors.xz`): a student is as large as its
//! teacher, too large to commit, but its difference, in 7-bit steps per
//! group of 64 values, compresses to 16.7 MB.
//!
//! Per changed float16 tensor NAME (at least 64 x 64 values, a multiple of
//! 64): `NAME.q` (int8, `[n / 64, 64]`) and `NAME.scale` (float16, `[n / 64,
//! 1]`); the value is `f16(base + q * scale)`, computed in double precision
//! and rounded once. Other changed tensors are stored whole. The rebuilt
//! file is checked against the SHA-256 the delta records, so a base that is
//! not the one it was made against is refused. `scripts/whisper/weight_delta.py`
//! makes deltas (and applies them the same way, in Python).

use std::collections::BTreeMap;
use std::path::Path;

use half::f16;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::header::{header, Entry};
use super::seal::{hex, write_atomic};

const GROUP: usize = 64;
const FORMAT: i64 = 1;
const WEIGHTS: &str = "delta.safetensors.xz";

/// What `delta.json` says.
#[derive(Debug, Clone)]
pub struct Meta {
    /// The short name of the checkpoint it was made against.
    pub base: String,
    /// config.json keys set over the base's.
    pub config: serde_json::Map<String, Value>,
    /// config.json keys the model drops.
    pub config_removed: Vec<String>,
    pub model_sha256: String,
    /// The xz file, relative to the delta's folder (another model's, for
    /// an operating point of the same weights).
    pub weights: String,
}

/// Reads `dir/delta.json`.
pub fn read_meta(dir: &Path) -> Result<Meta, String> {
    let path = dir.join("delta.json");
    let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: not JSON ({e})", path.display()))?;
    let bad = || {
        format!(
            "{}: not a delta of format {FORMAT} with `base`, `config` and `model_sha256`",
            path.display()
        )
    };
    if v["format"].as_i64() != Some(FORMAT) {
        return Err(bad());
    }
    let removed = match v.get("config_removed") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|k| k.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
        Some(_) => return Err(bad()),
    };
    Ok(Meta {
        base: v["base"].as_str().ok_or_else(bad)?.to_string(),
        config: v["config"].as_object().ok_or_else(bad)?.clone(),
        config_removed: removed,
        model_sha256: v["model_sha256"].as_str().ok_or_else(bad)?.to_string(),
        weights: match v.get("weights") {
            None => WEIGHTS.to_string(),
            Some(w) => w.as_str().ok_or_else(bad)?.to_string(),
        },
    })
}

/// One tensor: dtype, shape, bytes.
type Tensor = (String, Vec<usize>, Vec<u8>);

fn item(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F16" | "BF16" => 2,
        "F32" | "I32" => 4,
        "I8" | "U8" => 1,
        "I64" => 8,
        _ => return None,
    })
}

fn read_safetensors(blob: &[u8]) -> Result<BTreeMap<String, Tensor>, String> {
    let n = blob
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
        .ok_or("shorter than a safetensors header")?;
    let head = blob
        .get(8..8usize.saturating_add(n))
        .ok_or("a damaged header (cut short)")?;
    let head: Value =
        serde_json::from_slice(head).map_err(|e| format!("a damaged header ({e})"))?;
    let Value::Object(head) = head else {
        return Err("a damaged header (not a table of tensors)".into());
    };
    let body = &blob[8 + n..];
    let mut out = BTreeMap::new();
    for (k, v) in head {
        if k == "__metadata__" {
            continue;
        }
        let entry = (|| {
            let dtype = v["dtype"].as_str()?.to_string();
            let shape = v["shape"]
                .as_array()?
                .iter()
                .map(|d| d.as_u64().map(|d| d as usize))
                .collect::<Option<Vec<_>>>()?;
            let offs = v["data_offsets"].as_array()?;
            let (a, b) = (
                offs.first()?.as_u64()? as usize,
                offs.get(1)?.as_u64()? as usize,
            );
            let size = shape
                .iter()
                .try_fold(item(&dtype)?, |n, &d| n.checked_mul(d))?;
            Some((dtype, shape, a, b, size))
        })();
        let Some((dtype, shape, a, b, size)) = entry else {
            return Err(format!("{k}: a damaged header entry"));
        };
        if !(a <= b && b <= body.len() && b - a == size) {
            return Err(format!(
                "{k}: its bytes are missing or not {dtype} {shape:?}"
            ));
        }
        out.insert(k, (dtype, shape, body[a..b].to_vec()));
    }
    Ok(out)
}

/// The tensors in name order, as `weight_delta.py` writes them (the
/// recorded checksum is of these bytes).
fn safetensors_bytes(tensors: &BTreeMap<String, Tensor>) -> Vec<u8> {
    let entries: Vec<Entry> = tensors
        .iter()
        .map(|(name, (dtype, shape, b))| Entry {
            name,
            dtype,
            shape,
            bytes: b.len(),
        })
        .collect();
    let mut out = header(&entries, &[]);
    for (_, _, b) in tensors.values() {
        out.extend(b);
    }
    out
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn quantizable(dtype: &str, shape: &[usize]) -> bool {
    let n = numel(shape);
    dtype == "F16" && n.is_multiple_of(GROUP) && n >= GROUP * GROUP
}

/// `f16(base + q * scale)` for each value, one scale per [`GROUP`].
fn rebuild(base: &[u8], q: &[u8], scale: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(base.len());
    for (i, b) in base.chunks_exact(2).enumerate() {
        let b = f16::from_le_bytes([b[0], b[1]]).to_f64();
        let s = 2 * (i / GROUP);
        let s = f16::from_le_bytes([scale[s], scale[s + 1]]).to_f64();
        let v = b + (q[i] as i8) as f64 * s;
        let r = f16_nearest(v);
        if r.is_infinite() && v.is_finite() {
            return Err("a rebuilt value is out of float16's range".into());
        }
        out.extend(r.to_le_bytes());
    }
    Ok(out)
}

/// `v` rounded once to the nearest f16 (ties to even), as Python's
/// `struct.pack("<e")`: through an f32 rounded to odd, whose 13 bits more
/// than f16's keep the second rounding from moving a value the first one
/// put on a tie (a plain f64 -> f32 -> f16 can).
fn f16_nearest(v: f64) -> f16 {
    let t = v as f32;
    if !v.is_finite() || t as f64 == v {
        return f16::from_f32(t);
    }
    // toward zero, then the last bit set: an inexact value is never a tie
    let mut bits = t.to_bits();
    if (t as f64).abs() > v.abs() {
        bits -= 1;
    }
    f16::from_f32(f32::from_bits(bits | 1))
}

/// The bytes of the model.safetensors that `base_dir`'s weights and the
/// delta make.
fn rebuilt(base_dir: &Path, delta_dir: &Path, weights: &str) -> Result<Vec<u8>, String> {
    let path = delta_dir.join(weights);
    let xz = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut raw = Vec::new();
    lzma_rs::xz_decompress(&mut xz.as_slice(), &mut raw)
        .map_err(|e| format!("{}: damaged ({e})", path.display()))?;
    let delta = read_safetensors(&raw).map_err(|e| format!("{}: {e}", path.display()))?;
    let base_path = base_dir.join("model.safetensors");
    let base = std::fs::read(&base_path).map_err(|e| format!("{}: {e}", base_path.display()))?;
    let mut model = read_safetensors(&base)
        .map_err(|e| format!("{}: not a whole safetensors file: {e}", base_path.display()))?;
    let mut done = Vec::new();
    for (k, (qdt, qshape, q)) in &delta {
        let Some(name) = k.strip_suffix(".q") else {
            continue;
        };
        let scale_name = format!("{name}.scale");
        let (Some(m), Some(scale)) = (model.get_mut(name), delta.get(&scale_name)) else {
            return Err(format!(
                "the delta changes {name}, which {} does not have",
                base_dir.display()
            ));
        };
        let groups = numel(&m.1) / GROUP;
        if !quantizable(&m.0, &m.1)
            || (qdt.as_str(), qshape.as_slice()) != ("I8", &[groups, GROUP][..])
            || (scale.0.as_str(), scale.1.as_slice()) != ("F16", &[groups, 1][..])
        {
            return Err(format!(
                "{name}: the delta's shape does not fit {}'s {} {:?}",
                base_dir.display(),
                m.0,
                m.1
            ));
        }
        m.2 = rebuild(&m.2, q, &scale.2)?;
        done.push(k.clone());
        done.push(scale_name);
    }
    for (k, t) in &delta {
        if done.contains(k) {
            continue;
        }
        match model.get_mut(k) {
            Some(m) if m.0 == t.0 && m.1 == t.1 => m.2 = t.2.clone(),
            _ => {
                return Err(format!(
                    "{k}: not in {}, or of another dtype or shape",
                    base_dir.display()
                ))
            }
        }
    }
    Ok(safetensors_bytes(&model))
}

/// Writes the model `delta_dir` describes into `out`: the base folder's
/// files, its config.json changed as the delta says, and the rebuilt
/// weights (written last: a folder with model.safetensors is whole).
pub fn apply(base_dir: &Path, delta_dir: &Path, out: &Path) -> Result<(), String> {
    let meta = read_meta(delta_dir)?;
    let blob = rebuilt(base_dir, delta_dir, &meta.weights)?;
    let got = hex(&Sha256::digest(&blob));
    if got != meta.model_sha256 {
        return Err(format!(
            "the rebuilt weights do not match the ones the delta was made from (sha256 {}, want {}): check the base at {} with `pulsed fetch --check {}`",
            &got[..12],
            meta.model_sha256.get(..12).unwrap_or(&meta.model_sha256),
            base_dir.display(),
            meta.base
        ));
    }
    let cfg_path = base_dir.join("config.json");
    let cfg = std::fs::read(&cfg_path).map_err(|e| format!("{}: {e}", cfg_path.display()))?;
    let mut cfg: serde_json::Map<String, Value> = serde_json::from_slice(&cfg)
        .map_err(|e| format!("{}: not a JSON object ({e})", cfg_path.display()))?;
    for k in &meta.config_removed {
        cfg.remove(k);
    }
    for (k, v) in meta.config {
        cfg.insert(k, v);
    }
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let target = out.join("model.safetensors");
    if target.exists() {
        std::fs::remove_file(&target).map_err(|e| io(&target, e))?;
    }
    let entries = std::fs::read_dir(base_dir).map_err(|e| io(base_dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let skip = [
            "model.safetensors",
            "config.json",
            super::seal::SUMS,
            "delta.json",
        ];
        if entry.path().is_file() && !skip.iter().any(|s| name == *s) {
            std::fs::copy(entry.path(), out.join(&name)).map_err(|e| io(&entry.path(), e))?;
        }
    }
    let mut cfg_bytes = serde_json::to_vec_pretty(&Value::Object(cfg)).unwrap_or_default();
    cfg_bytes.push(b'\n');
    write_atomic(&out.join("config.json"), &cfg_bytes).map_err(|e| io(out, e))?;
    write_atomic(&target, &blob).map_err(|e| io(&target, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensors(entries: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
        let map = entries
            .iter()
            .map(|(k, d, s, b)| (k.to_string(), (d.to_string(), s.clone(), b.clone())))
            .collect();
        safetensors_bytes(&map)
    }

    fn f16s(v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|x| f16::from_f32(*x).to_le_bytes())
            .collect()
    }

    #[test]
    fn a_rebuilt_value_is_rounded_once() {
        // 16 + 29 * 565 * 2^-21 lies just above the tie between 16 and its
        // f16 successor; through a rounded f32 it lands on the tie and goes
        // down (Python's struct.pack gives 0x4c01)
        let v = 16.0 + 29.0 * (565.0 * 2f64.powi(-21));
        assert_eq!(f16::from_f32(v as f32).to_bits(), 0x4c00);
        assert_eq!(f16_nearest(v).to_bits(), 0x4c01);
        for (v, want) in [
            (16.0, 0x4c00),
            (-16.0 - 2f64.powi(-7), 0xcc00),
            (1e9, 0x7c00),
        ] {
            assert_eq!(f16_nearest(v).to_bits(), want, "{v}");
        }
        // every value an f16 step and a half-step apart: exact, then ties to even
        for i in 0..2000u16 {
            let a = f16::from_bits(0x3c00 + i).to_f64();
            let b = f16::from_bits(0x3c01 + i).to_f64();
            assert_eq!(f16_nearest(a).to_bits(), 0x3c00 + i);
            let even = if i % 2 == 0 { 0x3c00 + i } else { 0x3c01 + i };
            assert_eq!(f16_nearest((a + b) / 2.0).to_bits(), even);
        }
    }

    #[test]
    fn the_header_is_the_one_python_writes() {
        let b = tensors(&[
            ("b", "F32", vec![1], vec![0; 4]),
            ("a", "I8", vec![2], vec![1, 2]),
        ]);
        let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
        assert_eq!(
            std::str::from_utf8(&b[8..8 + n]).unwrap().trim_end(),
            r#"{"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}"#
        );
        assert_eq!(n % 8, 0);
        assert_eq!(read_safetensors(&b).unwrap()["a"].2, [1, 2]);
    }

    #[test]
    fn a_delta_rebuilds_its_model_and_refuses_another_base() {
        let dir = std::env::temp_dir().join(format!("pulsed-delta-{}", std::process::id()));
        let (base, delta, out) = (dir.join("base"), dir.join("delta"), dir.join("out"));
        for d in [&base, &delta] {
            std::fs::create_dir_all(d).unwrap();
        }
        let n = GROUP * GROUP;
        let w: Vec<f32> = (0..n).map(|i| (i % 50) as f32 * 0.25).collect();
        std::fs::write(
            base.join("model.safetensors"),
            tensors(&[
                ("w", "F16", vec![GROUP, GROUP], f16s(&w)),
                ("bias", "F32", vec![2], vec![0; 8]),
                ("same", "F32", vec![1], vec![9; 4]),
            ]),
        )
        .unwrap();
        std::fs::write(base.join("config.json"), r#"{"d_model": 4, "gone": 1}"#).unwrap();
        std::fs::write(base.join("tokenizer.json"), "{}").unwrap();
        let q: Vec<u8> = (0..n).map(|i| (i % 7) as i8 as u8).collect();
        let scale = f16s(&vec![0.5; GROUP]);
        let new_bias: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let raw = tensors(&[
            ("w.q", "I8", vec![GROUP, GROUP], q.clone()),
            ("w.scale", "F16", vec![GROUP, 1], scale),
            ("bias", "F32", vec![2], new_bias.clone()),
        ]);
        let mut xz = Vec::new();
        lzma_rs::xz_compress(&mut raw.as_slice(), &mut xz).unwrap();
        std::fs::write(delta.join(WEIGHTS), xz).unwrap();
        let want_w: Vec<f32> = (0..n).map(|i| w[i] + (i % 7) as f32 * 0.5).collect();
        let want = tensors(&[
            ("bias", "F32", vec![2], new_bias),
            ("same", "F32", vec![1], vec![9; 4]),
            ("w", "F16", vec![GROUP, GROUP], f16s(&want_w)),
        ]);
        let meta = |sha: &str| {
            format!(
                r#"{{"format": 1, "base": "b", "config": {{"pulsed": true}}, "config_removed": ["gone"], "model_sha256": "{sha}"}}"#
            )
        };
        std::fs::write(delta.join("delta.json"), meta(&hex(&Sha256::digest(&want)))).unwrap();
        apply(&base, &delta, &out).unwrap();
        assert_eq!(std::fs::read(out.join("model.safetensors")).unwrap(), want);
        let cfg: Value =
            serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg, serde_json::json!({"d_model": 4, "pulsed": true}));
        assert!(out.join("tokenizer.json").is_file());
        // another base: refused by the checksum, nothing written
        std::fs::write(delta.join("delta.json"), meta(&"0".repeat(64))).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
        let err = apply(&base, &delta, &out).unwrap_err();
        assert!(err.contains("do not match"), "{err}");
        assert!(!out.join("model.safetensors").exists());
        // a cut xz file
        let xz = std::fs::read(delta.join(WEIGHTS)).unwrap();
        std::fs::write(delta.join(WEIGHTS), &xz[..xz.len() / 2]).unwrap();
        let err = apply(&base, &delta, &out).unwrap_err();
        assert!(err.contains("damaged"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_are_read_or_refused(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = read_safetensors(&b);
        }
    }
}
