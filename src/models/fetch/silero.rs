//! Silero VAD's 16 kHz weights, read out of the ONNX model its wheel ships:
//! the wheel's own `silero_vad_16k.safetensors` does not hold the ONNX
//! model's weights (only the STFT basis agrees), and the ONNX model is what
//! the reference probabilities came from. A protobuf walk finds the
//! `Constant` nodes of the subgraph that holds the 16 kHz branch and writes
//! them under the names [`crate::models::silero`] loads.
//! `scripts/fetch_silero.sh` does the same in Python, for the reference
//! scripts.

use std::path::Path;

use super::header::{header, Entry};
use super::seal::write_atomic;

/// Where the ONNX model is inside the wheel.
pub const ONNX_MEMBER: &str = "silero_vad/data/silero_vad.onnx";

/// Our name, and the ONNX constant's (a suffix after `__`, or the whole name).
fn names() -> Vec<(String, String)> {
    let mut n = vec![(
        "stft_conv.weight".to_string(),
        "stft.forward_basis_buffer".to_string(),
    )];
    for k in 0..4 {
        for p in ["weight", "bias"] {
            n.push((
                format!("conv{}.{p}", k + 1),
                format!("encoder.{k}.reparam_conv.{p}"),
            ));
        }
    }
    for s in ["weight_ih", "weight_hh", "bias_ih", "bias_hh"] {
        n.push((format!("lstm_cell.{s}"), format!("decoder.rnn.{s}")));
    }
    n.push((
        "final_conv.weight".into(),
        "decoder.decoder.2.weight".into(),
    ));
    n.push(("final_conv.bias".into(), "decoder.decoder.2.bias".into()));
    n
}

/// One field of a protobuf message.
enum Field<'b> {
    Varint(u64),
    Bytes(&'b [u8]),
    /// Fixed 32- or 64-bit.
    Fixed(&'b [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut r = 0u64;
    for shift in (0..64).step_by(7) {
        let c = *b.get(*i).ok_or("the ONNX model is cut short")?;
        *i += 1;
        r |= ((c & 0x7f) as u64) << shift;
        if c < 0x80 {
            return Ok(r);
        }
    }
    Err("the ONNX model has a varint longer than 64 bits".into())
}

/// The (field number, value) pairs of one message.
fn fields(b: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let take = |i: &mut usize, n: usize| -> Result<&[u8], String> {
            let end = i.checked_add(n).filter(|&e| e <= b.len());
            let end = end.ok_or("the ONNX model is cut short")?;
            let s = &b[*i..end];
            *i = end;
            Ok(s)
        };
        let v = match key & 7 {
            0 => Field::Varint(varint(b, &mut i)?),
            1 => Field::Fixed(take(&mut i, 8)?),
            2 => {
                let n = varint(b, &mut i)? as usize;
                Field::Bytes(take(&mut i, n)?)
            }
            5 => Field::Fixed(take(&mut i, 4)?),
            wt => return Err(format!("the ONNX model has wire type {wt}")),
        };
        out.push((key >> 3, v));
    }
    Ok(out)
}

/// A float tensor's dims and little-endian bytes.
type Floats = (Vec<usize>, Vec<u8>);

/// A float tensor; `None` for other dtypes.
fn tensor(b: &[u8]) -> Result<Option<Floats>, String> {
    const FLOAT: u64 = 1;
    let (mut dims, mut dtype, mut raw, mut floats) = (Vec::new(), None, None, Vec::new());
    for (f, v) in fields(b)? {
        match (f, v) {
            (1, Field::Varint(d)) => dims.push(d as usize),
            (1, Field::Bytes(packed)) => {
                let mut j = 0;
                while j < packed.len() {
                    dims.push(varint(packed, &mut j)? as usize);
                }
            }
            (2, Field::Varint(d)) => dtype = Some(d),
            (4, Field::Bytes(b) | Field::Fixed(b)) => floats.extend_from_slice(b),
            (9, Field::Bytes(b)) => raw = Some(b.to_vec()),
            _ => {}
        }
    }
    if dtype != Some(FLOAT) {
        return Ok(None);
    }
    Ok(Some((dims, raw.unwrap_or(floats))))
}

type Constants = Vec<(String, Floats)>;

/// The float `Constant` nodes of a graph and of each of its subgraphs
/// (the `If` branches), one list per graph.
fn constants(graph: &[u8], out: &mut Vec<Constants>) -> Result<(), String> {
    let mut consts = Vec::new();
    for (f, node) in fields(graph)? {
        let (1, Field::Bytes(node)) = (f, node) else {
            continue;
        };
        let (mut outputs, mut op, mut attrs) = (Vec::new(), None, Vec::new());
        for (nf, v) in fields(node)? {
            match (nf, v) {
                (2, Field::Bytes(s)) => outputs.push(String::from_utf8_lossy(s).into_owned()),
                (4, Field::Bytes(s)) => op = Some(s),
                (5, Field::Bytes(a)) => attrs.push(a),
                _ => {}
            }
        }
        for a in attrs {
            for (af, v) in fields(a)? {
                match (af, v) {
                    (5, Field::Bytes(t)) if op == Some(b"Constant".as_slice()) => {
                        if let (Some(name), Some(t)) = (outputs.first(), tensor(t)?) {
                            consts.push((name.clone(), t));
                        }
                    }
                    (6, Field::Bytes(g)) => constants(g, out)?,
                    _ => {}
                }
            }
        }
    }
    out.push(consts);
    Ok(())
}

/// Writes the 16 kHz weights of the ONNX model `onnx` to `dst` (a
/// safetensors file, f32).
pub fn extract(onnx: &[u8], dst: &Path) -> Result<(), String> {
    let graph = fields(onnx)?
        .into_iter()
        .find_map(|(f, v)| match (f, v) {
            (7, Field::Bytes(g)) => Some(g),
            _ => None,
        })
        .ok_or("the ONNX model has no graph")?;
    let mut found = Vec::new();
    constants(graph, &mut found)?;
    let names = names();
    let picked = found.iter().find_map(|consts| {
        let mut by_ours = Vec::new();
        for (ours, theirs) in &names {
            let suffix = format!("__{theirs}");
            let t = consts
                .iter()
                .rev()
                .find(|(n, _)| n == theirs || n.ends_with(&suffix))?;
            by_ours.push((ours.clone(), t.1.clone()));
        }
        (by_ours[0].1 .0 == [258, 1, 256]).then_some(by_ours)
    });
    let picked = picked.ok_or("the ONNX model has no subgraph with the 16 kHz weights")?;
    let mut entries = Vec::with_capacity(picked.len());
    for (name, (dims, raw)) in &picked {
        let n = dims.iter().try_fold(4usize, |n, &d| n.checked_mul(d));
        if n != Some(raw.len()) {
            return Err(format!("{name} has {} bytes for shape {dims:?}", raw.len()));
        }
        entries.push(Entry {
            name,
            dtype: "F32",
            shape: dims,
            bytes: raw.len(),
        });
    }
    let mut out = header(&entries, &[("source", "silero_vad.onnx"), ("format", "pt")]);
    for (_, (_, raw)) in &picked {
        out.extend(raw);
    }
    write_atomic(dst, &out).map_err(|e| format!("{}: {e}", dst.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_or_foreign_model_is_an_error() {
        let dst = std::env::temp_dir().join(format!("pulsed-silero-{}", std::process::id()));
        assert!(extract(b"", &dst).unwrap_err().contains("no graph"));
        // field 7 (the graph) says 100 bytes, has 2
        assert!(extract(&[0x3a, 100, 1, 2], &dst)
            .unwrap_err()
            .contains("cut short"));
        // an empty graph: no weights
        assert!(extract(&[0x3a, 0], &dst).unwrap_err().contains("16 kHz"));
        assert!(!dst.exists());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let dst = std::env::temp_dir().join(format!("pulsed-silero-any-{}", std::process::id()));
            let _ = extract(&b, &dst);
            let _ = std::fs::remove_file(&dst);
        }
    }
}
