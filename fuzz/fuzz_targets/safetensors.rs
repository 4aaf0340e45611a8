//! Weight files (`Weights::from_bytes`, what `Weights::load` reads a
//! `.safetensors` file with), then every tensor looked up as a model does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pulsed::weights::Weights;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = Weights::from_bytes(data, "fuzz.safetensors") {
        for name in w.names() {
            if let Some(t) = w.tensor(name) {
                let shape = t.shape().to_vec();
                let _ = w.f32(name, &shape);
            }
        }
    }
});
