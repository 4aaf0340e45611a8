//! One network's decoder shared by many decodings at once: each decoding
//! is a sequence of the cache reading an encoder window of its own, and
//! the steps of any of them run together, one row each (the live streams
//! of a server: a decoder step costs about the same for one row as for
//! several, its weights read once).

use super::net::{CrossFrom, NetRunners, WhisperNet};
use crate::ops::Tensor;
use crate::{Error, Result};

impl<R: NetRunners> WhisperNet<R> {
    /// Room for `slots` decodings at once, a window each, and the
    /// sequence a padded step's extra rows feed (a GPU's steps are planned
    /// for a few row counts).
    pub fn reserve_slots(&mut self, slots: usize) -> Result<()> {
        self.runners.reserve_sequences(slots + 1)?;
        self.runners.reserve_windows(slots)
    }

    /// Sets encoded window `window` from encoder frames (`[1500, d]`
    /// row-major: a streamed encoder's frames and tail), the other windows
    /// kept.
    pub fn set_window(&mut self, window: usize, frames: &[f32]) -> Result<()> {
        let (rows, d) = (self.cfg.max_source_positions, self.cfg.d_model);
        if frames.len() != rows * d {
            return Err(Error::Input {
                name: "encoder".into(),
                reason: format!("a window has {} values, not {rows} x {d}", frames.len()),
            });
        }
        let enc = Tensor::from_vec(vec![1, rows, d], frames.to_vec())?;
        self.runners.cross(1)?.step(&[&enc])?;
        if self
            .runners
            .cross_on_device(CrossFrom::Frames, Some(window))?
        {
            return Ok(());
        }
        let cross = self.runners.cross(1)?;
        let layers = self.cfg.decoder_layers;
        let k: Vec<&Tensor> = (0..layers).map(|l| cross.output(2 * l)).collect();
        let v: Vec<&Tensor> = (0..layers).map(|l| cross.output(2 * l + 1)).collect();
        Ok(self.cache.set_window(window, &k, &v)?)
    }

    /// Starts sequence `seq` again over window `window`, the others kept.
    pub fn restart(&mut self, seq: usize, window: usize) -> Result<()> {
        Ok(self.cache.restart(seq, window)?)
    }

    /// The next feeds run over sequences `rows`, in that order (`None`:
    /// all of them).
    pub fn select(&mut self, rows: Option<&[usize]>) -> Result<()> {
        Ok(self.cache.select(rows)?)
    }

    /// Keeps the cross-attention weights of `heads` for every sequence fed
    /// from now on (`None`: stop); false where the steps cannot.
    pub fn record_all(&mut self, heads: Option<&[(usize, usize)]>) -> Result<bool> {
        if !self.cache.can_record() {
            return Ok(false);
        }
        self.cache.record(heads.map(<[_]>::to_vec))?;
        Ok(true)
    }

    /// The weights sequence `seq` kept since the last take: per head,
    /// `[rows, frames]`.
    pub fn take_attention_of(&mut self, seq: usize) -> Vec<Vec<f32>> {
        self.cache.take_recorded_of(seq)
    }
}
