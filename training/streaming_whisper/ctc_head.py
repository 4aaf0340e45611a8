"""A CTC head over a streaming student's encoder output (issue 20, route 1's
"a CTC head for instant partials"): the encoder stays frozen, so the Whisper
decoder's final lines are the student's as before, and the head turns each
encoder frame into characters as soon as the frame is known.

Two heads learn side by side on the same frozen frames (one encoder pass a
step): `linear` (d -> vocab) and `mlp` (d -> hidden -> GELU -> vocab). The
vocabulary is the shipped CTC model's characters (training/common.py), so
pulsed's CTC decoders and word LM read the head as they read that model.

Transcripts: espeak's sentences and the real set's teacher transcripts, as
the sets store them (normalised to the 28 characters). One utterance in 50
of each extra set is held out for the greedy CER/WER printed at the end.

usage (GPU machine, after run_gpu.sh's prepare and stage calls):
    RUN_SCRIPT=ctc_head.py SHARES=real:0.4 bash training/streaming_whisper/run_gpu.sh 545 \
        --init /tmp/distill/init --context 8:6 --copies --balance 0.5
"""
import argparse
import glob
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import data  # noqa: E402
from common import TOKENS, cer_wer, ctc_greedy, text_to_ids  # noqa: E402
from distill import LEFT, Mixture, batch, features, log  # noqa: E402
from encoder import Encoder, mel_filters  # noqa: E402

HELD_EVERY = 50


class MlpHead(nn.Module):
    """d -> hidden -> GELU -> vocab, named as pulsed's folder reads it."""

    def __init__(self, d, vocab, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def tensors(self):
        return {"ctc.hidden.weight": self.fc1.weight, "ctc.hidden.bias": self.fc1.bias,
                "ctc.out.weight": self.fc2.weight, "ctc.out.bias": self.fc2.bias}

    def load(self, tensors):
        with torch.no_grad():
            for k, p in self.tensors().items():
                p.copy_(tensors[k].float())
        return self


class Heads(nn.Module):
    def __init__(self, d, vocab, hidden):
        super().__init__()
        self.linear = nn.Linear(d, vocab)
        self.mlp = MlpHead(d, vocab, hidden)

    def forward(self, x):
        return {"linear": self.linear(x), "mlp": self.mlp(x)}

    def tensors(self, kind):
        """The head's tensors under the names pulsed's folder reads."""
        if kind == "linear":
            return {"ctc.out.weight": self.linear.weight, "ctc.out.bias": self.linear.bias}
        return self.mlp.tensors()


def ctc_loss(logits, texts, n_frames):
    """Mean CTC loss (per target character, as F.ctc_loss's mean) of
    [B, T, vocab] logits against each window's sentences."""
    tgt, tgt_len = targets(texts, logits.device)
    lp = logits.float().log_softmax(-1).transpose(0, 1)
    return F.ctc_loss(lp, tgt, n_frames, tgt_len, blank=0, zero_infinity=True)


def hold_out(mix):
    """Drops every HELD_EVERY-th utterance of each extra set from the draws;
    returns them as (set, index) pairs."""
    held = []
    for k in range(1, len(mix.sets)):
        if mix.sources[k] is None:
            sys.exit("ctc_head.py: the extra sets need --balance (their utterances name sources)")
        idx, w = mix.sources[k]
        keep = []
        for ix in idx:
            held += [(mix.sets[k], i) for i in ix if i % HELD_EVERY == 0]
            keep.append([i for i in ix if i % HELD_EVERY != 0] or ix)
        mix.sources[k] = (keep, w)
    return held


def targets(texts, device):
    seqs = [torch.tensor(text_to_ids(" ".join(said)), dtype=torch.long) for said in texts]
    return torch.cat(seqs).to(device), torch.tensor([len(s) for s in seqs], device=device)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--text", required=True, help="unused (run_gpu.sh passes it)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--init", required=True, help="dir of the student's student-*.safetensors")
    ap.add_argument("--context", default="8:6", help="chunk:right of the student")
    ap.add_argument("--copies", action="store_true")
    ap.add_argument("--extra", default=None)
    ap.add_argument("--balance", type=float, default=0.5)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--deadline", type=float, default=500)
    ap.add_argument("--total-steps", type=int, default=10 ** 9)
    ap.add_argument("--held", type=int, default=512, help="held-out utterances of each kind evaluated at the end")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--decoder", default=None, help="unused (run_gpu.sh passes it when staged)")
    ap.add_argument("--state", default=None, help="unused")
    args = ap.parse_args()
    from safetensors.torch import load_file, save_file

    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    cfg = json.load(open(os.path.join(args.teacher, "config.json")))
    w = {}
    for f in sorted(glob.glob(os.path.join(args.teacher, "encoder*.safetensors"))):
        w.update(load_file(f))
    for f in sorted(glob.glob(os.path.join(args.init, "student-*.safetensors"))):
        w.update(load_file(f))
    enc = Encoder(cfg).load(w).to(device).eval()
    for p in enc.parameters():
        p.requires_grad_(False)
    chunk, right = (int(v) for v in args.context.split(":"))
    ctx = (chunk, LEFT, right) + (("copies",) if args.copies else ())

    train = data.AudioSet(args.work, "distill_train", device)
    held_es = data.AudioSet(args.work, "distill_held", device)
    sets, rest = [], 1.0
    for item in (args.extra.split(",") if args.extra else []):
        name, share = item.rsplit(":", 1)
        ds = data.AudioSet(args.work, name, device)
        sets.append((ds, float(share)))
        rest -= float(share)
        log(f"data: {name} {len(ds)} utts {ds.hours():.2f} h, share {float(share)}")
    mix = Mixture([(train, rest)] + sets, args.balance)
    held_real = hold_out(mix)
    log(f"data: espeak {len(train)} utts; held out {len(held_es)} espeak, {len(held_real)} of the extra sets")

    heads = Heads(cfg["d_model"], len(TOKENS), args.hidden).to(device)
    opt = torch.optim.AdamW(heads.parameters(), lr=args.lr, weight_decay=1e-4)
    filters = mel_filters(cfg["num_mel_bins"]).to(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    rng = random.Random(args.seed)

    def frames(wav, lens):
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out, _ = enc(features(wav, lens, filters), ctx)
        return out.float(), ((lens + 319) // 320).clamp(max=out.shape[1])

    def evaluate(pairs):
        """Greedy CER/WER of each head over utterances, one a window."""
        heads.eval()
        hyps = {"linear": [], "mlp": []}
        refs = []
        for s in range(0, len(pairs), 32):
            part = pairs[s:s + 32]
            wav = torch.zeros(len(part), 480000, device=device)
            lens = torch.zeros(len(part), dtype=torch.long, device=device)
            for r, (ds, i) in enumerate(part):
                o, n = int(ds.meta[i]["off"]), int(ds.len_cpu[i])
                wav[r, :n] = ds.audio[o:o + n].float() / 32768.0
                lens[r] = n
                refs.append(ds.texts[i])
            x, n_frames = frames(wav, lens)
            with torch.no_grad():
                out = heads(x)
            for k, logits in out.items():
                best = logits.argmax(-1).cpu()
                hyps[k] += [ctc_greedy(best[r, :int(n_frames[r])].tolist()) for r in range(len(part))]
        heads.train()
        return {k: tuple(round(100 * v, 2) for v in cer_wer(list(zip(refs, h)))) for k, h in hyps.items()}

    held_sets = {"espeak": [(held_es, i) for i in range(len(held_es))][:args.held], "real": held_real[:args.held]}
    t0, step = time.time(), 0
    ema = {}
    while time.time() - t0 < args.deadline - 90 and step < args.total_steps:
        p = min(1.0, (time.time() - t0) / max(1.0, args.deadline - 90))
        lr = args.lr * min(1.0, (step + 1) / 200) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.no_grad():
            wav, lens, texts = batch(mix, args.batch, gen, rng, device)
        x, n_frames = frames(wav, lens)
        loss = 0.0
        for k, logits in heads(x).items():
            l_k = ctc_loss(logits, texts, n_frames)
            ema[k] = float(l_k) if k not in ema else 0.98 * ema[k] + 0.02 * float(l_k)
            loss = loss + l_k
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(heads.parameters(), 5.0)
        opt.step()
        if step % 200 == 0:
            log(f"step {step} lr {lr:.2e} ctc ema " + " ".join(f"{k} {v:.3f}" for k, v in ema.items())
                + f" {(time.time() - t0) / (step + 1):.3f} s/step")
        step += 1
    result = {name: evaluate(pairs) for name, pairs in held_sets.items()}
    log("held-out greedy (CER %, WER %):", result)
    for kind in ("linear", "mlp"):
        t = {k: v.detach().float().cpu().contiguous() for k, v in heads.tensors(kind).items()}
        save_file(t, os.path.join(args.out, f"ctc-{kind}.safetensors"))
    json.dump({"steps": step, "held": result, "context": args.context, "copies": args.copies,
               "args": vars(args)}, open(os.path.join(args.out, "ctc-state.json"), "w"), indent=1)
    log("saved", step)


if __name__ == "__main__":
    main()
