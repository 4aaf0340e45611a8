//! Whole-recording tests of the decoding loop over a scripted backend.
