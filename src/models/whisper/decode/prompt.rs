//! A window's prompt (faster-whisper's `get_prompt`): the previous text
//! after `<|startofprev|>`, the start-of-transcript sequence, then
//! `<|notimestamps|>` or a prefix.

use crate::models::whisper::{WhisperError, WhisperTokenizer};

/// What goes into a window's prompt besides the previous text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PromptSpec<'a> {
    /// `<|startoftranscript|>` and the language and task tokens.
    pub sot_sequence: &'a [u32],
    pub without_timestamps: bool,
    /// Text the output must start with (first window only).
    pub prefix: Option<&'a str>,
    pub hotwords: Option<&'a str>,
    /// The model's text positions (448): previous text keeps its last
    /// `max_length / 2 - 1` tokens, hotwords and prefix their first.
    pub max_length: usize,
}

/// Builds the prompt of one window.
/// A prompt without timestamps: `previous` text (as an initial prompt is
/// written), then `sot_sequence` and `<|notimestamps|>`.
pub(crate) fn prompt_tokens(
    tokenizer: &WhisperTokenizer,
    previous: &str,
    sot_sequence: &[u32],
    max_length: usize,
) -> Result<Vec<u32>, WhisperError> {
    let previous = match previous.trim() {
        "" => Vec::new(),
        text => tokenizer.encode(&format!(" {text}"))?,
    };
    let spec = PromptSpec {
        sot_sequence,
        without_timestamps: true,
        prefix: None,
        hotwords: None,
        max_length,
    };
    get_prompt(tokenizer, &previous, &spec)
}

pub(crate) fn get_prompt(
    tokenizer: &WhisperTokenizer,
    previous_tokens: &[u32],
    spec: &PromptSpec,
) -> Result<Vec<u32>, WhisperError> {
    let special = tokenizer.special();
    let PromptSpec {
        sot_sequence,
        without_timestamps,
        prefix,
        hotwords,
        max_length,
    } = *spec;
    let half = max_length / 2;
    let mut prompt = Vec::new();
    let hotwords = hotwords.filter(|h| !h.is_empty() && prefix.is_none_or(str::is_empty));
    if !previous_tokens.is_empty() || hotwords.is_some() {
        prompt.push(special.sot_prev);
        if let Some(h) = hotwords {
            let mut tokens = tokenizer.encode(&format!(" {}", h.trim()))?;
            if tokens.len() >= half {
                tokens.truncate(half - 1);
            }
            prompt.extend(tokens);
        }
        let keep = (half - 1).min(previous_tokens.len());
        prompt.extend(&previous_tokens[previous_tokens.len() - keep..]);
    }
    prompt.extend(sot_sequence);
    if without_timestamps {
        prompt.push(special.no_timestamps);
    }
    if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
        let mut tokens = tokenizer.encode(&format!(" {}", prefix.trim()))?;
        if tokens.len() >= half {
            tokens.truncate(half - 1);
        }
        if !without_timestamps {
            prompt.push(special.timestamp_begin);
        }
        prompt.extend(tokens);
    }
    Ok(prompt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::whisper::tokenizer::tests::local_tokenizer;

    fn get(
        tok: &WhisperTokenizer,
        prev: &[u32],
        without_timestamps: bool,
        prefix: Option<&str>,
        hotwords: Option<&str>,
    ) -> Vec<u32> {
        let sot = [tok.special().sot];
        let spec = PromptSpec {
            sot_sequence: &sot,
            without_timestamps,
            prefix,
            hotwords,
            max_length: 448,
        };
        get_prompt(tok, prev, &spec).unwrap()
    }

    #[test]
    fn prompt_layout() {
        let Some(tok) = local_tokenizer() else { return };
        let sp = *tok.special();
        let prev: Vec<u32> = (0..300).collect();
        let p = get(&tok, &prev, false, None, None);
        // sot_prev, the last 223 previous tokens, sot.
        assert_eq!(p.len(), 1 + 223 + 1);
        assert_eq!(p[0], sp.sot_prev);
        assert_eq!(p[1], 300 - 223);
        assert_eq!(*p.last().unwrap(), sp.sot);

        let p = get(&tok, &[], true, None, None);
        assert_eq!(p, vec![sp.sot, sp.no_timestamps]);

        let p = get(&tok, &[], false, Some(" Hello world "), None);
        assert_eq!(p, vec![sp.sot, sp.timestamp_begin, 18435, 995]);

        // Hotwords go after sot_prev, unless there is a prefix.
        let p = get(&tok, &[7], false, None, Some("world"));
        assert_eq!(p, vec![sp.sot_prev, 995, 7, sp.sot]);
        let p = get(&tok, &[], true, Some("Hello"), Some("world"));
        assert_eq!(p, vec![sp.sot, sp.no_timestamps, 18435]);
    }
}
