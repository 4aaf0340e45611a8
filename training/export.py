"""Export trained weights to the shipped format (models/ARCHITECTURE.md).

usage: python3 export.py SRC OUT_DIR [--name NAME]
SRC: a dir with weights*.safetensors (train.py's shards) or a ckpt.pt.
Writes OUT_DIR/model.safetensors (all tensors f16), config.json, tokens.txt.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
from common import TOKENS  # noqa: E402


def load_src(src):
    if os.path.isdir(src):
        from safetensors.torch import load_file
        sd = {}
        for fn in sorted(os.listdir(src)):
            if fn.startswith("weights") and fn.endswith(".safetensors"):
                sd.update(load_file(os.path.join(src, fn)))
        return sd
    return torch.load(src, map_location="cpu")["model"]


def load_shipped(model_dir):
    """model.safetensors (f16) -> ConformerCTC in f32 on the CPU."""
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg = {k: v for k, v in cfg.items() if k in M.CONFIG}
    m = M.ConformerCTC(cfg)
    sd = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    m.load_state_dict(sd, strict=True)
    return m.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--name", default="pulsed-en-ctc")
    a = ap.parse_args()
    from safetensors.torch import save_file
    sd = load_src(a.src)
    m = M.ConformerCTC()
    m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)  # checks names/shapes
    out = {k: v.detach().to(torch.float16).contiguous() for k, v in m.state_dict().items()}
    os.makedirs(a.out, exist_ok=True)
    save_file(out, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt", "name": a.name})
    cfg = {"name": a.name}
    cfg.update(M.CONFIG)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "tokens.txt"), "w") as f:
        f.write("\n".join(TOKENS) + "\n")
    n = sum(v.numel() for v in out.values())
    print(f"wrote {a.out}: {len(out)} tensors, {n} values (f16)")


if __name__ == "__main__":
    main()
