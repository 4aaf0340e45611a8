"""Streaming conformer-CTC, exactly as models/ARCHITECTURE.md."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(sample_rate=16000, n_fft=400, hop=160, n_mels=80, log_eps=1e-6,
              subsample_channels=256, subsample_kernel=3, d_model=256, n_heads=4,
              ff_dim=1024, n_blocks=6, conv_kernel=15, left_context=64, vocab_size=29,
              layer_norm_eps=1e-5)


EXPLICIT_ATTENTION = False  # True: plain matmul/softmax (used for golden outputs)


def mel_filterbank(n_freqs=201, n_mels=80, sample_rate=16000):
    import torchaudio.functional as AF
    return AF.melscale_fbanks(n_freqs, f_min=0.0, f_max=sample_rate / 2, n_mels=n_mels,
                              sample_rate=sample_rate, norm=None, mel_scale="htk")


class FrontEnd(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_fft, self.hop, self.eps = cfg["n_fft"], cfg["hop"], cfg["log_eps"]
        n = torch.arange(self.n_fft, dtype=torch.float64)
        self.register_buffer("window", (0.5 - 0.5 * torch.cos(2 * math.pi * n / self.n_fft)).float())
        self.register_buffer("mel_fb", mel_filterbank(self.n_fft // 2 + 1, cfg["n_mels"], cfg["sample_rate"]).float())
        self.register_buffer("mean", torch.zeros(cfg["n_mels"]))
        self.register_buffer("inv_std", torch.ones(cfg["n_mels"]))

    def log_mel(self, x):
        """x [B, S] f32 -> [B, T, n_mels] log-mel, T = S // hop. Always f32."""
        pad = self.n_fft - self.hop
        x = F.pad(x.float(), (pad, 0))
        T = (x.shape[1] - self.n_fft) // self.hop + 1
        frames = x.unfold(1, self.n_fft, self.hop)[:, :T]  # [B, T, n_fft]
        spec = torch.fft.rfft(frames * self.window, dim=-1)
        power = spec.real ** 2 + spec.imag ** 2
        mel = torch.matmul(power, self.mel_fb)
        return torch.log(mel + self.eps)

    def forward(self, x):
        return (self.log_mel(x) - self.mean) * self.inv_std


class CausalConv1d(nn.Conv1d):
    """Conv over [B, C, T] with left padding kernel-1 (zeros)."""

    def forward(self, x):
        k = self.kernel_size[0]
        return super().forward(F.pad(x, (k - 1, 0)))


class Subsample(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, k = cfg["subsample_channels"], cfg["subsample_kernel"]
        self.conv1 = CausalConv1d(cfg["n_mels"], c, k, stride=2)
        self.conv2 = CausalConv1d(c, cfg["d_model"], k, stride=2)

    def forward(self, f):  # [B, T, 80] -> [B, T2, d]
        x = F.silu(self.conv1(f.transpose(1, 2)))
        x = F.silu(self.conv2(x))
        return x.transpose(1, 2)


class FeedForward(nn.Module):
    def __init__(self, d, ff, eps):
        super().__init__()
        self.norm = nn.LayerNorm(d, eps=eps)
        self.linear1 = nn.Linear(d, ff)
        self.linear2 = nn.Linear(ff, d)

    def forward(self, x):
        return self.linear2(F.silu(self.linear1(self.norm(x))))


class Attention(nn.Module):
    def __init__(self, d, h, eps):
        super().__init__()
        self.h = h
        self.norm = nn.LayerNorm(d, eps=eps)
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, mask):
        B, T, D = x.shape
        y = self.norm(x)
        q, k, v = (m(y).view(B, T, self.h, D // self.h).transpose(1, 2) for m in (self.q, self.k, self.v))
        if hasattr(F, "scaled_dot_product_attention") and not EXPLICIT_ATTENTION:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # scale 1/sqrt(d/h)
        else:
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // self.h)
            s = s.masked_fill(~mask, float("-inf"))
            o = torch.matmul(torch.softmax(s, dim=-1), v)
        return self.out(o.transpose(1, 2).reshape(B, T, D))


class ConvModule(nn.Module):
    def __init__(self, d, k, eps):
        super().__init__()
        self.norm = nn.LayerNorm(d, eps=eps)
        self.pointwise1 = nn.Linear(d, 2 * d)
        self.depthwise = CausalConv1d(d, d, k, groups=d)
        self.dw_norm = nn.LayerNorm(d, eps=eps)
        self.pointwise2 = nn.Linear(d, d)

    def forward(self, x):
        y = F.glu(self.pointwise1(self.norm(x)), dim=-1)  # a * sigmoid(b)
        y = self.depthwise(y.transpose(1, 2)).transpose(1, 2)
        return self.pointwise2(F.silu(self.dw_norm(y)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg["d_model"], cfg["layer_norm_eps"]
        self.ff1 = FeedForward(d, cfg["ff_dim"], eps)
        self.attn = Attention(d, cfg["n_heads"], eps)
        self.conv = ConvModule(d, cfg["conv_kernel"], eps)
        self.ff2 = FeedForward(d, cfg["ff_dim"], eps)
        self.norm_out = nn.LayerNorm(d, eps=eps)

    def forward(self, x, mask):
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(x, mask)
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.norm_out(x)


def attention_mask(T, left_context, device):
    """bool [T, T]: True where query i may attend key j (i - left_context <= j <= i)."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    return (j <= i) & (j >= i - left_context)


def out_lengths(n_samples, hop=160):
    t = n_samples // hop
    t1 = (t + 1) // 2
    return (t1 + 1) // 2


class ConformerCTC(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = dict(CONFIG if cfg is None else cfg)
        self.frontend = FrontEnd(self.cfg)
        self.subsample = Subsample(self.cfg)
        self.blocks = nn.ModuleList(Block(self.cfg) for _ in range(self.cfg["n_blocks"]))
        self.ctc = nn.Linear(self.cfg["d_model"], self.cfg["vocab_size"])

    def encode(self, feats, return_all=False):
        x = self.subsample(feats)
        sub = x
        mask = attention_mask(x.shape[1], self.cfg["left_context"], x.device)
        for b in self.blocks:
            x = b(x, mask)
        return (sub, x) if return_all else x

    def forward(self, wav, specaug=None):
        """wav [B, S] -> log_probs [B, T2, vocab] (f32)."""
        f = self.frontend(wav)
        if specaug is not None:
            f = specaug(f)
        x = self.encode(f)
        return F.log_softmax(self.ctc(x).float(), dim=-1)
