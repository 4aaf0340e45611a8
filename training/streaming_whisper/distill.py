"""Distil Whisper's whole-window encoder (teacher) into the same encoder with
chunked self-attention (student), on synthetic speech with acoustic
augmentation. No transcripts are used: the targets are the teacher's outputs,
so the student learns to do without the frames it may no longer see.

Every step draws one attention context (chunk, right) from CONTEXTS, as WeNet's
dynamic chunk training does, so one student serves several latencies.

usage (GPU machine, see run_gpu.sh): python3 distill.py --teacher DIR --text DIR
    --work DIR --out DIR --deadline SEC
"""
import argparse
import copy
import json
import math
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import data  # noqa: E402  (training/data.py: espeak synthesis, AudioSet)
import synth  # noqa: E402
from encoder import Encoder, log_mel, mel_filters  # noqa: E402
from decoder import ce, kl  # noqa: E402
from folder import pieces  # noqa: E402
import lora  # noqa: E402

WINDOW = 480000  # 30 s at 16 kHz
LEFT = 1500      # the whole window before a chunk
# (chunk, right) in encoder frames (20 ms); right is the first layer's
# look-ahead (the others see no further than their chunk), so the encoder's
# algorithmic latency is chunk + right frames (plus 32.5 ms of STFT and stem)
CONTEXTS = [(30, 0), (16, 14), (16, 8), (12, 0), (8, 6), (16, 0), (24, 0), (32, 0)]
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def build(text_dir, work, device, n, procs):
    train = [t for t in open(os.path.join(text_dir, "train.txt")).read().split("\n") if t]
    held = [t for t in open(os.path.join(text_dir, "heldout.txt")).read().split("\n") if t]
    rng = random.Random(7)
    for name, texts, variants, count in (("distill_train", train, synth.TRAIN_VARIANTS, n),
                                         ("distill_held", held, synth.HELDOUT_VARIANTS, 256)):
        if os.path.exists(os.path.join(work, name + ".json")):
            continue
        items, meta = [], []
        for _ in range(count):
            t = rng.choice(texts)
            p = synth.random_params(rng, variants)
            items.append((t,) + p)
            meta.append({"text": t, "voice": p[0], "rate": p[1]})
        data.build_set(name, items, meta, work, device, procs)


def reverb(x, gen):
    """Convolves each row with a random exponentially decaying room response."""
    b, n = x.shape
    dev = x.device
    L = 8000
    rt60 = torch.empty(b, device=dev).uniform_(0.15, 0.8)
    t = torch.arange(L, device=dev)[None, :] / 16000.0
    ir = torch.randn(b, L, device=dev, generator=gen) * torch.exp(-6.9 * t / rt60[:, None])
    ir[:, 0] = 1.0
    ir = ir / ir.norm(dim=1, keepdim=True)
    m = 1 << math.ceil(math.log2(n + L))
    y = torch.fft.irfft(torch.fft.rfft(x, m) * torch.fft.rfft(ir, m), m)[:, :n]
    return y * (x.std(dim=1, keepdim=True) / (y.std(dim=1, keepdim=True) + 1e-8))


def band_limit(x):
    """Telephone band (300-3400 Hz) by a mask on the spectrum."""
    n = x.shape[1]
    f = torch.fft.rfft(x)
    hz = torch.arange(f.shape[1], device=x.device) * 16000.0 / n
    return torch.fft.irfft(f * ((hz > 300) & (hz < 3400)), n)


class Mixture:
    """Utterance sets drawn by weight (espeak, natural TTS, real speech), so
    that a scarce set can make up a set share of every batch."""

    def __init__(self, sets, balance=None):
        self.sets = [ds for ds, _ in sets]
        self.weights = [w for _, w in sets]
        # balance: within a set whose utterances name their source, draw a
        # source by hours ** balance, then one of its utterances, so that one
        # game's 4.5 h do not make up 80 % of the real speech (None: every
        # utterance alike)
        self.sources = [self._sources(ds, balance) for ds in self.sets]

    @staticmethod
    def _sources(ds, balance):
        if balance is None or not all("source" in m for m in ds.meta):
            return None
        by = {}
        for i, m in enumerate(ds.meta):
            by.setdefault(m["source"], []).append(i)
        idx = list(by.values())
        hours = [float(ds.len_cpu[ix].sum()) / 16000 / 3600 for ix in idx]
        return idx, [h ** balance for h in hours]

    def shares(self, k):
        """Each source's share of set k's draws, largest first (for the log)."""
        if self.sources[k] is None:
            return []
        idx, w = self.sources[k]
        names = [self.sets[k].meta[ix[0]]["source"] for ix in idx]
        return sorted(zip(names, [x / sum(w) for x in w]), key=lambda t: -t[1])

    def pick(self, rng):
        k = rng.choices(range(len(self.sets)), self.weights)[0]
        ds = self.sets[k]
        if self.sources[k] is None:
            return ds, rng.randrange(len(ds))
        idx, w = self.sources[k]
        ix = rng.choices(idx, w)[0]
        return ds, ix[rng.randrange(len(ix))]


# rates are drawn on a grid of 64 / q, so that every transform's length is
# a power of two times q: an FFT plan for a length not seen before costs far
# more than the transform (on the GPU, random lengths made a step 4x slower)
RATE_GRID = 64


def resample(x, rate):
    """`x` (1-D) played `rate` times as fast, band-limited (the spectrum cut
    or padded: no aliasing, no smearing as a linear interpolation gives);
    `rate` is taken to the nearest 64 / q."""
    m = x.shape[0]
    q = max(1, round(RATE_GRID / rate))
    m2 = max(RATE_GRID, 1 << (m - 1).bit_length())
    n2 = m2 * q // RATE_GRID
    f = torch.fft.rfft(x, m2)
    k = min(f.shape[0], n2 // 2 + 1)
    g = torch.zeros(n2 // 2 + 1, dtype=f.dtype, device=x.device)
    g[:k] = f[:k]
    n = max(1, m * q // RATE_GRID)
    return torch.fft.irfft(g, n2)[:n] * (n2 / m2)


def batch(ds, b, gen, rng, device, augment_on=True, long_gaps=0.0, speed=None):
    """b windows of 30 s: 1-3 utterances each (of `ds`, an AudioSet or a
    Mixture), random lead and gaps (each, with probability `long_gaps`, a
    pause of 2-8 s instead of 0.1-1 s), augmented. `speed` (lo, hi): each
    utterance played at a rate drawn from it (tempo and pitch together, as
    Kaldi's speed perturbation; the teacher hears the same audio, so its
    targets stay right). Returns the audio [b, 480000], each window's length
    and its sentences."""
    mix = ds if isinstance(ds, Mixture) else Mixture([(ds, 1.0)])
    out = torch.zeros(b, WINDOW, device=device)
    lens = torch.zeros(b, dtype=torch.long, device=device)
    texts = []
    for r in range(b):
        pos = rng.randint(0, 16000)
        said = []
        for _ in range(rng.choices([1, 2, 3], [0.5, 0.3, 0.2])[0]):
            src, i = mix.pick(rng)
            n = int(src.len_cpu[i])
            o = int(src.meta[i]["off"])
            x = src.audio[o:o + n].float() / 32768.0
            if speed is not None and n > 1:
                x = resample(x, rng.uniform(*speed))
                n = x.shape[0]
            if pos + n > WINDOW:
                break
            out[r, pos:pos + n] = x
            long = long_gaps > 0 and rng.random() < long_gaps
            pos += n + (rng.randint(32000, 128000) if long else rng.randint(1600, 16000))
            said.append(src.texts[i])
        lens[r] = min(pos, WINDOW)
        texts.append(said)
    if augment_on:
        k = torch.rand(b, device=device, generator=gen)
        rv = k < 0.4
        if rv.any():
            out[rv] = reverb(out[rv], gen)
        bl = (k > 0.85)
        if bl.any():
            out[bl] = band_limit(out[bl])
        from train import augment
        out = augment(out, lens, gen)
    valid = torch.arange(WINDOW, device=device)[None, :] < lens[:, None]
    return out * valid, lens, texts


def token_batch(texts, pack, device, cap=224):
    """Teacher-forced sequences (prompt, the window's sentences, end of
    text) in the pack's sub-vocabulary, padded; and the mask of positions
    whose next-token distribution counts."""
    seqs = []
    for said in texts:
        ids = list(pack["prompt"])
        for t in said:
            ids += pack["texts"][t]
        seqs.append((ids + [pack["eot"]])[:cap])
    n = max(len(q) for q in seqs)
    tok = torch.full((len(seqs), n), pack["eot"], dtype=torch.long)
    mask = torch.zeros(len(seqs), n)
    for r, q in enumerate(seqs):
        tok[r, :len(q)] = torch.tensor(q)
        mask[r, :len(q) - 1] = 1.0
    return tok.to(device), mask.to(device)


def features(wav, lens, filters, padding="zeros"):
    """What pulsed feeds the encoder: log-mel of the audio, then past its
    end either zeros (faster-whisper's padding in the feature domain,
    `--padding zeros`) or, as the window's audio is zero there, the
    recording's floor (silence, as Whisper was trained and pulsed's
    default)."""
    mel = log_mel(wav, filters)
    if padding == "silence":
        return mel
    frames = torch.arange(mel.shape[2], device=mel.device)[None, None, :]
    return mel * (frames < (lens // 160)[:, None, None])


def fixed_tail(s_out, p_out, lens, span, rng):
    """`s_out` [B, frames, d] past each row's cut replaced by `p_out`
    [1, frames, d] (the student's output for an all-padding window): what a
    streamed encoder can give the decoder, its frames so far and a tail it
    caches. The cut is the audio's last encoder frame less 0..span frames
    (the chunk and look-ahead a live stream has not computed yet)."""
    frames = s_out.shape[1]
    content = (lens + 319) // 320
    back = torch.tensor([rng.randint(0, span) for _ in range(len(lens))], device=lens.device)
    cut = (content - back).clamp(min=1)
    keep = torch.arange(frames, device=s_out.device)[None, :] < cut[:, None]
    return torch.where(keep[..., None], s_out, p_out.to(s_out.dtype).expand_as(s_out))


def loss_fn(s_out, s_hid, t_out, t_hid):
    main = ((s_out - t_out) ** 2).mean() / t_out.var()
    aux = sum(((s - t) ** 2).mean() / t.var() for s, t in zip(s_hid, t_hid)) / len(t_hid)
    return main + 0.25 * aux, main


def save_student(model, out, merge_lora):
    """The encoder's weights in f16, in pieces of at most 15 MB ($OUT gives
    back files of 16 MiB at most)."""
    from safetensors.torch import save_file
    if merge_lora:
        lora.merge(model)
    os.makedirs(out, exist_ok=True)
    half = {k: v.detach().to(torch.float16).cpu().contiguous() for k, v in model.names().items()}
    for i, h in enumerate(pieces(half, 15e6, nbytes=lambda t: t.numel() * t.element_size())):
        save_file(h, os.path.join(out, f"student-{i}.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True, help="dir: config.json + encoder*.safetensors (folder.py teacher)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--state", default=None,
                    help="dir of the resumable student.pt (default --work): runs side by side share --work's data")
    ap.add_argument("--utts", type=int, default=40000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--total-steps", type=int, default=10 ** 9, help="stop after this many steps")
    ap.add_argument("--deadline", type=float, default=500)
    ap.add_argument("--procs", type=int, default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prepare-only", action="store_true", help="build the data and stop")
    ap.add_argument("--decoder", default=None, help="dir of decoder_pack.py's output: distil through the decoder too")
    ap.add_argument("--kl-weight", type=float, default=1.0, help="with --decoder (0: no KL, the teacher's "
                    "decoder is not run)")
    ap.add_argument("--ce-weight", type=float, default=0.0,
                    help="with --decoder: the cross-entropy of the transcript through the decoder reading the "
                    "student, on windows of espeak speech alone (their text is exact; an --extra set's is "
                    "a teacher's transcript, or none)")
    ap.add_argument("--init", default=None, help="dir of student-*.safetensors to start from")
    ap.add_argument("--contexts", default=None, help="chunk:right,... (default: CONTEXTS)")
    ap.add_argument("--copies", action="store_true",
                    help="every layer looks `right` frames ahead through right-context copies "
                         "(pulsed's right_copies): the latency of one look-ahead")
    ap.add_argument("--held-batch", type=int, default=16)
    ap.add_argument("--held-batches", type=int, default=4)
    ap.add_argument("--extra", default=None,
                    help="NAME:SHARE,...: more utterance sets in --work (NAME.npy/.json, e.g. natural_tts.py "
                         "unpack), each drawn for SHARE of the utterances (the rest: espeak)")
    ap.add_argument("--balance", type=float, default=None,
                    help="draw each --extra set's sources by hours ** BALANCE (0: sources alike, 1: as their "
                         "hours), then an utterance of the source; default: every utterance alike")
    ap.add_argument("--freeze-below", type=int, default=0, help="train only layers >= this (0: all + stem)")
    ap.add_argument("--lora", type=int, default=0, help="train low-rank adapters of this rank instead of the "
                                                        "encoder's weights (merged into them when saved)")
    ap.add_argument("--lora-alpha", type=float, default=None, help="adapter scale alpha / rank (default alpha = rank)")
    ap.add_argument("--padding", choices=["zeros", "silence"], default="zeros",
                    help="what fills a window after the audio (pulsed's --padding; r1-r7 used zeros)")
    ap.add_argument("--train-cross", action="store_true",
                    help="with --decoder: the student's decoder copy learns its cross-attention (saved beside "
                         "the encoder, as student-cross.safetensors)")
    ap.add_argument("--tail", action="store_true",
                    help="with --decoder: the decoder reads the student's frames up to a cut in the audio's "
                         "last chunk and look-ahead, then the student's output for an all-padding window "
                         "(a tail a streamed encoder can cache; see fixed_tail)")
    ap.add_argument("--ctc-weight", type=float, default=0.0,
                    help="also train a CTC head (ctc_head.py's MLP) on the student's output, the encoder "
                         "with it: this weight on its loss (0: no head)")
    ap.add_argument("--ctc-init", default=None, help="ctc-mlp.safetensors to start the head from")
    ap.add_argument("--ctc-hidden", type=int, default=1024)
    ap.add_argument("--long-gaps", type=float, default=0.0,
                    help="share of the gaps between a window's utterances that are pauses of 2-8 s")
    ap.add_argument("--speed", default=None,
                    help="LO:HI, e.g. 0.9:1.1: each training utterance at a rate drawn from [LO, HI] "
                         "(not the held-out ones)")
    ap.add_argument("--weight-ema", type=float, default=0.0,
                    help="also keep an exponential moving average of the student's weights with this "
                         "decay (e.g. 0.999), saved in OUT/ema: a checkpoint less at the mercy of its last "
                         "steps (0: none)")
    args = ap.parse_args()
    from safetensors.torch import load_file, save_file
    speed = None
    if args.speed:
        speed = tuple(float(v) for v in args.speed.split(":"))
        if len(speed) != 2 or not 0 < speed[0] <= speed[1]:
            sys.exit("--speed: LO:HI with 0 < LO <= HI")
    if not 0 <= args.weight_ema < 1:
        sys.exit("--weight-ema: a decay in [0, 1)")

    device = torch.device(args.device)
    # bf16 autocast on the GPU only: on a CPU it is many times slower than
    # f32 (torch 1.13 here), which made a smoke run of base unusable
    amp = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    if args.state:
        os.makedirs(args.state, exist_ok=True)
    build(args.text, args.work, device, args.utts, args.procs)
    if args.prepare_only:
        log("data built")
        return
    train = data.AudioSet(args.work, "distill_train", device)
    # the sentences espeak said: the only text --ce-weight trains on
    exact_texts = set(train.texts)
    held = data.AudioSet(args.work, "distill_held", device)
    log(f"data: train {len(train)} utts {train.hours():.1f} h, held {len(held)}")
    if args.extra:
        sets, rest = [], 1.0
        for item in args.extra.split(","):
            name, share = item.rsplit(":", 1)
            ds = data.AudioSet(args.work, name, device)
            log(f"data: {name} {len(ds)} utts {ds.hours():.2f} h, share {float(share)}")
            sets.append((ds, float(share)))
            rest -= float(share)
        if rest < 0:
            sys.exit("--extra: the shares add up to more than 1")
        if args.decoder and args.kl_weight > 0:
            for ds, _ in sets:
                bare = sum(1 for t in ds.texts if not t)
                if bare:
                    sys.exit(f"--decoder: {bare} utterances of an --extra set have no text (real_segments.py "
                             f"--untranscribed) for the KL: --kl-weight 0, or without that set")
        train = Mixture([(train, rest)] + sets, args.balance)
        for k in range(1, len(train.sets)):
            top = ", ".join(f"{n} {x:.2f}" for n, x in train.shares(k)[:4])
            if top:
                log(f"data: set {k} draws by source (balance {args.balance}): {top}")

    cfg = json.load(open(os.path.join(args.teacher, "config.json")))
    import glob
    w = {}
    # encoder.safetensors (tiny's teacher) or folder.py's encoder-N pieces
    for f in sorted(glob.glob(os.path.join(args.teacher, "encoder*.safetensors"))):
        w.update(load_file(f))
    teacher = Encoder(cfg).load(w).to(device).eval()
    student = Encoder(cfg).load(w).to(device)
    if args.init:
        init = {}
        for f in sorted(glob.glob(os.path.join(args.init, "student-*.safetensors"))):
            init.update(load_file(f))
        student.load(init)
        log("student starts from", args.init)
    if args.lora:
        params = lora.adapt(student, args.lora, args.lora_alpha or args.lora)
        log(f"LoRA rank {args.lora}: {sum(p.numel() for p in params)} parameters learn")
    dec, pack = None, None
    if args.decoder:
        from decoder import Decoder
        pack = json.load(open(os.path.join(args.decoder, "texts.json")))
        dec = Decoder(cfg, len(pack["vocab"])).load(
            load_file(os.path.join(args.decoder, "decoder.safetensors"))).to(device).eval()
        log(f"decoder: {len(pack['vocab'])} tokens, KL weight {args.kl_weight}, CE weight {args.ce_weight}")
    if args.ce_weight > 0 and dec is None:
        sys.exit("--ce-weight needs --decoder")
    if args.ce_weight < 0 or args.kl_weight < 0:
        sys.exit("--ce-weight and --kl-weight must not be negative")
    if args.train_cross and dec is None:
        sys.exit("--train-cross needs --decoder")
    if args.tail and dec is None:
        sys.exit("--tail needs --decoder")
    # the decoder the student's output is read by: the teacher's own, or a
    # copy whose cross-attention follows the student
    sdec = copy.deepcopy(dec) if args.train_cross else dec
    ckpt = os.path.join(args.state or args.work, "student.pt")
    state = {"step": 0}
    if os.path.exists(ckpt):
        ck = torch.load(ckpt, map_location=device)
        student.load_state_dict(ck["model"])
        if args.train_cross:
            sdec.load_state_dict(ck["cross"])
        state = ck["state"]
        log("resumed", state)
    for p in teacher.parameters():
        p.requires_grad_(False)
    if not args.lora:
        params = []
        for n, p in student.named_parameters():
            keep = args.freeze_below == 0 or (n.startswith("layers.") and int(n.split(".")[1]) >= args.freeze_below) \
                or n.startswith("ln_post")
            p.requires_grad_(keep)
            if keep:
                params.append(p)
    if args.train_cross:
        cross = list(sdec.cross_names().values())
        for p in cross:
            p.requires_grad_(True)
        params += cross
        log(f"decoder cross-attention learns: {sum(p.numel() for p in cross)} parameters")
    head = None
    if args.ctc_weight > 0:
        from common import TOKENS
        from ctc_head import MlpHead
        head = MlpHead(cfg["d_model"], len(TOKENS), args.ctc_hidden).to(device)
        if args.ctc_init:
            head.load(load_file(args.ctc_init))
            log("CTC head starts from", args.ctc_init)
        if os.path.exists(ckpt) and ck.get("ctc") is not None:
            head.load_state_dict(ck["ctc"])
        params += list(head.parameters())
        log(f"CTC head: weight {args.ctc_weight}")
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    if os.path.exists(ckpt) and "opt" in ck:
        opt.load_state_dict(ck["opt"])
    avg = None
    if args.weight_ema:
        avg = copy.deepcopy(student).eval()
        for p in avg.parameters():
            p.requires_grad_(False)
        if os.path.exists(ckpt) and ck.get("avg") is not None:
            avg.load_state_dict(ck["avg"])
        log(f"weight EMA: decay {args.weight_ema}")
    filters = mel_filters(cfg["num_mel_bins"]).to(device)
    pad_mel = features(torch.zeros(1, WINDOW, device=device), torch.zeros(1, dtype=torch.long, device=device),
                       filters, args.padding)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed + state["step"])
    rng = random.Random(args.seed * 7 + 11 + state["step"])

    def with_mode(ctx):
        return (ctx[0], LEFT, ctx[1]) + (("copies",) if args.copies else ())

    def held_loss(ctx, model=student):
        hr = random.Random(3)
        hg = torch.Generator(device=device)
        hg.manual_seed(3)
        tot, tot_kl, tot_ce = 0.0, 0.0, 0.0
        # the augmentation also draws from torch's global generators: fixed
        # here, so that every call sees the same held-out windows
        cuda = [device] if device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=cuda):
            torch.manual_seed(3)
            for _ in range(args.held_batches):
                wav, lens, texts = batch(held, args.held_batch, hg, hr, device, augment_on=True)
                mel = features(wav, lens, filters, args.padding)
                t_out, _ = teacher(mel)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                    s_out, _ = model(mel, with_mode(ctx))
                tot += float(((s_out.float() - t_out) ** 2).mean() / t_out.var())
                if dec is not None:
                    tok, tmask = token_batch(texts, pack, device)
                    s_logits = sdec(tok, s_out.float())
                    if args.kl_weight > 0:
                        tot_kl += float(kl(dec(tok, t_out), s_logits, tmask))
                    tot_ce += float(ce(s_logits, tok, tmask))
        n = args.held_batches
        if dec is None:
            return round(tot / n, 4)
        return (round(tot / n, 4),) + ((round(tot_kl / n, 4),) if args.kl_weight > 0 else ()) \
            + ((round(tot_ce / n, 4),) if args.ce_weight > 0 else ())

    log("held loss before:", {f"{c}": held_loss(c) for c in [(30, 0), (16, 14), (12, 0), (8, 6)]})
    contexts = CONTEXTS if not args.contexts else [tuple(int(v) for v in c.split(":")) for c in args.contexts.split(",")]
    t_train, first = time.time(), state["step"]
    ema = None
    while time.time() - T0 < args.deadline - 60 and state["step"] < args.total_steps:
        step = state["step"]
        # the schedule runs on the wall time left until the deadline (less
        # the time for the held-out check and saving)
        p = min(1.0, (time.time() - t_train) / max(1.0, args.deadline - 60 - (t_train - T0)))
        lr = args.lr * min(1.0, (step + 1) / 150) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        ctx = rng.choice(contexts)
        ctx = with_mode(ctx)
        with torch.no_grad():
            wav, lens, texts = batch(train, args.batch, gen, rng, device, long_gaps=args.long_gaps, speed=speed)
            mel = features(wav, lens, filters, args.padding)
            t_out, t_hid = teacher(mel)
            t_logits = None
            if dec is not None:
                exact = torch.tensor([all(t in exact_texts for t in said) for said in texts],
                                     dtype=torch.float32, device=device)
                # without the KL only the exact windows' text is read: the others' may have none
                read = texts if args.kl_weight > 0 else [s if e else [] for s, e in zip(texts, exact.tolist())]
                tok, tmask = token_batch(read, pack, device)
                t_logits = dec(tok, t_out) if args.kl_weight > 0 else None
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            s_out, s_hid = student(mel, ctx)
            s_in = s_out
            if args.tail:
                p_out, _ = student(pad_mel, ctx)
                s_in = fixed_tail(s_out, p_out, lens, ctx[0] + ctx[2], rng)
            s_logits = sdec(tok, s_in) if dec is not None else None
        loss, main_l = loss_fn(s_out.float(), [h.float() for h in s_hid], t_out, t_hid)
        if t_logits is not None:
            kl_l = kl(t_logits, s_logits, tmask)
            loss = loss + args.kl_weight * kl_l
        if args.ce_weight > 0:
            ce_l = ce(s_logits, tok, tmask * exact[:, None])
            loss = loss + args.ce_weight * ce_l
        if head is not None:
            from ctc_head import ctc_loss
            n_frames = ((lens + 319) // 320).clamp(max=s_out.shape[1])
            ctc_l = ctc_loss(head(s_out.float()), texts, n_frames)
            loss = loss + args.ctc_weight * ctc_l
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if avg is not None:
            with torch.no_grad():
                for a, p in zip(avg.parameters(), student.parameters()):
                    a.lerp_(p, 1.0 - args.weight_ema)
        state["step"] = step + 1
        main_l = float(main_l.detach())
        ema = main_l if ema is None else 0.98 * ema + 0.02 * main_l
        if step % 100 == 0:
            extra = f" kl {float(kl_l.detach()):.4f}" if t_logits is not None else ""
            extra += f" ce {float(ce_l.detach()):.4f} on {int(exact.sum())}/{len(texts)}" \
                if args.ce_weight > 0 else ""
            extra += f" ctc {float(ctc_l.detach()):.4f}" if head is not None else ""
            log(f"step {step} ctx {ctx} lr {lr:.2e} loss {float(loss):.4f} main ema {ema:.4f}{extra} "
                f"{(time.time() - t_train) / (step + 1 - first):.3f} s/step")
    log("held loss after:", {f"{c}": held_loss(c) for c in [(30, 0), (16, 14), (12, 0), (8, 6)]})
    if avg is not None:
        log("held loss after, weight EMA:", {f"{c}": held_loss(c, avg) for c in [(30, 0), (16, 14), (12, 0), (8, 6)]})
    torch.save({"model": student.state_dict(), "opt": opt.state_dict(), "state": state,
                "cross": sdec.state_dict() if args.train_cross else None,
                "ctc": head.state_dict() if head is not None else None,
                "avg": avg.state_dict() if avg is not None else None}, ckpt)
    if head is not None:
        save_file({k: v.detach().float().cpu().contiguous() for k, v in head.tensors().items()},
                  os.path.join(args.out, "ctc-mlp.safetensors"))
    save_student(student, args.out, args.lora)
    if avg is not None:
        save_student(avg, os.path.join(args.out, "ema"), args.lora)
    if args.train_cross:
        save_file({k: v.detach().to(torch.float16).cpu().contiguous() for k, v in sdec.cross_names().items()},
                  os.path.join(args.out, "student-cross.safetensors"))
    json.dump({"state": state, "contexts": contexts, "left": LEFT, "args": vars(args)},
              open(os.path.join(args.out, "state.json"), "w"), indent=1)
    log("saved", state)


if __name__ == "__main__":
    main()
