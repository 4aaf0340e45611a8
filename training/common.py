"""Shared helpers: token set, text normalisation, edit-distance metrics."""
import re

TOKENS = ["<blk>", "<sp>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["'"]
assert len(TOKENS) == 29
CHAR2ID = {" ": 1, "'": 28}
CHAR2ID.update({chr(ord("a") + i): 2 + i for i in range(26)})
ID2CHAR = {v: k for k, v in CHAR2ID.items()}

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def num2words(n: int) -> str:
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        r = n % 100
        return _ONES[n // 100] + " hundred" + ("" if r == 0 else " and " + num2words(r))
    if n < 1_000_000:
        r = n % 1000
        return num2words(n // 1000) + " thousand" + ("" if r == 0 else " " + num2words(r))
    return " ".join(_ONES[int(d)] for d in str(n))


def _year(n: int) -> str:
    # 1984 -> nineteen eighty four ; 2000 -> two thousand
    if 1100 <= n <= 1999 and n % 100 != 0:
        hi, lo = divmod(n, 100)
        return num2words(hi) + " " + (("oh " + _ONES[lo]) if lo < 10 else num2words(lo))
    return num2words(n)


def _spell_number(m: re.Match) -> str:
    s = m.group(0)
    if len(s) > 1 and s[0] == "0":
        return " " + " ".join(_ONES[int(d)] for d in s) + " "
    n = int(s)
    if len(s) == 4:
        return " " + _year(n) + " "
    if len(s) > 6:
        return " " + " ".join(_ONES[int(d)] for d in s) + " "
    return " " + num2words(n) + " "


def normalise(text: str):
    """Map free text to the 29-token alphabet. Returns None when the text holds
    something we cannot speak reliably (symbols, code, ...)."""
    t = text.replace("\u2019", "'").replace("`", "'")
    t = t.replace("&", " and ").replace("%", " percent ")
    t = re.sub(r"\d+", _spell_number, t)
    t = t.lower()
    # drop quotes used as quotation marks; keep word-internal apostrophes
    t = re.sub(r"(^|[^a-z])'+|'+([^a-z]|$)", r"\1 \2", t)
    t = re.sub(r"[.,;:!?\"()\-]", " ", t)
    if re.search(r"[^a-z' ]", t):
        return None
    t = re.sub(r"\s+", " ", t).strip()
    return t or None


def text_to_ids(t: str):
    return [CHAR2ID[c] for c in t]


def ids_to_text(ids):
    return "".join(ID2CHAR.get(i, "") for i in ids)


def ctc_greedy(ids):
    out, prev = [], -1
    for i in ids:
        if i != prev and i != 0:
            out.append(i)
        prev = i
    return ids_to_text(out).strip()


def edit_distance(a, b) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def cer_wer(pairs):
    """pairs: iterable of (ref, hyp). Returns (CER, WER) as corpus-level ratios."""
    ce = cn = we = wn = 0
    for ref, hyp in pairs:
        ref = " ".join(ref.split())
        hyp = " ".join(hyp.split())
        ce += edit_distance(ref, hyp)
        cn += len(ref)
        we += edit_distance(ref.split(), hyp.split())
        wn += len(ref.split())
    return ce / max(cn, 1), we / max(wn, 1)
