//! [`Tokens`]: the model's output alphabet, from `tokens.txt`.

use std::path::Path;

use super::DecodeError;

/// The token list of a character CTC model: id = line number (from 0).
///
/// `<blk>` (or `<blank>`) is the CTC blank and prints as nothing; `<sp>` is a
/// word boundary and prints as a space. Lines of the form `symbol id` (the
/// k2/sherpa layout) are accepted when every line has that form and the ids
/// are 0, 1, 2... in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    symbols: Vec<String>,
    blank: usize,
    space: Option<usize>,
}

const BLANKS: [&str; 2] = ["<blk>", "<blank>"];
const SPACE: &str = "<sp>";

impl Tokens {
    /// Reads a token list file, one token per line in id order.
    pub fn load(path: &Path) -> Result<Self, DecodeError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| DecodeError::Io {
            path: name.clone(),
            source,
        })?;
        Self::parse(text.lines(), &name)
    }

    /// Builds the list from lines in id order (error messages call it `<tokens>`).
    pub fn from_lines<I, S>(lines: I) -> Result<Self, DecodeError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let lines: Vec<S> = lines.into_iter().collect();
        Self::parse(lines.iter().map(|s| s.as_ref()), "<tokens>")
    }

    fn parse<'a>(lines: impl Iterator<Item = &'a str>, path: &str) -> Result<Self, DecodeError> {
        let mut lines: Vec<&str> = lines.map(|l| l.trim_end_matches('\r')).collect();
        // A file that ends with blank lines: those are not tokens.
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        if lines.is_empty() {
            return Err(DecodeError::EmptyTokens { path: path.into() });
        }
        let bad = |line: usize, reason: String| DecodeError::BadTokenLine {
            path: path.into(),
            line: line + 1,
            reason,
        };
        let with_ids = lines.iter().all(|l| {
            l.rsplit_once(' ')
                .is_some_and(|(s, id)| !s.is_empty() && id.parse::<usize>().is_ok())
        });
        let mut symbols = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            let sym = if with_ids {
                let (sym, id) = line.rsplit_once(' ').unwrap_or((line, ""));
                if id.parse::<usize>().ok() != Some(i) {
                    return Err(bad(i, format!("id {id} where {i} was expected")));
                }
                sym
            } else {
                line
            };
            if sym.is_empty() {
                return Err(bad(i, "empty token".into()));
            }
            if symbols.iter().any(|s: &String| s == sym) {
                return Err(bad(i, format!("duplicate token {sym:?}")));
            }
            symbols.push(sym.to_string());
        }
        let blank = symbols
            .iter()
            .position(|s| BLANKS.contains(&s.as_str()))
            .ok_or_else(|| DecodeError::NoBlank { path: path.into() })?;
        let space = symbols.iter().position(|s| s == SPACE);
        Ok(Tokens {
            symbols,
            blank,
            space,
        })
    }

    /// Id of the CTC blank.
    pub fn blank(&self) -> usize {
        self.blank
    }

    /// Id of the word-boundary token `<sp>`, if the list has one.
    pub fn space(&self) -> Option<usize> {
        self.space
    }

    /// Whether `id` is the word boundary.
    pub fn is_space(&self, id: usize) -> bool {
        self.space == Some(id)
    }

    /// Vocabulary size.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Always false for a loaded list (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The symbol as written in the list (`<sp>`, `<blk>`, `a`...).
    pub fn symbol(&self, id: usize) -> Option<&str> {
        self.symbols.get(id).map(String::as_str)
    }

    /// What the token prints as: "" for the blank, " " for `<sp>`, else the symbol.
    pub fn piece(&self, id: usize) -> Option<&str> {
        if id == self.blank {
            Some("")
        } else if self.is_space(id) {
            Some(" ")
        } else {
            self.symbol(id)
        }
    }

    /// The plain concatenation of the ids' pieces (no collapsing, no trimming).
    pub fn text_of(&self, ids: &[usize]) -> Result<String, DecodeError> {
        let mut s = String::new();
        for &id in ids {
            s.push_str(self.piece(id).ok_or(DecodeError::TokenOutOfRange {
                id: id as i64,
                vocab: self.len(),
                frame: None,
            })?);
        }
        Ok(s)
    }
}
