//! The converter over a small WhisperSpec written here (one layer each
//! side, d_model 4): names, shapes and split rows, and typed errors for a
//! model.bin cut anywhere or not Whisper's.

use super::configs::SPECIAL_TOKENS;
use super::*;
use serde_json::json;

const D: usize = 4;
const VOCAB: usize = 8;
const FFN: usize = 8;

/// model.bin writer: variables in order, then aliases.
struct Writer {
    out: Vec<u8>,
    vars: Vec<(String, Vec<usize>, u8, Vec<u8>)>,
    aliases: Vec<(String, String)>,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend(((s.len() + 1) as u16).to_le_bytes());
    out.extend(s.as_bytes());
    out.push(0);
}

impl Writer {
    fn new() -> Writer {
        Writer {
            out: Vec::new(),
            vars: Vec::new(),
            aliases: Vec::new(),
        }
    }

    /// A float16 tensor whose values count up from `start`.
    fn f16(&mut self, name: &str, shape: &[usize], start: f32) {
        let n: usize = shape.iter().product();
        let data = (0..n)
            .flat_map(|i| half::f16::from_f32(start + i as f32).to_le_bytes())
            .collect();
        self.vars.push((name.into(), shape.to_vec(), 4, data));
    }

    fn int(&mut self, name: &str, v: i32) {
        self.vars
            .push((name.into(), vec![], 3, v.to_le_bytes().to_vec()));
    }

    fn bytes(mut self) -> Vec<u8> {
        self.out.extend(6u32.to_le_bytes());
        string(&mut self.out, "WhisperSpec");
        self.out.extend(3u32.to_le_bytes());
        self.out.extend((self.vars.len() as u32).to_le_bytes());
        for (name, shape, dtype, data) in &self.vars {
            string(&mut self.out, name);
            self.out.push(shape.len() as u8);
            for d in shape {
                self.out.extend((*d as u32).to_le_bytes());
            }
            self.out.push(*dtype);
            self.out.extend((data.len() as u32).to_le_bytes());
            self.out.extend(data);
        }
        self.out.extend((self.aliases.len() as u32).to_le_bytes());
        for (a, t) in &self.aliases {
            string(&mut self.out, a);
            string(&mut self.out, t);
        }
        self.out
    }
}

fn linear(w: &mut Writer, name: &str, rows: usize, cols: usize, start: f32) {
    w.f16(&format!("{name}/weight"), &[rows, cols], start);
    w.f16(&format!("{name}/bias"), &[rows], start);
}

fn norm(w: &mut Writer, name: &str) {
    w.f16(&format!("{name}/gamma"), &[D], 1.0);
    w.f16(&format!("{name}/beta"), &[D], 0.0);
}

/// A whole spec; `k_bias` is the value of the k part of the fused biases.
fn spec(k_bias: f32) -> Writer {
    let mut w = Writer::new();
    w.f16("encoder/conv1/weight", &[D, 3, 3], 0.0);
    w.f16("encoder/conv1/bias", &[D], 0.0);
    w.f16("encoder/conv2/weight", &[D, D, 3], 0.0);
    w.f16("encoder/conv2/bias", &[D], 0.0);
    w.f16("encoder/position_encodings/encodings", &[6, D], 0.0);
    w.int("encoder/num_heads", 2);
    let fused_qkv = |w: &mut Writer, name: &str| {
        w.f16(&format!("{name}/weight"), &[3 * D, D], 0.0);
        // q bias 1.., k bias k_bias, v bias 100..
        let bias: Vec<u8> = (0..3 * D)
            .map(|i| match i / D {
                0 => 1.0 + i as f32,
                1 => k_bias,
                _ => 100.0 + i as f32,
            })
            .flat_map(|x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        w.vars.push((format!("{name}/bias"), vec![3 * D], 4, bias));
    };
    fused_qkv(&mut w, "encoder/layer_0/self_attention/linear_0");
    linear(&mut w, "encoder/layer_0/self_attention/linear_1", D, D, 0.0);
    norm(&mut w, "encoder/layer_0/self_attention/layer_norm");
    linear(&mut w, "encoder/layer_0/ffn/linear_0", FFN, D, 0.0);
    linear(&mut w, "encoder/layer_0/ffn/linear_1", D, FFN, 0.0);
    norm(&mut w, "encoder/layer_0/ffn/layer_norm");
    norm(&mut w, "encoder/layer_norm");
    w.f16("decoder/embeddings/weight", &[VOCAB, D], 0.0);
    w.f16("decoder/position_encodings/encodings", &[5, D], 0.0);
    w.int("decoder/num_heads", 2);
    for (name, v) in [
        ("decoder/activation", 3),
        ("decoder/pre_norm", 1),
        ("decoder/alibi", 0),
    ] {
        w.int(name, v);
    }
    fused_qkv(&mut w, "decoder/layer_0/self_attention/linear_0");
    linear(&mut w, "decoder/layer_0/self_attention/linear_1", D, D, 0.0);
    norm(&mut w, "decoder/layer_0/self_attention/layer_norm");
    linear(&mut w, "decoder/layer_0/attention/linear_0", D, D, 0.0);
    w.f16(
        "decoder/layer_0/attention/linear_1/weight",
        &[2 * D, D],
        0.0,
    );
    let kv_bias: Vec<u8> = (0..2 * D)
        .map(|i| if i < D { k_bias } else { 7.0 })
        .flat_map(|x| half::f16::from_f32(x).to_le_bytes())
        .collect();
    w.vars.push((
        "decoder/layer_0/attention/linear_1/bias".into(),
        vec![2 * D],
        4,
        kv_bias,
    ));
    linear(&mut w, "decoder/layer_0/attention/linear_2", D, D, 0.0);
    norm(&mut w, "decoder/layer_0/attention/layer_norm");
    linear(&mut w, "decoder/layer_0/ffn/linear_0", FFN, D, 0.0);
    linear(&mut w, "decoder/layer_0/ffn/linear_1", D, FFN, 0.0);
    norm(&mut w, "decoder/layer_0/ffn/layer_norm");
    norm(&mut w, "decoder/layer_norm");
    w.aliases.push((
        "decoder/projection/weight".into(),
        "decoder/embeddings/weight".into(),
    ));
    w
}

fn unpacked(model_bin: Vec<u8>) -> Unpacked {
    let added: Vec<Value> = SPECIAL_TOKENS
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"id": 2 + i, "content": t}))
        .collect();
    let mut files = BTreeMap::new();
    files.insert(
        "tokenizer.json".to_string(),
        serde_json::to_vec(&json!({ "added_tokens": added })).unwrap(),
    );
    files.insert(
        "config.json".to_string(),
        serde_json::to_vec(&json!({
            "suppress_ids": [1],
            "suppress_ids_begin": [2],
            "alignment_heads": [[0, 1]],
        }))
        .unwrap(),
    );
    Unpacked { model_bin, files }
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pulsed-ct2-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_spec_becomes_transformers_names_with_fused_linears_split() {
    let out = temp("ok");
    let c = convert(&unpacked(spec(0.0).bytes()), &out).unwrap();
    assert_eq!(
        (c.d_model, c.layers, c.vocab, c.dtype),
        (D, (1, 1), VOCAB, "float16")
    );
    let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.len(), c.tensors);
    // q, k, v are the fused rows in order; k has no bias
    let q = st
        .tensor("model.encoder.layers.0.self_attn.q_proj.bias")
        .unwrap();
    let v = st
        .tensor("model.decoder.layers.0.self_attn.v_proj.bias")
        .unwrap();
    let f16s = |b: &[u8]| -> Vec<f32> {
        b.chunks(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()
    };
    assert_eq!(f16s(q.data()), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(f16s(v.data()), [108.0, 109.0, 110.0, 111.0]);
    assert!(st
        .tensor("model.decoder.layers.0.self_attn.k_proj.bias")
        .is_err());
    let k = st
        .tensor("model.decoder.layers.0.encoder_attn.k_proj.weight")
        .unwrap();
    assert_eq!(k.shape(), [D, D]);
    assert_eq!(f16s(k.data())[0], 0.0);
    let kw = st
        .tensor("model.decoder.layers.0.encoder_attn.v_proj.weight")
        .unwrap();
    assert_eq!(f16s(kw.data())[0], (D * D) as f32);
    // tied: no proj_out
    assert!(st.tensor("proj_out.weight").is_err());
    let config: Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["d_model"], D);
    assert_eq!(config["encoder_ffn_dim"], FFN);
    assert_eq!(config["num_mel_bins"], 3);
    assert_eq!(config["max_target_positions"], 5);
    assert_eq!(config["tie_word_embeddings"], true);
    let gen: Value =
        serde_json::from_slice(&std::fs::read(out.join("generation_config.json")).unwrap())
            .unwrap();
    assert_eq!(gen["forced_decoder_ids"], json!([[1, 7]]));
    assert_eq!(gen["alignment_heads"], json!([[0, 1]]));
    // the folder a Whisper model loads from
    for f in FILES {
        assert!(out.join(f).is_file(), "{f}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_model_bin_cut_anywhere_is_a_typed_error() {
    let whole = spec(0.0).bytes();
    let out = temp("cut");
    for cut in (0..whole.len()).step_by(37).chain([whole.len() - 1]) {
        let err = match convert(&unpacked(whole[..cut].to_vec()), &out) {
            Err(e) => e,
            Ok(_) => panic!("a model.bin cut at {cut} converted"),
        };
        assert!(
            err.contains("truncated") || err.contains("malformed"),
            "cut at {cut}: {err}"
        );
    }
    assert!(!out.join("model.safetensors").exists());
}

#[test]
fn what_transformers_cannot_hold_is_refused() {
    let out = temp("refused");
    let err = convert(&unpacked(spec(0.5).bytes()), &out).err().unwrap();
    assert!(
        err.contains("k part of the fused bias is not zero"),
        "{err}"
    );
    let mut b = spec(0.0).bytes();
    b[0] = 5;
    let err = convert(&unpacked(b), &out).err().unwrap();
    assert!(err.contains("binary version 5"), "{err}");
    let mut w = spec(0.0);
    w.f16("decoder/something_new", &[2], 0.0);
    let err = convert(&unpacked(w.bytes()), &out).err().unwrap();
    assert!(err.contains("does not map"), "{err}");
    let mut w = spec(0.0);
    w.vars.retain(|v| v.0 != "decoder/pre_norm");
    w.int("decoder/pre_norm", 0);
    let err = convert(&unpacked(w.bytes()), &out).err().unwrap();
    assert!(err.contains("pre_norm is 0"), "{err}");
    let mut u = unpacked(spec(0.0).bytes());
    u.files.remove("tokenizer.json");
    assert!(convert(&u, &out)
        .err()
        .unwrap()
        .contains("no tokenizer.json"));
}

#[test]
fn parts_are_joined_in_order() {
    assert_eq!(part_number("model.bin"), Some(0));
    assert_eq!(part_number("model.bin.part2"), Some(2));
    assert_eq!(part_number("model.bin.partx"), None);
    assert_eq!(part_number("vocabulary.txt"), None);
}

proptest::proptest! {
    /// A spec with bytes changed anywhere is converted or refused with a
    /// reason, never a panic.
    #[test]
    fn a_spec_with_changed_bytes_never_panics(
        changes in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6)
    ) {
        let mut b = spec(0.0).bytes();
        let n = b.len();
        for (at, v) in changes {
            b[at % n] = v;
        }
        let out = temp("mutated");
        let _ = convert(&unpacked(b), &out);
        let _ = std::fs::remove_dir_all(&out);
    }
}
