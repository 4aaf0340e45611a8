"""Whisper's decoder in plain PyTorch, teacher-forced over whole token
sequences (no cache), loaded from the `transformers` tensor names; its
logits are over the embedding it is given (the sub-vocabulary of
decoder_pack.py). Fixed during distillation, but for its cross-attention
when `distill.py --train-cross` lets it follow the student."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from encoder import attention

P = "model.decoder."


class Attn(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, x, mem, mask):
        b, t, d = x.shape
        sp = lambda y: y.view(b, y.shape[1], self.heads, d // self.heads).transpose(1, 2)
        a = attention(sp(self.q(x)), sp(self.k(mem)), sp(self.v(mem)), mask)
        return self.o(a.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.ln1, self.self_attn = nn.LayerNorm(d), Attn(d, heads)
        self.ln2, self.cross = nn.LayerNorm(d), Attn(d, heads)
        self.ln3, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x, enc, causal):
        h = self.ln1(x)
        x = x + self.self_attn(h, h, causal)
        x = x + self.cross(self.ln2(x), enc, None)
        return x + self.fc2(F.gelu(self.fc1(self.ln3(x))))


class Decoder(nn.Module):
    def __init__(self, cfg, vocab):
        super().__init__()
        d = cfg["d_model"]
        self.embed = nn.Parameter(torch.zeros(vocab, d))
        self.register_buffer("pos", torch.zeros(cfg["max_target_positions"], d))
        self.blocks = nn.ModuleList(Block(d, cfg["decoder_attention_heads"], cfg["decoder_ffn_dim"])
                                    for _ in range(cfg["decoder_layers"]))
        self.ln = nn.LayerNorm(d)

    def forward(self, tokens, enc):
        """tokens [B, L] (sub-vocabulary ids), enc [B, 1500, d] -> logits [B, L, vocab]."""
        t = tokens.shape[1]
        x = self.embed[tokens] + self.pos[:t]
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        for blk in self.blocks:
            x = blk(x, enc, causal)
        return self.ln(x) @ self.embed.t()

    def names(self):
        """transformers name -> parameter or buffer."""
        n = {P + "embed_tokens.weight": self.embed, P + "embed_positions.weight": self.pos,
             P + "layer_norm.weight": self.ln.weight, P + "layer_norm.bias": self.ln.bias}
        for i, b in enumerate(self.blocks):
            p = f"{P}layers.{i}."
            for hf, mod in (("self_attn_layer_norm", b.ln1), ("encoder_attn_layer_norm", b.ln2),
                            ("final_layer_norm", b.ln3), ("fc1", b.fc1), ("fc2", b.fc2)):
                n[p + hf + ".weight"], n[p + hf + ".bias"] = mod.weight, mod.bias
            for hf, att in (("self_attn", b.self_attn), ("encoder_attn", b.cross)):
                for proj, lin in (("q_proj", att.q), ("k_proj", att.k), ("v_proj", att.v), ("out_proj", att.o)):
                    n[f"{p}{hf}.{proj}.weight"] = lin.weight
                    if lin.bias is not None:
                        n[f"{p}{hf}.{proj}.bias"] = lin.bias
        return n

    def cross_names(self):
        """The tensors that read the encoder: each layer's cross-attention
        and the norm before it (all independent of the vocabulary, so they
        go back into a whole checkpoint as they are)."""
        return {k: v for k, v in self.names().items() if ".encoder_attn" in k}

    def load(self, tensors):
        with torch.no_grad():
            for k, prm in self.names().items():
                src = tensors[k]
                if tuple(src.shape) != tuple(prm.shape):
                    raise ValueError(f"{k}: {tuple(src.shape)} vs {tuple(prm.shape)}")
                prm.copy_(src.float())
        for prm in self.parameters():
            prm.requires_grad_(False)
        return self


def kl(teacher_logits, student_logits, mask):
    """Mean over unmasked positions of KL(teacher || student)."""
    lt = teacher_logits.float().log_softmax(-1)
    ls = student_logits.float().log_softmax(-1)
    per = (lt.exp() * (lt - ls)).sum(-1)
    return (per * mask).sum() / mask.sum().clamp(min=1)


def ce(logits, tokens, mask):
    """Mean over unmasked positions of the cross-entropy of the next token
    (teacher-forced: position p predicts tokens[:, p + 1])."""
    lp = logits[:, :-1].float().log_softmax(-1)
    nll = -lp.gather(-1, tokens[:, 1:, None])[..., 0]
    m = mask[:, :-1]
    return (nll * m).sum() / m.sum().clamp(min=1)
