"""Whisper's encoder in plain PyTorch, with its self-attention restricted to
chunks (each frame sees its chunk, `left` frames before it and `right` after
it), loaded from and saved to the `transformers` tensor names that pulsed
reads. Same maths as pulsed's graph (src/models/whisper/graphs.rs + ChunkedAttention)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

P = "model.encoder."


def chunk_mask(t, chunk, left, right, device):
    """[t, t] bool, True where query i may see key j (pulsed's ChunkedAttention.window)."""
    i = torch.arange(t, device=device)
    start = (i // chunk) * chunk
    j = i[None, :]
    return (j >= (start - left)[:, None]) & (j <= (start + chunk - 1 + right)[:, None])


def attention(q, k, v, mask):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # torch < 2.0 (Debian's, for CPU checks)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def copy_rows(t, chunk, left, right, device):
    """Right-context copies (pulsed's right_copies, src/models/whisper/right_copies.rs):
    the source frame of each row (the t frames, then for each chunk copies of
    the `right` frames after it inside the window) and the [n, n] mask: every
    row sees its chunk's frames, `left` frames before them and its own
    chunk's copies."""
    src, blk = list(range(t)), [i // chunk for i in range(t)]
    for b in range((t + chunk - 1) // chunk):
        first = (b + 1) * chunk
        for i in range(first, min(first + right, t)):
            src.append(i)
            blk.append(b)
    src = torch.tensor(src, device=device)
    blk = torch.tensor(blk, device=device)
    start = blk * chunk
    frame = torch.arange(len(src), device=device) < t
    sees_frame = frame[None, :] & (src[None, :] >= (start - left)[:, None]) & (src[None, :] < (start + chunk)[:, None])
    sees_copy = ~frame[None, :] & (blk[None, :] == blk[:, None])
    return src, sees_frame | sees_copy


def layer_mask(t, ctx, layer, device):
    """ctx = (chunk, left, right[, all_layers]): the look-ahead `right` is the
    first layer's only, unless all_layers (then it compounds, a chunk a layer)."""
    chunk, left, right = ctx[:3]
    all_layers = len(ctx) > 3 and ctx[3]
    return chunk_mask(t, chunk, left, right if (layer == 0 or all_layers) else 0, device)


class Layer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ffn)
        self.fc2 = nn.Linear(ffn, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        h = self.ln1(x)
        sp = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        a = attention(sp(self.q(h)), sp(self.k(h)), sp(self.v(h)), mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, m = cfg["d_model"], cfg["num_mel_bins"]
        self.cfg = cfg
        self.conv1 = nn.Conv1d(m, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.register_buffer("pos", torch.zeros(cfg["max_source_positions"], d))
        self.layers = nn.ModuleList(Layer(d, cfg["encoder_attention_heads"], cfg["encoder_ffn_dim"])
                                    for _ in range(cfg["encoder_layers"]))
        self.ln_post = nn.LayerNorm(d)

    def forward(self, mel, ctx=None):
        """mel [B, n_mels, 3000]; ctx (chunk, left, right[, all_layers]) or None (whole window);
        all_layers "copies": right-context copies (copy_rows).
        Returns the output [B, 1500, d] and every layer's output."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        x = x + self.pos[: x.shape[1]]
        hidden = []
        if ctx is not None and len(ctx) > 3 and ctx[3] == "copies":
            t = x.shape[1]
            src, mask = copy_rows(t, ctx[0], ctx[1], ctx[2], x.device)
            x = x[:, src]
            for layer in self.layers:
                x = layer(x, mask)
                hidden.append(x[:, :t])
            return self.ln_post(x[:, :t]), hidden
        for i, layer in enumerate(self.layers):
            x = layer(x, None if ctx is None else layer_mask(x.shape[1], ctx, i, x.device))
            hidden.append(x)
        return self.ln_post(x), hidden

    # --- transformers names ---------------------------------------------
    def names(self):
        n = {P + "conv1.weight": self.conv1.weight, P + "conv1.bias": self.conv1.bias,
             P + "conv2.weight": self.conv2.weight, P + "conv2.bias": self.conv2.bias,
             P + "embed_positions.weight": self.pos,
             P + "layer_norm.weight": self.ln_post.weight, P + "layer_norm.bias": self.ln_post.bias}
        for i, l in enumerate(self.layers):
            p = f"{P}layers.{i}."
            for hf, mod in (("self_attn.q_proj", l.q), ("self_attn.k_proj", l.k), ("self_attn.v_proj", l.v),
                            ("self_attn.out_proj", l.o), ("self_attn_layer_norm", l.ln1),
                            ("final_layer_norm", l.ln2), ("fc1", l.fc1), ("fc2", l.fc2)):
                n[p + hf + ".weight"] = mod.weight
                if mod.bias is not None:
                    n[p + hf + ".bias"] = mod.bias
        return n

    def load(self, tensors):
        with torch.no_grad():
            for k, p in self.names().items():
                src = tensors[k]
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{k}: {tuple(src.shape)} vs {tuple(p.shape)}")
                p.copy_(src.float())
        return self


def log_mel(audio, filters, n_fft=400, hop=160):
    """Whisper's features for [B, 480000] audio (30 s, zero padded): [B, n_mels, 3000]."""
    win = torch.hann_window(n_fft, device=audio.device)
    spec = torch.stft(audio, n_fft, hop, window=win, return_complex=True)
    power = spec[..., :-1].abs() ** 2
    mel = filters @ power
    logm = torch.clamp(mel, min=1e-10).log10()
    logm = torch.maximum(logm, logm.amax(dim=(1, 2), keepdim=True) - 8.0)
    return (logm + 4.0) / 4.0


def mel_filters(n_mels, sr=16000, n_fft=400):
    """Slaney-style mel filter bank [n_mels, n_fft/2+1] (librosa's default, as Whisper uses)."""
    fmin, fmax = 0.0, sr / 2
    fft_freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)

    def hz_to_mel(f):
        f = torch.as_tensor(f, dtype=torch.float64)
        lin = f / (200.0 / 3)
        logstep = math.log(6.4) / 27.0
        return torch.where(f >= 1000.0, 15.0 + torch.log(f / 1000.0) / logstep, lin)

    def mel_to_hz(m):
        lin = m * (200.0 / 3)
        logstep = math.log(6.4) / 27.0
        return torch.where(m >= 15.0, 1000.0 * torch.exp(logstep * (m - 15.0)), lin)

    mels = torch.linspace(float(hz_to_mel(fmin)), float(hz_to_mel(fmax)), n_mels + 2, dtype=torch.float64)
    hz = mel_to_hz(mels)
    fdiff = hz[1:] - hz[:-1]
    ramps = hz[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    w = torch.clamp(torch.minimum(lower, upper), min=0)
    enorm = 2.0 / (hz[2:n_mels + 2] - hz[:n_mels])
    return (w * enorm[:, None]).float()
