//! The batched pipeline over a scripted backend: batching, windows,
//! prompts, times back on the recording, refused options.

use super::*;
use crate::models::whisper::backend::forward_backend;
/// tiny.en's settings, without a file.
fn english_config(tok: &WhisperTokenizer) -> GenerationConfig {
    GenerationConfig {
        suppress_tokens: Vec::new(),
        begin_suppress_tokens: vec![220, tok.special().eot],
        alignment_heads: vec![(0, 0)],
        lang_to_id: Vec::new(),
        is_multilingual: false,
        max_initial_timestamp_index: Some(50),
        max_length: 448,
    }
}

const VOCAB: usize = 51864;

/// Writes `plan(window's first feature)` after the prompt (one token a
/// step, then end of text), whatever the search.
fn planned(tok: &WhisperTokenizer, plan: impl Fn(f32) -> Vec<u32> + 'static) -> Scripted {
    let sp = *tok.special();
    Scripted::new(VOCAB, move |window: &[f32], seq: &[u32]| {
        let sot = seq.iter().rposition(|&t| t == sp.sot).expect("sot");
        let mut begin = sot + 1;
        if seq.get(begin) == Some(&sp.no_timestamps) {
            begin += 1;
        }
        let generated = seq.len().saturating_sub(begin);
        let plan = plan(window.first().copied().unwrap_or(0.0));
        let next = plan.get(generated).copied().unwrap_or(sp.eot);
        Scripted::peaked(VOCAB, next, 30.0)
    })
}

/// A scripted backend that records the size of each `encode` batch.
struct Counting {
    inner: Scripted,
    batches: Vec<usize>,
}

impl WhisperBackend for Counting {
    forward_backend!(inner);

    fn encode(&mut self, windows: &[&[f32]]) -> Result<()> {
        self.batches.push(windows.len());
        self.inner.encode(windows)
    }
    fn start(&mut self, windows: &[usize]) -> Result<()> {
        self.inner.start(windows)
    }
}

/// 12 s of audio with speech at 1..2 s, 5..7 s and 10..11 s, each segment
/// filled with its own value (1, 2, 3) so a window tells its chunk.
fn three_segments() -> (Vec<f32>, Vec<Speech>) {
    let speech = vec![
        Speech {
            start: 16000,
            end: 32000,
        },
        Speech {
            start: 80000,
            end: 112000,
        },
        Speech {
            start: 160000,
            end: 176000,
        },
    ];
    let mut audio = vec![0.0f32; 192000];
    for (k, s) in speech.iter().enumerate() {
        audio[s.start as usize..s.end as usize].fill((k + 1) as f32);
    }
    (audio, speech)
}

fn run_pipeline(
    backend: &mut dyn WhisperBackend,
    tok: &WhisperTokenizer,
    audio: &[f32],
    speech: &[Speech],
    opts: &DecodeOptions,
    batched: &BatchedOptions,
) -> (Vec<Segment>, TranscriptionInfo) {
    let gen = english_config(tok);
    let pipeline = Pipeline {
        tokenizer: tok,
        gen: &gen,
        opts,
        batched,
    };
    let mut segments = Vec::new();
    let info = pipeline
        .run(Network::Plain(backend), audio, speech, &mut |s| {
            segments.push(s);
            Ok(())
        })
        .unwrap();
    (segments, info)
}

#[test]
fn recordings_batched_together_each_get_what_they_get_alone() {
    let Some(tok) = local_tokenizer() else { return };
    let (audio, speech) = three_segments();
    // the second recording: the first two segments, other values
    let mut other = audio[..120_000].to_vec();
    other
        .iter_mut()
        .filter(|x| **x > 0.0)
        .for_each(|x| *x += 3.0);
    let plan = |v: f32| vec![1000 + v as u32, 2000];
    let batched = BatchedOptions {
        batch_size: 2,
        chunk_length: 1.5,
        ..BatchedOptions::default()
    };
    let opts = BatchedOptions::decode_defaults();
    let sources = [(&audio[..], &speech[..]), (&other[..], &speech[..2])];
    let mut alone = Vec::new();
    for (a, s) in sources {
        let mut b = planned(&tok, plan);
        alone.push(run_pipeline(&mut b, &tok, a, s, &opts, &batched));
    }
    let gen = english_config(&tok);
    let pipeline = Pipeline {
        tokenizer: &tok,
        gen: &gen,
        opts: &opts,
        batched: &batched,
    };
    let mut b = Counting {
        inner: planned(&tok, plan),
        batches: Vec::new(),
    };
    let runs: Vec<Source> = sources
        .iter()
        .map(|&(audio, speech)| Source { audio, speech })
        .collect();
    let mut together = vec![Vec::new(); 2];
    let infos = pipeline
        .run_many(Network::Plain(&mut b), &runs, &mut |r, s| {
            together[r].push(s);
            Ok(())
        })
        .unwrap();
    // five chunks, two to a call: the second holds one of each recording
    assert_eq!(b.batches, vec![2, 2, 1]);
    for (r, (segments, info)) in alone.iter().enumerate() {
        assert_eq!(&together[r], segments, "recording {r}");
        assert_eq!(&infos[r], info);
    }
    assert_eq!(together[1].len(), 2);
    assert_eq!(together[1][1].tokens[0], 1005);
}

#[test]
fn chunks_are_encoded_batch_size_at_a_time_and_decoded_from_their_window() {
    let Some(tok) = local_tokenizer() else { return };
    let (audio, speech) = three_segments();
    // Each chunk writes one token telling its window: 1000 + its value.
    let plan = |v: f32| vec![1000 + v as u32];
    let mut b = Counting {
        inner: planned(&tok, plan),
        batches: Vec::new(),
    };
    // 1.5 s chunks: each segment alone (1 + 2 > 1.5, 2 + 1 > 1.5).
    let batched = BatchedOptions {
        batch_size: 2,
        chunk_length: 1.5,
        ..BatchedOptions::default()
    };
    let opts = BatchedOptions::decode_defaults();
    let (segs, info) = run_pipeline(&mut b, &tok, &audio, &speech, &opts, &batched);
    assert_eq!(b.batches, vec![2, 1]);
    let got: Vec<(usize, Vec<u32>, f64, f64, usize)> = segs
        .iter()
        .map(|s| (s.id, s.tokens.clone(), s.start, s.end, s.seek))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, vec![1001], 1.0, 2.0, 0),
            (2, vec![1002], 5.0, 7.0, 100),
            (3, vec![1003], 10.0, 11.0, 300),
        ]
    );
    assert_eq!(info.duration, 12.0);
    assert_eq!(
        (info.language.as_str(), info.language_probability),
        ("en", 1.0)
    );
    assert!(segs
        .iter()
        .all(|s| s.temperature == 0.0 && s.words.is_none()));

    // Batch size changes the encoder calls, not the results.
    for batch_size in [1, 3, 8] {
        let mut b = Counting {
            inner: planned(&tok, plan),
            batches: Vec::new(),
        };
        let batched = BatchedOptions {
            batch_size,
            ..batched.clone()
        };
        let (again, _) = run_pipeline(&mut b, &tok, &audio, &speech, &opts, &batched);
        assert_eq!(again, segs, "batch size {batch_size}");
        assert_eq!(b.batches.iter().sum::<usize>(), 3);
        assert!(b.batches.iter().all(|&n| n <= batch_size));
    }
}

#[test]
fn one_chunk_joins_the_speech_and_its_timestamps_map_back() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let (audio, speech) = three_segments();
    let ts = move |seconds: f64| sp.timestamp_begin + (seconds / 0.02).round() as u32;
    // Joined speech: 0..1 s, 1..3 s, 3..4 s.
    let plan = move |_v: f32| vec![ts(0.0), 1000, ts(0.9), ts(1.2), 1001, ts(3.5)];
    let mut b = planned(&tok, plan);
    let opts = DecodeOptions {
        without_timestamps: false,
        ..BatchedOptions::decode_defaults()
    };
    let (segs, _) = run_pipeline(
        &mut b,
        &tok,
        &audio,
        &speech,
        &opts,
        &BatchedOptions::default(),
    );
    let got: Vec<(f64, f64)> = segs.iter().map(|s| (s.start, s.end)).collect();
    // 0.9 s lies in the first segment (1..2 s), 1.2 s in the second
    // (5..7 s), 3.5 s in the third (10..11 s).
    assert_eq!(got, vec![(1.0, 1.9), (5.2, 10.5)]);
    // The window held the three segments end to end.
    let window = &b.encoded_log[0];
    assert_eq!((window[0], window[150], window[350]), (1.0, 2.0, 3.0));
    // then silence: the joined speech's maximum less 2
    assert_eq!(window[400], 3.0 - 2.0);
}

#[test]
fn every_segment_is_given_and_no_speech_decodes_nothing() {
    let Some(tok) = local_tokenizer() else { return };
    let (audio, speech) = three_segments();
    // Without suppress_blank the end of text may come first: an empty
    // segment, given all the same (the pipeline filters nothing).
    let opts = DecodeOptions {
        suppress_blank: false,
        ..BatchedOptions::decode_defaults()
    };
    let mut b = planned(&tok, |_| Vec::new());
    let (segs, _) = run_pipeline(
        &mut b,
        &tok,
        &audio,
        &speech,
        &opts,
        &BatchedOptions::default(),
    );
    assert_eq!(segs.len(), 1);
    assert_eq!(
        (segs[0].text.as_str(), segs[0].start, segs[0].end),
        ("", 1.0, 11.0)
    );
    assert!(segs[0].tokens.is_empty());

    let mut b = planned(&tok, |_| vec![1000]);
    let (segs, info) = run_pipeline(&mut b, &tok, &audio, &[], &opts, &BatchedOptions::default());
    assert!(segs.is_empty());
    assert!(b.encoded_log.is_empty());
    assert_eq!(info.duration, 12.0);
}

#[test]
fn every_chunk_gets_the_same_prompt() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let (audio, speech) = three_segments();
    let mut b = planned(&tok, |_| vec![1000]);
    let opts = DecodeOptions {
        initial_prompt: Some(InitialPrompt::Text("hello world".into())),
        prefix: Some("ignored".into()),
        condition_on_previous_text: true,
        ..BatchedOptions::decode_defaults()
    };
    let batched = BatchedOptions {
        chunk_length: 1.5,
        ..BatchedOptions::default()
    };
    run_pipeline(&mut b, &tok, &audio, &speech, &opts, &batched);
    // The initial prompt is encoded as it is (no leading space), no
    // previous text is added, and there is no prefix.
    let mut prompt = vec![sp.sot_prev];
    prompt.extend(tok.encode("hello world").unwrap());
    prompt.push(sp.sot);
    let firsts: Vec<&Vec<u32>> = b
        .fed_log
        .iter()
        .filter(|f| f.len() == prompt.len())
        .collect();
    assert_eq!(firsts.len(), 3);
    assert!(firsts.iter().all(|f| **f == prompt));
    assert_ne!(
        tok.encode("hello world").unwrap(),
        tok.encode(" hello world").unwrap()
    );
}

#[test]
fn options_that_cannot_work_are_refused() {
    let Some(tok) = local_tokenizer() else { return };
    let gen = english_config(&tok);
    let vad_path = crate::models::silero::default_weights_path();
    let Ok(vad) = Vad::load(&vad_path) else {
        eprintln!(
            "skipped: no Silero weights at {} (bash scripts/fetch_silero.sh)",
            vad_path.display()
        );
        return;
    };
    let mut b = planned(&tok, |_| vec![1000]);
    let cases = [
        (
            BatchedOptions::decode_defaults(),
            BatchedOptions {
                batch_size: 0,
                ..Default::default()
            },
            "batch_size",
        ),
        (
            DecodeOptions {
                word_timestamps: true,
                ..BatchedOptions::decode_defaults()
            },
            BatchedOptions::default(),
            "word_timestamps",
        ),
        (
            BatchedOptions::decode_defaults(),
            BatchedOptions {
                vad: SegmentOptions {
                    sample_rate: 8000,
                    ..BatchedOptions::default().vad
                },
                ..Default::default()
            },
            "vad",
        ),
    ];
    for (opts, batched, what) in cases {
        let err = transcribe_batched(
            Network::Plain(&mut b),
            &tok,
            &gen,
            &[0.0; 1600],
            &opts,
            &batched,
            &vad,
            |_| Ok(()),
        )
        .unwrap_err();
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
}
