//! How live Whisper commits text, the flags `mic` and `eval --live` share.

use pulsed::live::WhisperLiveOptions;

/// How live text is committed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The decoder continues from its committed tokens at every encoder
    /// pulse and commits a token once its attention lies --margin frames
    /// before the last frame heard (AlignAtt); needs a streamed encoder.
    Stream,
    /// The rolling buffer decoded again every --step seconds; words two
    /// decodings agree on are committed (LocalAgreement).
    Agreement,
}

#[derive(clap::Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Live Whisper: how text is committed (default: stream where the
    /// encoder streams, a chunked checkpoint; agreement otherwise).
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// With --policy stream: a token is committed once its attention peak
    /// lies this many encoder frames (20 ms each) before the last heard
    /// (default: the checkpoint's, `pulsed_stream_margin` in its
    /// config.json; else 20).
    #[arg(long, value_name = "FRAMES")]
    pub margin: Option<usize>,
    /// With --policy stream: a token of at least this probability is
    /// committed at --sure-margin frames instead of --margin.
    #[arg(long, default_value_t = 0.97, value_name = "P")]
    pub sure: f32,
    /// With --policy stream: the margin of a token --sure picks (--margin
    /// or more: every token at --margin).
    #[arg(long, default_value_t = 10, value_name = "FRAMES")]
    pub sure_margin: usize,
    /// With --policy stream: a token whose attention peak lies more than
    /// this many frames before the last committed token's is taken for a
    /// loop, and not committed.
    #[arg(long, default_value_t = 25)]
    pub backstep: usize,
    /// With --policy stream: most tokens past the committed ones shown as
    /// partial text (those that read audio heard, whole words; 0: the
    /// committed text alone).
    #[arg(long, default_value_t = 2)]
    pub show: usize,
    /// With --policy stream: a token past the committed ones is shown only
    /// where the decoder gives it at least this probability (0: any).
    #[arg(long, default_value_t = 0.3, value_name = "P")]
    pub show_sure: f32,
    /// With --policy stream: feed the committed tokens again in one pass
    /// at every pulse instead of keeping them in the decoder's cache.
    #[arg(long)]
    pub refill: bool,
    /// With --policy stream: a word that makes the text end in this many
    /// copies of one phrase is not committed; at the end of speech such a
    /// loop sends the utterance to the second pass (0: off).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// With --policy stream: an utterance whose final words leave this many
    /// seconds of its speech without a word is decoded again whole (the
    /// second pass) for its final line.
    #[arg(long, default_value_t = 1.5, value_name = "SECONDS")]
    pub untexted_speech: f64,
    /// With --policy stream: beam width of the decoding at the end of
    /// speech, over the words not yet committed (1: greedy).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub final_beam: usize,
    /// With --policy stream: a token whose attention peaks past the audio
    /// heard, while over the heard audio it peaks this many frames before
    /// its end (and not before the last committed token), is read at that
    /// peak: a word's last pieces can stall the text until the end of
    /// speech otherwise (0: off).
    #[arg(long, default_value_t = 50, value_name = "FRAMES")]
    pub stall: usize,
}

impl PolicyArgs {
    /// Sets the live options these flags choose.
    pub fn apply(&self, o: &mut WhisperLiveOptions) {
        o.stream_text = self.policy.map(|p| p == Policy::Stream);
        o.stream.margin = self.margin;
        o.stream.sure = Some((self.sure, self.sure_margin));
        o.stream.refill = self.refill;
        o.stream.backstep = self.backstep;
        o.stream.show = self.show;
        o.stream.show_sure = self.show_sure;
        o.stream.repeats = self.repeats;
        o.stream.final_beam = self.final_beam;
        o.stream.stall = self.stall;
        o.untexted_speech_s = self.untexted_speech;
    }
}
