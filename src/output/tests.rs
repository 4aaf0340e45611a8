//! Exact output strings of every writer for a small transcript.

use serde_json::{json, Map, Value};

use super::*;
use crate::decode::Word;

fn word(text: &str, start_s: f64, end_s: f64, confidence: f32) -> Word {
    Word {
        text: text.into(),
        start_s,
        end_s,
        confidence,
    }
}

fn hello() -> Transcript {
    Transcript {
        text: "hello world".into(),
        words: vec![
            word("hello", 0.48, 0.92, 0.9),
            word("world", 1.0, 1.2400000000000002, 0.756789),
        ],
        duration_s: 2.0100000000000002,
    }
}

fn render(
    format: Format,
    t: &Transcript,
    extra: &Map<String, Value>,
    opts: &WriteOptions,
) -> String {
    let mut buf = Vec::new();
    write_transcript_with(&mut buf, format, "a.wav", t, extra, opts).unwrap();
    String::from_utf8(buf).unwrap()
}

fn plain(format: Format, t: &Transcript) -> String {
    let mut buf = Vec::new();
    write_transcript(&mut buf, format, "a.wav", t, &Map::new()).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn text_line_with_and_without_file_name() {
    assert_eq!(plain(Format::Text, &hello()), "hello world\n");
    let opts = WriteOptions {
        prefix_file_name: true,
        ..WriteOptions::default()
    };
    assert_eq!(
        render(Format::Text, &hello(), &Map::new(), &opts),
        "a.wav: hello world\n"
    );
    assert_eq!(plain(Format::Text, &Transcript::default()), "\n");
}

#[test]
fn jsonl_object_in_order_with_extras() {
    assert_eq!(
        plain(Format::Jsonl, &hello()),
        concat!(
            r#"{"file":"a.wav","text":"hello world","duration_s":2.01,"words":["#,
            r#"{"word":"hello","start":0.48,"end":0.92,"confidence":0.9},"#,
            r#"{"word":"world","start":1.0,"end":1.24,"confidence":0.7568}"#,
            "]}\n"
        )
    );
    let mut extra = Map::new();
    extra.insert("rtf".into(), json!(0.05));
    extra.insert("duration_s".into(), json!(2.0085));
    extra.insert("model".into(), json!("pulsed-en-ctc"));
    let out = render(Format::Jsonl, &hello(), &extra, &WriteOptions::default());
    assert!(
        out.starts_with(r#"{"file":"a.wav","text":"hello world","duration_s":2.0085,"words":[{"#)
    );
    assert!(out.ends_with("}],\"model\":\"pulsed-en-ctc\",\"rtf\":0.05}\n"));
    // One line, valid JSON, same content.
    assert_eq!(out.matches('\n').count(), 1);
    let v: Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(v["words"][1]["word"], "world");
    assert_eq!(v["duration_s"], 2.0085);
    // Quotes and control characters in names are escaped.
    let mut buf = Vec::new();
    write_transcript(
        &mut buf,
        Format::Jsonl,
        "we\"ird\n.wav",
        &Transcript::default(),
        &Map::new(),
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(buf).unwrap(),
        "{\"file\":\"we\\\"ird\\n.wav\",\"text\":\"\",\"duration_s\":0.0,\"words\":[]}\n"
    );
}

#[test]
fn srt_and_vtt_documents() {
    assert_eq!(
        plain(Format::Srt, &hello()),
        "1\n00:00:00,480 --> 00:00:01,240\nhello world\n\n"
    );
    assert_eq!(
        plain(Format::Vtt, &hello()),
        "WEBVTT\n\n00:00:00.480 --> 00:00:01.240\nhello world\n\n"
    );
    assert_eq!(plain(Format::Srt, &Transcript::default()), "");
    assert_eq!(plain(Format::Vtt, &Transcript::default()), "WEBVTT\n\n");
}

#[test]
fn cues_split_at_42_characters_and_5_seconds() {
    // Nine 4-letter words 0.5 s apart: 42 characters fit 8 of them (8*4+7 = 39,
    // a ninth makes 44).
    let words: Vec<Word> = (0..9)
        .map(|i| word("abcd", i as f64 * 0.5, i as f64 * 0.5 + 0.4, 1.0))
        .collect();
    let c = cues(&words, 42, 5.0);
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].text, ["abcd"; 8].join(" "));
    assert_eq!((c[0].start_s, c[0].end_s), (0.0, 3.9));
    assert_eq!(c[1].text, "abcd");
    // Slow words: the 5 s limit splits first.
    let slow: Vec<Word> = (0..4)
        .map(|i| word("a", i as f64 * 2.0, i as f64 * 2.0 + 1.0, 1.0))
        .collect();
    let c = cues(&slow, 42, 5.0);
    assert_eq!(
        c.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
        ["a a a", "a"]
    );
    // A word over the limit stands alone.
    let long = vec![
        word("x", 0.0, 0.1, 1.0),
        word(&"y".repeat(50), 0.2, 1.0, 1.0),
        word("z", 1.1, 1.2, 1.0),
    ];
    let c = cues(&long, 42, 5.0);
    assert_eq!(c.len(), 3);
    let mut t = hello();
    t.words = words;
    assert_eq!(
        plain(Format::Srt, &t),
        format!(
            "1\n00:00:00,000 --> 00:00:03,900\n{}\n\n2\n00:00:04,000 --> 00:00:04,400\nabcd\n\n",
            ["abcd"; 8].join(" ")
        )
    );
}

#[test]
fn timestamps() {
    assert_eq!(format_timestamp(0.0, ','), "00:00:00,000");
    assert_eq!(format_timestamp(1.24, ','), "00:00:01,240");
    assert_eq!(format_timestamp(1.24, '.'), "00:00:01.240");
    assert_eq!(format_timestamp(3723.456, ','), "01:02:03,456");
    assert_eq!(format_timestamp(59.9996, '.'), "00:01:00.000");
    assert_eq!(format_timestamp(-3.0, ','), "00:00:00,000");
    assert_eq!(format_timestamp(f64::NAN, ','), "00:00:00,000");
    assert_eq!(format_timestamp(360_000.0, ','), "100:00:00,000");
}

#[test]
fn error_lines() {
    let mut buf = Vec::new();
    write_error_line(&mut buf, Format::Jsonl, "b.wav", &"b.wav: truncated: \"x\"").unwrap();
    write_error_line(&mut buf, Format::Text, "b.wav", &"two\nlines").unwrap();
    write_error_line(&mut buf, Format::Srt, "c.wav", &"bad").unwrap();
    assert_eq!(
        String::from_utf8(buf).unwrap(),
        concat!(
            "{\"file\":\"b.wav\",\"error\":\"b.wav: truncated: \\\"x\\\"\"}\n",
            "b.wav: error: two lines\n",
            "c.wav: error: bad\n"
        )
    );
}

#[test]
fn format_names_round_trip() {
    for f in Format::ALL {
        assert_eq!(f.to_string().parse::<Format>().unwrap(), f);
    }
    assert_eq!("TXT".parse::<Format>().unwrap(), Format::Text);
    assert_eq!("json".parse::<Format>().unwrap(), Format::Jsonl);
    assert_eq!(" WebVTT ".parse::<Format>().unwrap(), Format::Vtt);
    let e = "csv".parse::<Format>().unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown output format \"csv\" (expected text, jsonl, srt or vtt)"
    );
    assert_eq!(Format::Text.extension(), "txt");

    // Usable as a clap argument.
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    }
    assert_eq!(
        Cli::try_parse_from(["x", "--format", "srt"])
            .unwrap()
            .format,
        Format::Srt
    );
    assert_eq!(
        Cli::try_parse_from(["x", "--format", "webvtt"])
            .unwrap()
            .format,
        Format::Vtt
    );
    assert_eq!(Cli::try_parse_from(["x"]).unwrap().format, Format::Text);
    assert!(Cli::try_parse_from(["x", "--format", "csv"]).is_err());
}

#[test]
fn decoded_transcript_end_to_end() {
    use crate::decode::{FrameTiming, GreedyDecoder, Tokens};
    let tokens = Tokens::from_lines(["<blk>", "<sp>", "h", "i"]).unwrap();
    let mut d = GreedyDecoder::new(tokens, FrameTiming::new(0.04)).unwrap();
    d.push_frames(
        0,
        &[0, 2, 2, 0, 3, 1, 3, 0],
        &[0.0, -0.1, -0.1, 0.0, -0.2, 0.0, -0.5, 0.0],
    )
    .unwrap();
    let t = d.finish();
    assert_eq!(
        plain(Format::Jsonl, &t),
        concat!(
            r#"{"file":"a.wav","text":"hi i","duration_s":0.32,"words":["#,
            r#"{"word":"hi","start":0.04,"end":0.2,"confidence":0.8752},"#,
            r#"{"word":"i","start":0.24,"end":0.28,"confidence":0.6065}]}"#,
            "\n"
        )
    );
    assert_eq!(
        plain(Format::Vtt, &t),
        "WEBVTT\n\n00:00:00.040 --> 00:00:00.280\nhi i\n\n"
    );
}
