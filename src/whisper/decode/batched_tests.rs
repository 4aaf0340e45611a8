//! The batched mode over a scripted backend.
