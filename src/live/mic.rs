//! Microphone capture with cpal (feature `mic`). The device callback only
//! downmixes into a lock-free ring buffer (no allocation, no lock); a helper
//! thread resamples to the model's rate and feeds the live transcriber.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use cpal::{FromSample, SampleFormat, SizedSample};
use ringbuf::traits::{Consumer, Producer, Split};
use ringbuf::HeapRb;

use super::AudioInput;
use crate::audio::resample::StreamResampler;
use crate::{Error, Result};

/// A running capture; dropping it stops the device stream and the resampler.
pub struct MicCapture {
    _stream: cpal::Stream,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Samples the device delivered that did not fit the ring buffer.
    pub dropped: Arc<AtomicU64>,
}

impl Drop for MicCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts capturing the default input device into `input` at `rate` Hz mono.
pub fn capture_default_input(mut input: AudioInput, rate: u32) -> Result<MicCapture> {
    let host = cpal::default_host();
    let device = host
        .default_input_device()
        .ok_or_else(|| Error::Other("no default audio input device".into()))?;
    let config = device
        .default_input_config()
        .map_err(|e| Error::Other(format!("audio input device: {e}")))?;
    let channels = usize::from(config.channels()).max(1);
    let device_rate = config.sample_rate() as u32;
    let (mut prod, mut cons) = HeapRb::<f32>::new(device_rate as usize * 2).split();
    let dropped = Arc::new(AtomicU64::new(0));
    let drops = dropped.clone();
    let on_data = move |mono: f32| {
        if prod.try_push(mono).is_err() {
            drops.fetch_add(1, Ordering::Relaxed);
        }
    };
    let err_fn = |e| eprintln!("pulsed: audio input: {e}");
    let stream = match config.sample_format() {
        SampleFormat::I8 => build::<i8>(&device, &config.into(), channels, on_data, err_fn),
        SampleFormat::I16 => build::<i16>(&device, &config.into(), channels, on_data, err_fn),
        SampleFormat::I32 => build::<i32>(&device, &config.into(), channels, on_data, err_fn),
        SampleFormat::U8 => build::<u8>(&device, &config.into(), channels, on_data, err_fn),
        SampleFormat::U16 => build::<u16>(&device, &config.into(), channels, on_data, err_fn),
        SampleFormat::F32 => build::<f32>(&device, &config.into(), channels, on_data, err_fn),
        other => {
            return Err(Error::Other(format!(
                "audio input sample format {other} is not supported"
            )))
        }
    }?;
    stream
        .play()
        .map_err(|e| Error::Other(format!("cannot start audio input: {e}")))?;
    let mut resampler = StreamResampler::new(device_rate, rate)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::spawn(move || {
        let (mut buf, mut out) = (vec![0f32; 4096], Vec::new());
        while !stopping.load(Ordering::SeqCst) {
            let n = cons.pop_slice(&mut buf);
            if n == 0 {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            out.clear();
            if resampler.push(&buf[..n], &mut out).is_err() {
                break;
            }
            input.write(&out);
        }
    });
    Ok(MicCapture {
        _stream: stream,
        stop,
        thread: Some(thread),
        dropped,
    })
}

fn build<T>(
    device: &cpal::Device,
    config: &cpal::StreamConfig,
    channels: usize,
    mut sink: impl FnMut(f32) + Send + 'static,
    err_fn: impl FnMut(cpal::Error) + Send + 'static,
) -> Result<cpal::Stream>
where
    T: SizedSample,
    f32: FromSample<T>,
{
    device
        .build_input_stream(
            *config,
            move |data: &[T], _: &cpal::InputCallbackInfo| {
                for frame in data.chunks(channels) {
                    let sum: f32 = frame.iter().map(|&s| s.to_sample::<f32>()).sum();
                    sink(sum / frame.len() as f32);
                }
            },
            err_fn,
            None,
        )
        .map_err(|e| Error::Other(format!("cannot open audio input: {e}")))
}
