//! GPU forms of the graph's ops, one file per op family. The translator asks
//! each [`BUILDERS`] entry in turn; the first that handles an op builds it.

pub mod attention;
pub mod conv;
pub mod ctc;
pub mod elementwise;
pub mod linear;
pub mod lstm;
pub mod norm;
pub mod pulse;
pub mod shape;
pub mod stft;

use super::op::Builder;

/// Every GPU op builder.
pub const BUILDERS: &[Builder] = &[
    elementwise::build,
    linear::build,
    shape::build,
    pulse::build,
    norm::build,
    conv::build,
    stft::build,
    attention::build,
    ctc::build,
    lstm::build,
];
