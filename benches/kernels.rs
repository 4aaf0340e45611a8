//! CPU kernel figures: GFLOP/s of encoder-sized matmuls and convolutions
//! beside the single-core peak measured on this machine (being written).
fn main() {}
