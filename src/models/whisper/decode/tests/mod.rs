//! Whole-recording tests of the decoding loop: over a scripted backend
//! (`scripted.rs`: seeking, segment splitting, silence skips, fallback,
//! prompts, word timestamps; `many.rs`: several recordings batched) with
//! the local tiny.en tokenizer, and over
//! the real CPU backend against faster-whisper's outputs (`parity.rs`).

mod many;
mod parity;
mod scripted;
