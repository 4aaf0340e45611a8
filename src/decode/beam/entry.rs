//! A prefix in the beam ([`Entry`]) and in the next frame's beam while it is
//! built ([`Candidate`]).

use super::logaddexp;
use super::spans::NO_SPAN;
use super::trie::ROOT;

/// A prefix in the beam, with the best alignment of each state.
pub(super) struct Entry {
    pub(super) node: u32,
    pub(super) pb: f64,
    pub(super) pnb: f64,
    pub(super) vb: f64,
    pub(super) vnb: f64,
    pub(super) path_b: u32,
    pub(super) path_nb: u32,
}

impl Entry {
    /// The empty prefix before any frame.
    pub(super) fn start() -> Entry {
        Entry {
            node: ROOT,
            pb: 0.0,
            pnb: f64::NEG_INFINITY,
            vb: 0.0,
            vnb: f64::NEG_INFINITY,
            path_b: NO_SPAN,
            path_nb: NO_SPAN,
        }
    }

    pub(super) fn total(&self) -> f64 {
        logaddexp(self.pb, self.pnb)
    }

    /// The better of the two states' best alignments: (score, ends in blank).
    pub(super) fn best(&self) -> (f64, bool) {
        if self.vb >= self.vnb {
            (self.vb, true)
        } else {
            (self.vnb, false)
        }
    }

    pub(super) fn path(&self, blank_state: bool) -> u32 {
        if blank_state {
            self.path_b
        } else {
            self.path_nb
        }
    }
}

/// How a candidate's best non-blank alignment came about.
#[derive(Clone, Copy)]
pub(super) enum NbOrigin {
    /// The parent's last token repeated (the path ends in the same span).
    Repeat { parent: usize },
    /// A new token appended to the parent's blank-or-nonblank best path.
    Append {
        parent: usize,
        from_blank: bool,
        tok: usize,
        logp: f64,
    },
}

/// A prefix of the next frame's beam, with back-pointers instead of paths.
pub(super) struct Candidate {
    pub(super) node: u32,
    pub(super) pb: f64,
    pub(super) pnb: f64,
    pub(super) vb: f64,
    pub(super) vnb: f64,
    /// (parent index, parent path ends in blank) of the best blank-ending alignment.
    pub(super) b_origin: Option<(usize, bool)>,
    pub(super) nb_origin: Option<NbOrigin>,
}
