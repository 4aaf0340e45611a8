//! `pulsed serve` end to end: the server in this process on a free port,
//! spoken to by an HTTP client and a WebSocket client as OpenAI's clients
//! speak. Transcripts must equal the library's on the same files.
#![cfg(feature = "serve")]

mod harness;
mod http;
mod load;
mod realtime;
