"""Word n-gram language model (ARPA) for the Rust beam search's shallow fusion.

usage: python3 build_lm.py TRAIN_SENTENCES.txt OUT.arpa [--order 2] [--prune 1]
                          [--lexicon WORDLIST ... [--lexicon-count 0.5]]

Interpolated Kneser-Ney (one discount per order, D = n1 / (n1 + 2 n2)) over
the training sentences only (one per line, already normalised by
text_prep.py: lowercase letters, apostrophes, single spaces), so held-out
sentences stay unseen. Lower orders use continuation counts. `<unk>` gets
the unigram mass of words seen once (a stand-in for words never seen).
`--prune K` drops highest-order n-grams (order >= 2) seen at most K times
(their probability then comes from the back-off, a small approximation)
to keep the file small. `--lexicon` adds the words of spelling word lists
(one per line; Debian's wamerican/wbritish) that the sentences lack as
unigrams with a small count, so beam search does not charge correct
spellings of unseen words as out-of-vocabulary. Standard library only.
"""
import argparse
import math
from collections import Counter, defaultdict


def discount(counts):
    n = Counter(c for c in counts.values() if c <= 2)
    n1, n2 = n[1], n[2]
    return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sentences")
    ap.add_argument("out")
    ap.add_argument("--order", type=int, default=2)
    ap.add_argument("--prune", type=int, default=1)
    ap.add_argument("--lexicon", nargs="*", default=[])
    ap.add_argument("--lexicon-count", type=float, default=0.5)
    a = ap.parse_args()
    N = a.order

    raw = [Counter() for _ in range(N + 1)]  # raw[n][tuple of n words]
    for line in open(a.sentences, encoding="utf-8"):
        words = line.split()
        if not words:
            continue
        s = ["<s>"] + words + ["</s>"]
        for n in range(1, N + 1):
            for i in range(len(s) - n + 1):
                raw[n][tuple(s[i:i + n])] += 1

    # counts used at each order: raw at the top, continuation counts below
    # (how many distinct words precede the n-gram); n-grams starting with
    # <s> have no left context, so they keep raw counts
    use = [None] * (N + 1)
    use[N] = raw[N]
    for n in range(1, N):
        cont = Counter()
        for g in raw[n + 1]:
            cont[g[1:]] += 1
        for g, c in raw[n].items():
            if g[0] == "<s>":
                cont[g] = c
        use[n] = cont
    singletons = sum(1 for g, c in raw[1].items() if c == 1)
    use[1][("<unk>",)] = max(singletons, 1)
    allowed = set("abcdefghijklmnopqrstuvwxyz'")
    added = 0
    for path in a.lexicon:
        for w in open(path, encoding="utf-8", errors="ignore"):
            w = w.strip().lower()
            if w and set(w) <= allowed and (w,) not in use[1]:
                use[1][(w,)] = a.lexicon_count
                added += 1
    if a.lexicon:
        print(f"lexicon: {added} words added", flush=True)

    # probabilities, lowest order first
    prob = [dict() for _ in range(N + 1)]
    bow = [dict() for _ in range(N + 1)]
    total1 = sum(c for g, c in use[1].items() if g != ("<s>",))
    for g, c in use[1].items():
        prob[1][g] = c / total1 if g != ("<s>",) else 0.0
    for n in range(2, N + 1):
        D = discount(use[n])
        ctx_total = defaultdict(int)
        ctx_types = defaultdict(int)
        for g, c in use[n].items():
            ctx_total[g[:-1]] += c
            ctx_types[g[:-1]] += 1
        for h, t in ctx_total.items():
            bow[n - 1][h] = D * ctx_types[h] / t
        for g, c in use[n].items():
            h = g[:-1]
            lower = lower_prob(prob, bow, g[1:])
            prob[n][g] = max(c - D, 0) / ctx_total[h] + bow[n - 1][h] * lower
        if n == N and a.prune > 0:
            for g in [g for g, c in raw[n].items() if c <= a.prune]:
                prob[n].pop(g, None)

    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\\data\\\n")
        for n in range(1, N + 1):
            f.write(f"ngram {n}={len(prob[n])}\n")
        for n in range(1, N + 1):
            f.write(f"\n\\{n}-grams:\n")
            for g in sorted(prob[n]):
                p = prob[n][g]
                lp = math.log10(p) if p > 0 else -99.0
                line = f"{lp:.5f}\t{' '.join(g)}"
                if n < N and g in bow[n]:
                    line += f"\t{math.log10(bow[n][g]):.5f}"
                f.write(line + "\n")
        f.write("\n\\end\\\n")
    print(a.out, [len(prob[n]) for n in range(1, N + 1)], "n-grams")


def lower_prob(prob, bow, g):
    """P(g[-1] | g[:-1]) from the model of order len(g), backing off."""
    n = len(g)
    if g in prob[n]:
        return prob[n][g]
    if n == 1:
        return prob[1][("<unk>",)]
    return bow[n - 1].get(g[:-1], 1.0) * lower_prob(prob, bow, g[1:])


if __name__ == "__main__":
    main()
