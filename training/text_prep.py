"""Build training / held-out sentence lists from the Debian packages `fortunes`,
`fortunes-min`, `fortune-anarchism` and `fortunes-bofh-excuses` (plain-text
English quotation collections, ~490k words; Portuguese `mario.*` files skipped).

usage: python3 text_prep.py FORTUNES_DIR OUT_DIR
Writes OUT_DIR/train.txt and OUT_DIR/heldout.txt (one normalised sentence a line).
Held-out = md5(sentence) % 40 == 0 (~2.5%), and no held-out sentence occurs in train.
"""
import hashlib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import normalise  # noqa: E402

SKIP_FILES = {"ascii-art", "translate-me"}
VOWELS = set("aeiouy")


def fortunes(dirname):
    for name in sorted(os.listdir(dirname)):
        p = os.path.join(dirname, name)
        if name.endswith(".dat") or name.endswith(".u8") or name in SKIP_FILES or name.startswith("mario") or not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            data = f.read()
        for entry in data.split("\n%\n"):
            lines = [l for l in entry.split("\n") if not re.match(r"^\s*--", l)]
            yield " ".join(l.strip() for l in lines)


def sentences(text):
    text = re.sub(r"\s+", " ", text)
    for s in re.split(r"(?<=[.!?])\s+", text):
        s = s.strip()
        if not s:
            continue
        if len(s.split()) <= 24:
            yield s
            continue
        # long sentence: cut at clause boundaries into chunks of <= 20 words
        chunk = []
        for part in re.split(r"(?<=[,;:])\s+", s):
            if chunk and len(" ".join(chunk + [part]).split()) > 20:
                yield " ".join(chunk)
                chunk = []
            chunk.append(part)
        if chunk:
            yield " ".join(chunk)


def good(raw, norm):
    words = norm.split()
    if not (3 <= len(words) <= 24) or len(norm) > 150:
        return False
    # acronyms (spoken letter by letter) and vowel-less words are unreliable
    if re.search(r"\b[A-Z]{2,}\b", raw):
        return False
    for w in words:
        if len(w) > 1 and not (set(w) & VOWELS):
            return False
        if len(w) > 18:
            return False
    return True


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    seen = set()
    train, held = [], []
    for entry in fortunes(src):
        for s in sentences(entry):
            n = normalise(s)
            if n is None or not good(s, n) or n in seen:
                continue
            seen.add(n)
            h = int(hashlib.md5(n.encode()).hexdigest(), 16)
            (held if h % 40 == 0 else train).append(n)
    with open(os.path.join(out, "train.txt"), "w") as f:
        f.write("\n".join(train) + "\n")
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        f.write("\n".join(held) + "\n")
    nw = sum(len(s.split()) for s in train)
    print(f"train sentences {len(train)} ({nw} words), heldout {len(held)}")


if __name__ == "__main__":
    main()
