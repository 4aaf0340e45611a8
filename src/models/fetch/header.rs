//! A safetensors header laid out as Python's `json.dumps` with compact
//! separators lays it out (the reference scripts write theirs so), so that
//! a file converted here has the same bytes as theirs: tensors in the
//! order given, offsets back to back, `__metadata__` last, spaces to a
//! multiple of 8.

/// One tensor's entry: name, dtype (`"F16"`, ...), shape, byte length.
pub struct Entry<'a> {
    pub name: &'a str,
    pub dtype: &'a str,
    pub shape: &'a [usize],
    pub bytes: usize,
}

/// The 8-byte length and the header; `metadata`: the `__metadata__`
/// pairs, in order.
pub fn header(entries: &[Entry<'_>], metadata: &[(&str, &str)]) -> Vec<u8> {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut items = Vec::with_capacity(entries.len() + 1);
    let mut off = 0;
    for e in entries {
        let dims: Vec<String> = e.shape.iter().map(usize::to_string).collect();
        items.push(format!(
            "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            quote(e.name),
            e.dtype,
            dims.join(","),
            off + e.bytes
        ));
        off += e.bytes;
    }
    if !metadata.is_empty() {
        let pairs: Vec<String> = metadata
            .iter()
            .map(|(k, v)| format!("{}:{}", quote(k), quote(v)))
            .collect();
        items.push(format!("\"__metadata__\":{{{}}}", pairs.join(",")));
    }
    let mut h = format!("{{{}}}", items.join(","));
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laid_out_as_python_writes_it() {
        let h = header(
            &[
                Entry {
                    name: "b",
                    dtype: "F32",
                    shape: &[1],
                    bytes: 4,
                },
                Entry {
                    name: "a",
                    dtype: "I8",
                    shape: &[2, 1],
                    bytes: 2,
                },
            ],
            &[("format", "pt")],
        );
        let n = u64::from_le_bytes(h[..8].try_into().unwrap()) as usize;
        assert_eq!(n, h.len() - 8);
        assert_eq!(n % 8, 0);
        assert_eq!(
            std::str::from_utf8(&h[8..]).unwrap().trim_end(),
            r#"{"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"I8","shape":[2,1],"data_offsets":[4,6]},"__metadata__":{"format":"pt"}}"#
        );
    }
}
