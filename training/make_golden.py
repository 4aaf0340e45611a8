"""Golden intermediate tensors for the Rust port, computed on the CPU in f32
from the shipped (f16-rounded) weights.

usage: python3 make_golden.py MODEL_DIR WAV OUT.safetensors
Tensors (f32): features [T, 80] (normalised log-mel), subsample [T2, 256],
encoder [T2, 256] (after the last block), log_probs [T2, 29]; plus `waveform` [S].
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
from common import ctc_greedy  # noqa: E402
from export import load_shipped  # noqa: E402
from synth import read_wav  # noqa: E402


@torch.no_grad()
def main():
    model_dir, wav_path, out = sys.argv[1:4]
    torch.set_num_threads(1)
    M.EXPLICIT_ATTENTION = True
    m = load_shipped(model_dir)
    x = torch.from_numpy(read_wav(wav_path).astype(np.float32) / 32768.0)[None]
    f = m.frontend(x)
    sub, enc = m.encode(f, return_all=True)
    lp = F.log_softmax(m.ctc(enc), -1)
    g = {"waveform": x[0], "features": f[0], "subsample": sub[0], "encoder": enc[0], "log_probs": lp[0]}
    g = {k: v.contiguous().float() for k, v in g.items()}
    from safetensors.torch import save_file
    save_file(g, out)
    for k, v in g.items():
        print(k, tuple(v.shape))
    print("greedy:", ctc_greedy(lp[0].argmax(-1).tolist()))


if __name__ == "__main__":
    main()
