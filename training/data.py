"""Training / evaluation data: synthesise with espeak-ng, resample, keep as int16
16 kHz audio in one flat buffer with offsets (cached to disk as .npy)."""
import json
import os
import random
import time

import numpy as np
import torch

import synth
from common import text_to_ids


def _resample_batched(raw, device, sr_in=22050, batch=256):
    import torchaudio.functional as AF
    order = sorted(range(len(raw)), key=lambda i: len(raw[i]))
    out = [None] * len(raw)
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        L = max(len(raw[i]) for i in idx)
        x = torch.zeros(len(idx), L)
        for r, i in enumerate(idx):
            x[r, :len(raw[i])] = torch.from_numpy(raw[i].astype(np.float32) / 32768.0)
        y = AF.resample(x.to(device), sr_in, 16000).cpu()
        y = torch.clamp(torch.round(y * 32767.0), -32768, 32767).to(torch.int16).numpy()
        for r, i in enumerate(idx):
            n = (len(raw[i]) * 16000) // sr_in
            out[i] = y[r, :n]
    return out


def build_set(name, items, meta, cache, device, procs=None):
    """items: synth items; meta: list of dicts (text, voice...). Writes cache/name.{npy,json}."""
    t0 = time.time()
    raw = synth.synth_many(items, procs=procs, resample=False)
    t1 = time.time()
    wav = _resample_batched(raw, device)
    del raw
    lens = np.array([len(w) for w in wav], np.int64)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    np.save(os.path.join(cache, name + ".npy"), np.concatenate(wav))
    for m, o, n in zip(meta, offs, lens):
        m["off"], m["len"] = int(o), int(n)
    with open(os.path.join(cache, name + ".json"), "w") as f:
        json.dump(meta, f)
    hours = lens.sum() / 16000 / 3600
    print(f"[data] {name}: {len(meta)} utts, {hours:.2f} h, synth {t1 - t0:.1f}s, resample {time.time() - t1:.1f}s", flush=True)


def build_all(text_dir, cache, device, renditions=3, limit=None, procs=None, seed=1234):
    os.makedirs(cache, exist_ok=True)
    train = open(os.path.join(text_dir, "train.txt")).read().split("\n")
    held = open(os.path.join(text_dir, "heldout.txt")).read().split("\n")
    train = [t for t in train if t][:limit]
    held = [t for t in held if t][: (limit or 10 ** 9)]
    rng = random.Random(seed)
    sets = {}
    items, meta = [], []
    for r in range(renditions):
        for t in train:
            p = synth.random_params(rng, synth.TRAIN_VARIANTS)
            items.append((t,) + p)
            meta.append({"text": t, "voice": p[0], "rate": p[1]})
    sets["train"] = (items, meta)
    for name, variants in (("eval_sent", synth.TRAIN_VARIANTS), ("eval_voice", synth.HELDOUT_VARIANTS)):
        items, meta = [], []
        for t in held:
            p = synth.random_params(rng, variants)
            items.append((t,) + p)
            meta.append({"text": t, "voice": p[0], "rate": p[1]})
        sets[name] = (items, meta)
    for name, (items, meta) in sets.items():
        if not os.path.exists(os.path.join(cache, name + ".json")):
            build_set(name, items, meta, cache, device, procs)


class AudioSet:
    """All utterances of a set on `device`: audio int16 flat, offsets, lengths, targets."""

    def __init__(self, cache, name, device):
        self.meta = json.load(open(os.path.join(cache, name + ".json")))
        self.audio = torch.from_numpy(np.load(os.path.join(cache, name + ".npy"))).to(device)
        self.off = torch.tensor([m["off"] for m in self.meta], device=device)
        self.len = torch.tensor([m["len"] for m in self.meta], device=device)
        self.len_cpu = np.array([m["len"] for m in self.meta])
        self.texts = [m["text"] for m in self.meta]
        self.tok = [torch.tensor(text_to_ids(t), dtype=torch.int32) for t in self.texts]
        self.device = device

    def __len__(self):
        return len(self.meta)

    def hours(self):
        return self.len_cpu.sum() / 16000 / 3600

    def gather(self, idx, lead=None, extra=0):
        """float waveform batch [B, L] for utterance ids idx (LongTensor on device).
        lead: per-utterance leading zeros (samples). Returns (wav, lengths)."""
        lens = self.len[idx]
        if lead is None:
            lead = torch.zeros_like(lens)
        tot = lens + lead
        L = int(tot.max().item()) + extra
        pos = torch.arange(L, device=self.device)[None, :] - lead[:, None]
        valid = (pos >= 0) & (pos < lens[:, None])
        src = (self.off[idx][:, None] + pos.clamp(min=0)).clamp(max=self.audio.numel() - 1)
        wav = torch.where(valid, self.audio[src].float() / 32768.0, torch.zeros((), device=self.device))
        return wav, tot

    def batches(self, max_samples, rng, shuffle=True, max_batch=1024):
        """Length-bucketed batches of indices; total padded samples <= max_samples."""
        order = np.argsort(self.len_cpu + (rng.random(len(self.len_cpu)) * 16000 if shuffle else 0))
        out, cur, cur_max = [], [], 0
        for i in order:
            m = max(cur_max, self.len_cpu[i] + 8000)
            if cur and (m * (len(cur) + 1) > max_samples or len(cur) >= max_batch):
                out.append(cur)
                cur, m = [], self.len_cpu[i] + 8000
            cur.append(i)
            cur_max = m
        if cur:
            out.append(cur)
        if shuffle:
            rng.shuffle(out)
        return out
