//! What a partial line adds to the Realtime API's deltas: the part of it
//! that is not expected to change, as the model spells it.

use crate::decode::Word;

/// The part of a partial line that is not expected to change: through
/// its `stable` (committed) words for a model that commits words, else
/// all but its last word (a CTC word may still grow: "hel" -> "hello").
pub fn settled_text<'a>(text: &'a str, words: &[Word], stable: usize, commits: bool) -> &'a str {
    let text = text.trim_start();
    if !commits {
        return text.rsplit_once(' ').map_or("", |(head, _)| head);
    }
    // the end of the stable-th word, found word by word in the text
    let mut end = 0;
    for w in words.iter().take(stable) {
        match text[end..].find(w.text.as_str()) {
            Some(at) => end += at + w.text.len(),
            None => return "",
        }
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Word> {
        text.split(' ')
            .map(|w| Word {
                text: w.to_string(),
                start_s: 0.0,
                end_s: 0.0,
                confidence: 1.0,
            })
            .collect()
    }

    #[test]
    fn a_ctc_line_settles_all_but_its_last_word() {
        let w = words("if anything ca");
        assert_eq!(settled_text("if anything ca", &w, 0, false), "if anything");
        assert_eq!(settled_text("if", &words("if"), 0, false), "");
    }

    #[test]
    fn a_committing_line_settles_its_stable_words_as_spelled() {
        let text = " He was not an ill-disposed young";
        let mut w = words("He was not an ill -disposed young");
        assert_eq!(
            settled_text(text, &w, 6, true),
            "He was not an ill-disposed"
        );
        assert_eq!(settled_text(text, &w, 0, true), "");
        w[1].text = "is".into();
        assert_eq!(
            settled_text(text, &w, 3, true),
            "",
            "a word not in the text"
        );
    }
}
