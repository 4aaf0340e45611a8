//! Several recordings at once, for the batch path's throughput: every
//! recording's first window is encoded with the others' in one encoder
//! call and decoded with them in lock-step ([`generate_batch`]: one decoder
//! step feeds every window's beams, and a window whose search ends leaves
//! the batch), then each recording goes on alone from there. Short
//! recordings (one window, the usual corpus) are decoded entirely in
//! batches. Each recording's segments are the ones [`transcribe`] gives it
//! alone (up to the backend's arithmetic over a larger batch).
//!
//! [`transcribe`]: super::transcribe()

use super::generate::generate_batch;
use super::generate_segments::{window_params, Planned, Prefetched, WindowPrompt};
use super::on_window::on_window;
use super::transcribe::{start, Started};
use super::{DecodeOptions, Network, Segment, TranscriptionInfo};
use crate::models::whisper::{GenerationConfig, WhisperError, WhisperTokenizer};
use crate::Result;

/// One recording's features (`[n_mels, samples / 160 + 1]`, as
/// [`WhisperBackend::log_mel`](crate::models::whisper::WhisperBackend::log_mel)
/// gives them) and its length in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Recording<'f> {
    pub features: &'f [f32],
    pub duration: f64,
}

/// [`transcribe_features`](super::transcribe_features) over every
/// recording, the first windows `batch_size` to an encoder call and decoded
/// together; `on_segment` gets each segment with its recording's index, in
/// order within a recording (first windows of all, then the rest of each).
/// Returns each recording's [`TranscriptionInfo`]. Errors are those of
/// [`transcribe_features`](super::transcribe_features), for any recording,
/// and a `batch_size` of 0.
#[allow(clippy::too_many_arguments)] // transcribe_features' call, plus the batch
pub fn transcribe_many(
    mut network: Network<'_>,
    tokenizer: &WhisperTokenizer,
    gen: &GenerationConfig,
    recordings: &[Recording<'_>],
    opts: &DecodeOptions,
    batch_size: usize,
    mut on_segment: impl FnMut(usize, Segment) -> Result<()>,
) -> Result<Vec<TranscriptionInfo>> {
    if batch_size == 0 {
        return Err(WhisperError::Option {
            option: "batch_size",
            reason: "must be at least 1".to_string(),
        }
        .into());
    }
    let mut started = recordings
        .iter()
        .map(|r| start(&mut network, tokenizer, gen, r.features, r.duration, opts))
        .collect::<Result<Vec<Started>>>()?;
    let (n_mels, window_frames) = {
        let b = network.backend();
        (b.n_mels(), b.window_frames())
    };
    // each recording's first window and its prompt, where it can be
    // decoded with the others'
    let mut firsts: Vec<Option<(Planned, WindowPrompt)>> = Vec::with_capacity(started.len());
    for s in &mut started {
        let first = match s.run.can_prefetch() {
            true => match s.run.next_window(&mut s.cursor, n_mels, window_frames) {
                Some(p) => {
                    let wp = s.run.window_prompt(&s.cursor, p.segment_size)?;
                    Some((p, wp))
                }
                None => None,
            },
            false => None,
        };
        firsts.push(first);
    }
    let mut pending: Vec<usize> = (0..started.len())
        .filter(|&i| firsts[i].is_some())
        .collect();
    let sp = *tokenizer.special();
    while let Some(&lead) = pending.first() {
        // a batch shares its prompt (no text before a first window, so
        // all of them but for an odd prefix or hotwords)
        let prompt_of = |i: usize| firsts[i].as_ref().map(|f| &f.1.prompt);
        let group: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|&i| prompt_of(i) == prompt_of(lead))
            .take(batch_size)
            .collect();
        pending.retain(|i| !group.contains(i));
        let batch: Vec<(Planned, WindowPrompt)> =
            group.iter().filter_map(|&i| firsts[i].take()).collect();
        let windows: Vec<&[f32]> = batch.iter().map(|(p, _)| p.window.as_slice()).collect();
        network.backend().encode(&windows)?;
        let wp = &batch[0].1;
        let lead_run = &started[lead].run;
        let params = window_params(opts, &lead_run.suppress, &lead_run.suppress_begin, &sp, wp);
        let prompts: Vec<&[u32]> = vec![&wp.prompt; group.len()];
        let order: Vec<usize> = (0..group.len()).collect();
        let results = generate_batch(
            network.backend(),
            &prompts,
            &order,
            &params,
            opts.beam_size,
            opts.patience,
        )?;
        for (window, ((&i, (planned, prompt)), result)) in
            group.iter().zip(batch).zip(results).enumerate()
        {
            let s = &mut started[i];
            let prefetched = Prefetched {
                planned,
                prompt,
                result,
            };
            let mut emit = |seg: Segment| on_segment(i, seg);
            on_window(&mut network, window, |view| {
                s.run.step(view, &mut s.cursor, Some(prefetched), &mut emit)
            })?;
        }
    }
    let mut infos = Vec::with_capacity(started.len());
    for (i, mut s) in started.into_iter().enumerate() {
        let mut emit = |seg: Segment| on_segment(i, seg);
        s.run
            .generate_segments(&mut network, &mut s.cursor, &mut emit)?;
        infos.push(s.info);
    }
    Ok(infos)
}
