#!/usr/bin/python3
"""Nasty texts for the GPT-2 tokenizer comparison (tests/e2e/test_tokenizer_gpt2.sh).

usage: gpt2_texts.py OUT.jsonl SEED [FORTUNE_FILE...]
Writes one {"text": ...} object per line: fixed edge cases (contractions in every case,
numbers in several scripts, whitespace of every kind and long runs, emoji with ZWJ and skin
tones, combining marks, CJK, RTL, <|endoftext|> inside the text, lone punctuation), random
strings drawn from those alphabets, and the fortunes given (real English text). Only valid
Unicode (the JavaScript references take strings, not bytes); invalid UTF-8 is the unit tests'.
"""
import json
import random
import sys

FIXED = [
    "Hello world", "It's", "it'S", "they're we've I'm you'll he'd", "THEY'RE WE'VE I'M YOU'LL HE'D",
    "'s't're've'm'll'd", "don't stop", "rock 'n' roll", "'''", "' s", "2024-12-01 12:34:56.789",
    "3.14159 1e-10 0x1F ٣٤٥ ०१२ ²³ ½ Ⅻ 一二三", "   leading", "trailing   ", " ", "  ", "\n", "\n\n\n",
    "a\r\nb\r\n", "\t\ttabs\t", " " * 1000, "\n" * 300, " \n " * 100, "x" + " " * 257 + "y",
    "\u00a0nbsp\u00a0 \u2028ls\u2029ps \u3000ideo \ufeffbom \u0085nel \u200bzwsp \u202fnnbsp \u205fmmsp",
    "\u000b\u000c\u001c\u001d\u001e\u001f", "😀😃😄 👍🏽 👩‍👩‍👧‍👦 🇫🇷 ❤️", "e\u0301 a\u0308 ñ n\u0303",
    "日本語のテキスト、中文文本。한국어 텍스트", "مرحبا بالعالم", "שלום עולם", "Привет, мир!", "Ελληνικά",
    "<|endoftext|>", "before<|endoftext|>after", "<|endoftext|><|endoftext|>", "<|endoftext", "|>",
    "!!!???...,,,;;;", "#$%&*+-/<=>@[\\]^_`{|}~", "a.b,c;d:e", "$100 £50 €20 ¥1000",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C++ and C# and F#",
    "def f(x):\n    return x ** 2\n", "if (a && b) { return; }", "x" * 500, "ab" * 300,
    "\U0001F600" * 50, "ǅǈǋǲ ﬁﬂ ẞß", "\U00010348\U0001D11E", "A" + "\u0300" * 20,
]
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r",
    " \u00a0\u2028\u3000\ufeff\u0085", ".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`", "äöüßéèêçñ", "日本語中文한국어",
    "مرحبا", "שלום", "Привет", "😀👍🏽❤️‍🔥🇫🇷", "\u0301\u0308\u0303", "٠١٢٣४५६", "'s'd'll're",
]


def random_text(rng):
    n = rng.choice([1, 2, 3, 5, 8, 13, 40, 120])
    parts = []
    for _ in range(n):
        a = rng.choice(ALPHABETS)
        parts.append("".join(rng.choice(a) for _ in range(rng.randint(1, 12))))
    return "".join(parts)


def main():
    out, seed, fortunes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    rng = random.Random(seed)
    docs = list(FIXED)
    docs += [random_text(rng) for _ in range(3000)]
    for path in fortunes:
        text = open(path, encoding="utf-8", errors="replace").read()
        docs += [d for d in text.split("\n%\n") if d]
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    print(f"{len(docs)} texts, {sum(len(d.encode()) for d in docs)} bytes")


main()
