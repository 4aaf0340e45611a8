//! Clients that misbehave on purpose (`pulsed load --misbehaving N`), so
//! that a run shows whether they slow the well-behaved ones: they start
//! between the well-behaved clients, which keep the start times of a run
//! without them, and are left out of the report's figures.

use std::fmt;

/// What a client does to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Streams its recording and reads every event: the figures' clients.
    Normal,
    /// Streams its recording with malformed messages among the appends
    /// (text that is not JSON, bad base64, an unknown event, a wrong
    /// sample rate, an append without audio).
    Garbage,
    /// Sends half its recording, then neither sends nor reads for
    /// `--final-timeout` (or to the run's end): the server's writes to it
    /// back up.
    Stall,
    /// Sends half its recording, then closes the socket without a close
    /// frame.
    Drop,
    /// Sends half its recording, then one message larger than the server
    /// takes (2 MiB).
    Huge,
}

/// The misbehaving roles, taken in turn.
pub const MISBEHAVING: [Role; 4] = [Role::Garbage, Role::Stall, Role::Drop, Role::Huge];

/// Bytes of [`Role::Huge`]'s message: past `pulsed serve`'s default limit
/// (`--max-message-kb 1024`).
pub const HUGE_BYTES: usize = 2 << 20;

/// A malformed message every this many appends ([`Role::Garbage`]).
pub const GARBAGE_EVERY: usize = 8;

/// [`Role::Garbage`]'s messages: text that is not JSON, bad base64, an
/// unknown event, a sample rate of 7 Hz, an append without audio, control
/// characters.
const GARBAGE: [&str; 6] = [
    r#"{"type": "input_audio_buffer.append", "audio": "#,
    r#"{"type": "input_audio_buffer.append", "audio": "%%% not base64 %%%"}"#,
    r#"{"type": "no.such.event"}"#,
    r#"{"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 7}}}}}"#,
    r#"{"type": "input_audio_buffer.append"}"#,
    "\u{0}\u{1}binary-ish text",
];

impl Role {
    /// The role of misbehaving client `j`.
    pub fn misbehaving(j: usize) -> Role {
        MISBEHAVING[j % MISBEHAVING.len()]
    }

    pub fn is_normal(self) -> bool {
        self == Role::Normal
    }

    /// The malformed message a [`Role::Garbage`] client sends before append
    /// `sent` (after every [`GARBAGE_EVERY`]), if any: each kind in turn.
    pub fn garbage(self, sent: usize) -> Option<&'static str> {
        if self != Role::Garbage || sent % GARBAGE_EVERY != GARBAGE_EVERY / 2 {
            return None;
        }
        Some(GARBAGE[(sent / GARBAGE_EVERY) % GARBAGE.len()])
    }

    /// Whether the client stops behaving once it has sent `sent` of
    /// `blocks` appends ([`Role::Stall`], [`Role::Drop`], [`Role::Huge`]).
    pub fn turns_at(self, sent: usize, blocks: usize) -> bool {
        matches!(self, Role::Stall | Role::Drop | Role::Huge) && sent == blocks / 2
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Normal => "normal",
            Role::Garbage => "garbage",
            Role::Stall => "stall",
            Role::Drop => "drop",
            Role::Huge => "huge",
        })
    }
}

/// Where client `i` of `clients` well-behaved ones starts within the ramp
/// (0 to 1), and misbehaving client `j` of `misbehaving`: halfway between
/// two well-behaved starts, so the well-behaved keep the start times of a
/// run without them.
pub fn start_fraction(role: Role, i: usize, clients: usize, misbehaving: usize) -> f64 {
    match role {
        Role::Normal => i as f64 / clients.max(1) as f64,
        _ => (i as f64 + 0.5) / misbehaving.max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misbehaving_clients_take_each_role_in_turn_and_start_between_the_others() {
        let roles: Vec<Role> = (0..5).map(Role::misbehaving).collect();
        assert_eq!(
            roles,
            [
                Role::Garbage,
                Role::Stall,
                Role::Drop,
                Role::Huge,
                Role::Garbage
            ]
        );
        // the well-behaved start as they would alone
        assert_eq!(start_fraction(Role::Normal, 3, 4, 0), 0.75);
        assert_eq!(start_fraction(Role::Normal, 3, 4, 2), 0.75);
        assert_eq!(start_fraction(Role::Drop, 1, 4, 2), 0.75);
        assert_eq!(start_fraction(Role::Garbage, 0, 4, 1), 0.5);
    }

    #[test]
    fn a_garbage_client_sends_every_kind_of_bad_message_and_the_others_none() {
        let sent: Vec<&str> = (0..100).filter_map(|s| Role::Garbage.garbage(s)).collect();
        // appends 4, 12, ..., 92
        assert_eq!(sent.len(), 12);
        let kinds: std::collections::BTreeSet<&&str> = sent.iter().collect();
        assert_eq!(kinds.len(), 6);
        // none of them is a well-formed append
        for m in &sent {
            let v: Option<serde_json::Value> = serde_json::from_str(m).ok();
            let good_append = v.as_ref().is_some_and(|v| {
                v["type"] == "input_audio_buffer.append"
                    && v["audio"].is_string()
                    && !v["audio"].as_str().unwrap_or_default().contains('%')
            });
            assert!(!good_append, "{m}");
        }
        for r in [Role::Normal, Role::Stall, Role::Drop, Role::Huge] {
            assert!((0..100).all(|s| r.garbage(s).is_none()), "{r}");
        }
        assert!(Role::Stall.turns_at(5, 10) && !Role::Stall.turns_at(4, 10));
        assert!(!Role::Normal.turns_at(5, 10) && !Role::Garbage.turns_at(5, 10));
    }
}
