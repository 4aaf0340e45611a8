"""Train the streaming conformer-CTC on synthetic espeak-ng speech.

One invocation = one device call (<= 10 min). State survives between calls in
--work (full checkpoint, on the warm machine) and in --out (fp32 weight shards +
state.json, returned to the caller; pass them back with --resume-dir when the
machine was lost). The learning-rate schedule follows *training wall time*
(progress = trained seconds / --total-train-sec), so it is independent of how the
run is split into calls.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model as M  # noqa: E402
from common import cer_wer, ctc_greedy  # noqa: E402

T_START = time.time()


def autocast(enabled):
    import contextlib
    return torch.autocast("cuda", dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def log(*a):
    print(f"[{time.time() - T_START:7.1f}s]", *a, flush=True)


# ---------------------------------------------------------------- augmentation
def pink_noise(shape, device):
    w = torch.randn(shape, device=device)
    spec = torch.fft.rfft(w, dim=-1)
    f = torch.arange(spec.shape[-1], device=device).clamp(min=1).float()
    x = torch.fft.irfft(spec / f.sqrt(), n=shape[-1], dim=-1)
    return x / (x.std(dim=-1, keepdim=True) + 1e-8)


def augment(wav, lens, gen_rng):
    """wav [B, L] clean speech (zeros past lens). Random gain + white/pink/babble noise."""
    B, L = wav.shape
    dev = wav.device
    valid = torch.arange(L, device=dev)[None, :] < lens[:, None]
    rms = ((wav ** 2).sum(1) / lens.clamp(min=1)).sqrt().clamp(min=1e-4)
    kind = torch.randint(0, 4, (B,), device=dev)  # 0 clean, 1 white, 2 pink, 3 babble
    snr_db = torch.empty(B, device=dev).uniform_(8, 40)
    white = torch.randn(B, L, device=dev)
    pink = pink_noise((B, L), dev)
    babble = torch.zeros_like(wav)
    for s in (1, 2, 3):
        babble = babble + torch.roll(wav, s, 0) / torch.roll(rms, s, 0)[:, None]
    babble = babble / (babble.std(dim=1, keepdim=True) + 1e-8)
    noise = torch.where((kind == 1)[:, None], white, torch.where((kind == 2)[:, None], pink, babble))
    noise_rms = rms * 10 ** (-snr_db / 20)
    noise = noise * noise_rms[:, None] * (kind > 0).float()[:, None]
    # noise covers the whole (padded) utterance region incl. leading silence
    noise = noise * valid.float()
    gain = 10 ** (torch.empty(B, device=dev).uniform_(-24, 6) / 20) * (0.25 / rms).clamp(max=30)
    out = (wav + noise) * gain[:, None]
    return out.clamp(-1, 1)


def spec_augment(f, lens_frames):
    """f [B, T, 80] normalised features: 2 freq masks (<=15 bins), ~1 time mask per
    second (<=20 frames each), masked to 0 (= the training mean)."""
    B, T, C = f.shape
    dev = f.device
    keep = torch.ones(B, T, C, dtype=torch.bool, device=dev)
    cidx = torch.arange(C, device=dev)[None, :]
    for _ in range(2):
        w = torch.randint(0, 16, (B, 1), device=dev)
        s = (torch.rand(B, 1, device=dev) * (C - w)).long()
        keep &= ~((cidx >= s) & (cidx < s + w))[:, None, :]
    tidx = torch.arange(T, device=dev)[None, :]
    n_t = max(1, T // 100)
    for _ in range(n_t):
        w = torch.randint(0, 21, (B, 1), device=dev)
        s = (torch.rand(B, 1, device=dev) * (lens_frames[:, None] - w).clamp(min=1)).long()
        keep &= ~((tidx >= s) & (tidx < s + w))[:, :, None]
    return f * keep


# ---------------------------------------------------------------- checkpoint
def save_shards(model, state, out_dir, n_shards=3):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    keys = list(sd)
    per = math.ceil(len(keys) / n_shards)
    for i in range(n_shards):
        save_file({k: sd[k] for k in keys[i * per:(i + 1) * per]}, os.path.join(out_dir, f"weights{i}.safetensors"))
    with open(os.path.join(out_dir, "state.json"), "w") as f:
        json.dump(state, f)


def load_shards(model, d):
    from safetensors.torch import load_file
    sd = {}
    for fn in sorted(os.listdir(d)):
        if fn.startswith("weights") and fn.endswith(".safetensors"):
            sd.update(load_file(os.path.join(d, fn)))
    model.load_state_dict(sd)
    return json.load(open(os.path.join(d, "state.json")))


# ---------------------------------------------------------------- eval
@torch.no_grad()
def evaluate(model, ds, device, max_samples=16000 * 600, limit=None, amp=True):
    model.eval()
    idx_all = list(range(len(ds)))[:limit]
    rng = np.random.default_rng(0)
    hyps = {}
    for b in ds.batches(max_samples, rng, shuffle=False):
        b = [i for i in b if i in set(idx_all)] if limit else b
        if not b:
            continue
        idx = torch.tensor(b, device=device)
        wav, lens = ds.gather(idx)
        f = model.frontend(wav)
        with autocast(amp and device.type == "cuda"):
            x = model.encode(f)
            lp = F.log_softmax(model.ctc(x).float(), -1)
        T2 = M.out_lengths(lens)
        am = lp.argmax(-1).cpu().numpy()
        for r, i in enumerate(b):
            hyps[i] = ctc_greedy(am[r, : int(T2[r])].tolist())
    pairs = [(ds.texts[i], hyps[i]) for i in sorted(hyps)]
    model.train()
    return cer_wer(pairs), pairs


# ---------------------------------------------------------------- main
def lr_at(p, peak, warm=0.04, floor=0.02):
    if p < warm:
        return peak * p / warm
    q = min(1.0, (p - warm) / (1 - warm))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * q)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True, help="dir with train.txt / heldout.txt")
    ap.add_argument("--work", required=True, help="cache dir (data + full checkpoint)")
    ap.add_argument("--out", required=True, help="dir for returned shards + logs")
    ap.add_argument("--resume-dir", default=None, help="dir with weights*.safetensors + state.json")
    ap.add_argument("--renditions", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None, help="use only N sentences (tests)")
    ap.add_argument("--total-train-sec", type=float, default=1500)
    ap.add_argument("--deadline", type=float, default=540, help="stop training this many s after start")
    ap.add_argument("--max-samples", type=int, default=16000 * 1000, help="padded samples per batch")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--wd", type=float, default=1e-2)
    ap.add_argument("--tiny", action="store_true", help="tiny model for CPU tests")
    ap.add_argument("--procs", type=int, default=None)
    ap.add_argument("--eval-limit", type=int, default=None)
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    amp = device.type == "cuda"
    data.build_all(args.text, args.work, device, renditions=args.renditions, limit=args.limit, procs=args.procs)
    log("data ready")
    train = data.AudioSet(args.work, "train", device)
    evs = {n: data.AudioSet(args.work, n, device) for n in ("eval_sent", "eval_voice")}
    log(f"train {len(train)} utts {train.hours():.1f} h; eval {[len(e) for e in evs.values()]}")

    cfg = dict(M.CONFIG)
    if args.tiny:
        cfg.update(d_model=64, subsample_channels=64, n_heads=2, ff_dim=128, n_blocks=2)
    model = M.ConformerCTC(cfg).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    state = {"trained_sec": 0.0, "step": 0, "epoch": 0, "hours": float(train.hours())}
    full = os.path.join(args.work, "ckpt.pt")
    if os.path.exists(full):
        ck = torch.load(full, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        log("resumed from", full, state)
    elif args.resume_dir and os.path.exists(os.path.join(args.resume_dir, "state.json")):
        state = load_shards(model, args.resume_dir)
        log("resumed weights (fresh optimizer) from", args.resume_dir, state)
    else:
        # fixed feature statistics over (augmented) training audio
        rng = np.random.default_rng(0)
        acc = torch.zeros(80, dtype=torch.float64, device=device)
        acc2 = torch.zeros_like(acc)
        n = 0
        for b in train.batches(16000 * 300, rng)[:20]:
            idx = torch.tensor(b, device=device)
            wav, lens = train.gather(idx)
            wav = augment(wav, lens, None)
            L = model.frontend.log_mel(wav)
            T = lens // 160
            m = (torch.arange(L.shape[1], device=device)[None, :] < T[:, None]).double()[..., None]
            acc += (L.double() * m).sum((0, 1))
            acc2 += (L.double() ** 2 * m).sum((0, 1))
            n += m.sum()
        mean = acc / n
        std = (acc2 / n - mean ** 2).clamp(min=1e-8).sqrt()
        model.frontend.mean.copy_(mean.float())
        model.frontend.inv_std.copy_((1.0 / std).float())
        log("feature stats: mean", mean.mean().item(), "std", std.mean().item(), "frames", n.item())

    rng = np.random.default_rng(1000 + state["step"])
    model.train()
    t_last = time.time()
    done = False
    loss_acc, n_acc = 0.0, 0
    while not done:
        for b in train.batches(args.max_samples, rng):
            now = time.time()
            state["trained_sec"] += now - t_last
            t_last = now
            p = state["trained_sec"] / args.total_train_sec
            if p >= 1.0 or now - T_START > args.deadline:
                done = True
                break
            lr = lr_at(p, args.lr)
            for g in opt.param_groups:
                g["lr"] = lr
            idx = torch.tensor(b, device=device)
            lead = torch.randint(0, 6400, (len(b),), device=device) * (torch.rand(len(b), device=device) < 0.5)
            wav, lens = train.gather(idx, lead=lead, extra=int(np.random.randint(0, 3200)))
            with torch.no_grad():
                wav = augment(wav, lens, None)
                f = model.frontend(wav)
                f = spec_augment(f, lens // 160)
            with autocast(amp):
                x = model.encode(f)
                logits = model.ctc(x)
            lp = F.log_softmax(logits.float(), -1)
            T2 = M.out_lengths(lens)
            tg = [train.tok[i] for i in b]
            tl = torch.tensor([len(t) for t in tg], device=device)
            loss = F.ctc_loss(lp.transpose(0, 1), torch.cat(tg).to(device), T2, tl, blank=0,
                              reduction="sum", zero_infinity=True) / tl.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            loss_acc += loss.item() if state["step"] % 10 == 0 else 0.0
            n_acc += 1 if state["step"] % 10 == 0 else 0
            if state["step"] % 100 == 0:
                log(f"step {state['step']} ep {state['epoch']} p {p:.3f} lr {lr:.2e} loss {loss_acc / max(n_acc, 1):.4f} "
                    f"gn {gn.item():.2f} B {len(b)} T2 {lp.shape[1]}")
                loss_acc, n_acc = 0.0, 0
        else:
            state["epoch"] += 1
            log(f"epoch {state['epoch']} done")
    log(f"stop: step {state['step']} trained {state['trained_sec']:.0f}s")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, full)
    save_shards(model, state, args.out)
    res = {}
    for n, ds in evs.items():
        (cer, wer), pairs = evaluate(model, ds, device, limit=args.eval_limit, amp=amp)
        res[n] = {"cer": cer, "wer": wer, "n": len(pairs)}
        log(f"eval {n}: CER {cer * 100:.2f}% WER {wer * 100:.2f}% (n={len(pairs)})")
        for r, h in pairs[:3]:
            log(f"   REF {r}\n{'':13}HYP {h}")
    state["eval"] = res
    with open(os.path.join(args.out, "state.json"), "w") as f:
        json.dump(state, f)
    log("done")


if __name__ == "__main__":
    main()
