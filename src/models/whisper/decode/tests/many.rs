//! Several recordings decoded together give each one what it gets alone.

use super::scripted::english_config;
use crate::models::whisper::decode::testing::Scripted;
use crate::models::whisper::decode::*;
use crate::models::whisper::tokenizer::tests::local_tokenizer;
use crate::models::whisper::WhisperTokenizer;

/// A backend whose plan (tokens after sot, each at logit `peak`, and the
/// no-speech logit at sot) is chosen by the window's level (its first
/// feature), and whose token row `r` attends encoder frames `[20 r, 20 r +
/// 20)`.
fn levelled(tok: &WhisperTokenizer, plans: Vec<(f32, Vec<u32>, f32, f32)>) -> Scripted {
    let sp = *tok.special();
    let vocab = 51864;
    let mut b = Scripted::new(vocab, move |window: &[f32], seq: &[u32]| {
        let level = window.first().copied().unwrap_or(0.0);
        let (_, plan, peak, no_speech) = plans
            .iter()
            .find(|p| p.0 == level)
            .expect("a plan for every level");
        let sot = seq.iter().rposition(|&t| t == sp.sot).expect("sot");
        let generated = seq.len() - sot - 1;
        let mut l = vec![0.0; vocab];
        if generated == 0 {
            l[sp.no_speech as usize] = *no_speech;
        }
        l[plan.get(generated).copied().unwrap_or(sp.eot) as usize] = *peak;
        l
    });
    b.attention = Some(Box::new(
        |_w: &[f32], tokens: &[u32], heads: &[(usize, usize)]| {
            let (t, f) = (tokens.len(), 1500);
            let mut a = vec![1e-6f32; heads.len() * t * f];
            for h in 0..heads.len() {
                for r in 0..t {
                    for j in (20 * r).min(f - 20)..(20 * r + 20).min(f) {
                        a[(h * t + r) * f + j] = 1.0;
                    }
                }
            }
            a
        },
    ));
    b
}

fn network<'a>(b: &'a mut Scripted, opts: &DecodeOptions) -> Network<'a> {
    if opts.word_timestamps {
        Network::Aligned(b)
    } else {
        Network::Plain(b)
    }
}

#[test]
fn recordings_decoded_together_each_get_what_they_get_alone() {
    let Some(tok) = local_tokenizer() else { return };
    let sp = *tok.special();
    let tb = sp.timestamp_begin;
    let mut repetitive = vec![tb];
    repetitive.extend(std::iter::repeat_n([314, 836, 470, 760, 13], 12).flatten());
    repetitive.extend([tb + 200, sp.eot]);
    let plans = vec![
        // a lone final timestamp: the next window starts 30 s on
        (
            0.0,
            vec![tb, 18435, tb + 100, tb + 100, 995, 13, tb + 250, sp.eot],
            10.0,
            0.0,
        ),
        // ends on a pair: cut at 5 s and decoded again from there
        (
            0.25,
            vec![
                tb,
                18435,
                tb + 100,
                tb + 100,
                995,
                tb + 250,
                tb + 250,
                sp.eot,
            ],
            10.0,
            0.0,
        ),
        // silence: skipped
        (0.5, vec![tb, 995, tb + 100, sp.eot], 1.0, 30.0),
        // repetitive at every temperature: falls back by sampling
        (0.75, repetitive, 30.0, 0.0),
    ];
    let audio = |level: f32, seconds: usize| vec![level; seconds * 16_000];
    let recordings = [
        audio(0.0, 65),
        audio(0.25, 12),
        audio(0.5, 20),
        audio(0.75, 50),
        audio(0.0, 3),
    ];
    let gen = english_config(&tok);
    for word_timestamps in [false, true] {
        let opts = DecodeOptions {
            word_timestamps,
            ..DecodeOptions::default()
        };
        let mut alone = Vec::new();
        for r in &recordings {
            let mut b = levelled(&tok, plans.clone());
            let mut segments = Vec::new();
            let info = transcribe(network(&mut b, &opts), &tok, &gen, r, &opts, |s| {
                segments.push(s);
                Ok(())
            })
            .unwrap();
            alone.push((segments, info));
        }
        assert!(alone[0].0.len() >= 4 && alone[2].0.is_empty() && alone[3].0[0].temperature == 1.0);

        let mut b = levelled(&tok, plans.clone());
        let features: Vec<Vec<f32>> = recordings.iter().map(|r| b.log_mel(r).unwrap()).collect();
        let inputs: Vec<Recording> = features
            .iter()
            .zip(&recordings)
            .map(|(f, r)| Recording {
                features: f,
                duration: r.len() as f64 / 16_000.0,
            })
            .collect();
        let mut together: Vec<Vec<Segment>> = vec![Vec::new(); recordings.len()];
        let infos = transcribe_many(
            network(&mut b, &opts),
            &tok,
            &gen,
            &inputs,
            &opts,
            3,
            |i, s| {
                together[i].push(s);
                Ok(())
            },
        )
        .unwrap();
        for (i, ((segments, info), got)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(got, segments, "recording {i}, words {word_timestamps}");
            assert_eq!(&infos[i], info);
        }
        // the five first windows in two encoder calls, then the rest one
        // window at a time
        assert_eq!(b.encode_calls[..2], [3, 2], "{:?}", b.encode_calls);
        assert!(b.encode_calls[2..].iter().all(|&n| n == 1));
    }
}

#[test]
fn a_batch_of_zero_is_refused() {
    let Some(tok) = local_tokenizer() else { return };
    let mut b = levelled(&tok, vec![(0.0, vec![], 1.0, 0.0)]);
    let features = b.log_mel(&[0.0; 16_000]).unwrap();
    let inputs = [Recording {
        features: &features,
        duration: 1.0,
    }];
    let opts = DecodeOptions::default();
    let r = transcribe_many(
        Network::Plain(&mut b),
        &tok,
        &english_config(&tok),
        &inputs,
        &opts,
        0,
        |_, _| Ok(()),
    );
    assert!(r.is_err());
}
