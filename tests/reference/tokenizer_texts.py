#!/usr/bin/python3
"""Nasty texts for the Hugging Face tokenizer.json comparison (tests/e2e/test_tokenizer_hf.sh),
and Oniguruma's own split of them (the regex engine Hugging Face's Rust tokenizers run).

usage: tokenizer_texts.py texts OUT.json SEED      one JSON list of strings (also OUT.jsonl for prep)
       tokenizer_texts.py onig-split < IN.json     {"patterns": [...], "texts": [...]} on stdin ->
                                                   {"pieces": [[...], ...]} (or {"error": ...})
       tokenizer_texts.py classify TEXTS.json      per text, why it may split differently (below)

The texts: gpt2_texts.py's fixed edge cases and alphabets (read from that file, not copied),
then digit runs with separators in several scripts, contractions in every case (and U+017F
LONG S after an apostrophe), CJK incl. kana, half-width forms and Hangul jamo that NFC composes,
emoji with ZWJ, skin tones, flags, tags and keycaps, combining marks NFC composes or reorders,
CRLF, tabs, runs of 1-10 spaces and newlines, leading and trailing spaces, U+0085 U+FEFF U+00A0
U+180E U+200B U+2028 U+3000 U+001C.., Arabic and Hebrew with marks, math, code, URLs, long words,
mixed scripts, added-token strings as plain text ("<|endoftext|>", "<think>", "<s>"), a few
characters assigned after Unicode 14, and random strings from those alphabets. Only valid
Unicode (the JavaScript reference takes strings) and no empty text (prep skips empty documents).

onig-split runs Oniguruma itself (Debian's libonig5 6.9.8, through ctypes; Hugging Face's Rust
tokenizers compile their patterns with Oniguruma through the `onig` crate, which bundles a 6.9.x)
with the syntax and options tokenizers' SysRegex uses (`onig::Regex::new`: OnigDefaultSyntax, no
options, UTF-8) and splits each text as a Split pre-tokenizer with behavior Isolated: every match
and every gap between matches is a piece; several patterns apply one after the other.
tokenizers.js translates Oniguruma patterns to JavaScript (\\s -> \\p{White_Space} and so on) but
not everything; where its pieces differ from these the test derives Hugging Face's ids from these
pieces, and counts the text apart where those ids differ. classify names the likely reason.
"""
import ast
import ctypes
import json
import os
import random
import sys
import unicodedata


def gpt2_texts_lists():
    """FIXED and ALPHABETS of gpt2_texts.py (that script runs main() on import: read its AST)."""
    src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt2_texts.py"), encoding="utf-8").read()
    found = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", "") in ("FIXED", "ALPHABETS"):
            found[node.targets[0].id] = eval(compile(ast.Expression(node.value), "gpt2_texts.py", "eval"), {})
    return found["FIXED"], found["ALPHABETS"]


# texts[0]: the one text also given to `mpitron tokenizer encode --text` (no character whose split
# JavaScript and Oniguruma may disagree on, no special token).
PROBE = (" Hello world, DON'T we'Ll 12345678 日本語 한국어 👩‍👩‍👧‍👦 🇫🇷 e\u0301 A\u030a\r\n\tx  y\u00a0z "
         "<think>x</think> 3.14")
DIGITS = ["1", "12", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789", "1234567890",
          "12345678901234567890", "9" * 100, "0", "00", "007", "1,234", "1,234,567", "1.234.567,89",
          "1 234 567", "1_000_000", "1'000'000", "3.14159", "-42", "+1 (555) 123-4567", "2024-01-01T12:00:00Z",
          "v1.2.3-rc.4", "0x7fffffff", "0b1010", "1e-10", "6.022e23", "$1234.56", "€1.234,56", "50%",
          "a1b22c333d4444e55555", "1a22b333c", "x1234y", "１２３４５", "٣٤٥٦٧٨", "۱۲۳۴", "१२३४५", "๑๒๓๔",
          "①②③④", "ⅧⅨⅩ", "¹²³⁴⁵", "½¾⅓", "𝟏𝟐𝟑𝟒", "1 2 3 4 5", "12 345 6789", "1\n22\n333", "1\t22",
          "３.１４", "12,345.6789 and 9,876", "phone: 555-0100, zip 90210-1234", "1st 2nd 3rd 4th 21st",
          "10:30 AM", "1/2/2024", "192.168.0.1", "255.255.255.0/24", "ISBN 978-3-16-148410-0"]
CONTRACTION_WORDS = ["don't", "DON'T", "Don'T", "I'M", "i'm", "we'Ll", "WE'LL", "They'RE", "they'rE", "you'VE",
                     "YOU'Ve", "she'D", "SHE'D", "it'S", "IT's", "isn't", "ISN'T", "can't've", "y'all",
                     "'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'rE", "'ve", "'VE", "'m", "'M", "'ll", "'LL",
                     "'lL", "'Ll", "'d", "'D", "''s", "'s'", " 's", "x's's", "'ll've", "'", "''", "'''''",
                     "rock 'n' roll", "o'clock", "O'Neil", "l'amour", "'twas", "'Tis", "don’t", "DON’T",
                     "it`s", "'ſ", "'ſt", "iſ'ſ", "Meſſage", "'K", "'ǅ", "'sss", "'ssss s"]
CJK = ["中文文本，测试。", "日本語のテキスト", "ひらがな", "カタカナ", "ｶﾀｶﾅ ﾊﾝｶｸ", "한국어 텍스트", "안녕하세요",
       "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "「引用」『二重』【括弧】", "ＡＢＣ ａｂｃ",
       "漢字かなカナ混じり文", "日本語 English 混在", "中文English混合123", "一二三四五六七八九十百千万",
       "𠀀𠀁𪚥", "。、・ー〜", "\u3000全角スペース\u3000", "台北 臺北", "朝鮮語 조선어 ㄱㄴㄷ"]
EMOJI = ["😀", "😀😃😄😁", "👍", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👩‍👩‍👧‍👦", "🧑🏽‍💻", "👨‍❤️‍👨", "🏳️‍🌈", "🏴‍☠️",
         "🇫🇷🇯🇵🇺🇸🇩🇪", "🇫", "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
         "1️⃣ #️⃣ *️⃣", "❤️ ❤ ♥️", "☺︎ ☺️", "©️ ®️ ™️", "a😀b", " 😀 ", "😀\n😀", "🤷‍♀️🤷🏿‍♂️",
         "hello 👋 world 🌍!", "🎉🎉🎉🎉🎉🎉🎉🎉🎉🎉", "\u200d", "a\u200db", "\ufe0f", "x\ufe0e"]
COMBINING = ["e\u0301", "A\u030a", "n\u0303", "o\u0308", "cafe\u0301", "Ame\u0301lie", "\u212b", "\u2126",
             "e\u0301\u0301", "q\u0301", " \u0301", "\u0301abc", "a\u0323\u0302", "a\u0302\u0323", "\u0958",
             "\u0915\u093c", "ﬁ ﬂ", "\u00c5 A\u030a \u212b", "e\u0300\u0301\u0302\u0303", "a" + "\u0300" * 30,
             "\u1e9b\u0323", "\u0041\u0308\u0304", "Z\u0335\u0336\u0337", "ḍ̇ ḍ̇", "\u0069\u0307",
             "I\u0307stanbul", "\u03a9\u0301", "\u0644\u0627", "\u30ab\u3099", "\u304b\u309a"]
SPACES = ([" " * n + "x" for n in range(1, 11)] + ["x" + " " * n + "y" for n in range(1, 11)] +
          ["x" + " " * n for n in range(1, 11)] + [" " * n for n in range(1, 11)] +
          ["\n" * n for n in range(1, 11)] + ["a" + "\n" * n + "b" for n in range(1, 6)] +
          [" hello", "  hello", "hello ", "hello  ", " hello ", "  hello  world  ", "\thello", "hello\t",
           "a\r\nb", "\r\n", "\r\n\r\n", "line1\r\nline2\r\n", "\r", "a\rb", "\r\r\n", " \r\n ", "a \r\n b",
           "\n \n", "a\n \nb", "  \n\n  x", "a \n b", " \n", "\n ", "x\n\n\n\n\ny", "\t", "a\tb", "\t\t\tx",
           " \t \t", "\t \n", "x \t\n y", "a  \n  b", "end.\n", "end.\n\n", "  \t\r\n\x0b\x0c  "])
ODD_SPACE = ["a\u0085b", "\u0085", " \u0085 x", "x\u0085\u0085\n", "\u0085\u0085", "\ufeffHello", "a\ufeffb",
             "\ufeff \ufeff", " \ufeff", "100\u00a0km", "\u00a0\u00a0x", "a \u00a0b", "x\u00a0", "a\u180eb",
             " \u180e ", "\u180e", "a\u200bb", "\u200b \u200b", "a\u2028b", "a\u2029b", "\u3000x\u3000",
             "a\u1680b", "a\u2000\u2001\u200ab", "a\u202fb", "a\u205fb", "a\x1cb", "\x1d\x1e\x1f",
             "a\x0bb", "a\x0cb", " \x0b ", "x\u00ad y", "\u2060word\u2060", "a\u200e\u200fb"]
RTL = ["مرحبا بالعالم", "مَرْحَبًا", "العربية ١٢٣ abc", "שלום עולם", "שָׁלוֹם", "עברית 123 english",
       "abc مرحبا 123 שלום", "\u200fمرحبا\u200e", "ﷺ ﷲ", "پارسی گپ", "اُردُو", "ܫܠܡܐ"]
MATH = ["∑_{i=1}^{n} i² = n(n+1)/2", "∀x∈ℝ: x²≥0", "α+β=γ", "√2 ≈ 1.414", "∞ ≠ ≤ ≥ ± × ÷", "𝔸𝕓𝒸𝓭𝖊",
        "x₁ + x₂ = y³", "∫₀¹ f(x) dx", "∂f/∂x", "A ⊂ B ∪ C ∩ D", "¬(p ∧ q) ⇔ ¬p ∨ ¬q", "ℵ₀ < 𝔠",
        "E = mc²", "f(x) = ax^2 + bx + c", "$\\frac{a}{b}$", "⌈x⌉ ⌊y⌋", "→ ← ↑ ↓ ↔", "°C °F ‰ ‱"]
CODE = ["def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
        "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }", "const f = (a, b) => a ?? b;",
        "if x != None and y >= 0:\n        pass", "    indented\n        more\n\t\ttabs", "}\n\n\n",
        '{"key": "value", "n": [1, 2, 3], "ok": true}', "<div class=\"a\">Hello &amp; bye</div>",
        "SELECT * FROM t WHERE id = 1;", "ls -la | grep '^d' && echo \"done\"", "re.compile(r'\\s+\\d{3}')",
        "x += 1; y -= 2; z *= 3; w //= 4", "a->b, c::d, e.f()", "std::vector<std::string> v{};",
        "// comment\n/* block */\n# hash", "fn main() { println!(\"{}\", 1); }", "@decorator\nclass A(B):",
        "$ sudo apt-get install -y foo", "C:\\Windows\\System32\\drivers", "/usr/local/bin/python3",
        "`backticks` and ~tilde~ and ^caret^", "[link](http://a.b/c) **bold** _it_", "a_b_c __init__"]
URLS = ["https://example.com/path?q=1&r=2#frag", "http://www.example.org:8080/a/b/c.html",
        "mailto:user@example.com", "user.name+tag@sub.example.co.uk", "ftp://ftp.example.net/pub/",
        "https://ja.wikipedia.org/wiki/日本", "https://xn--n3h.com/☃", "www.EXAMPLE.com/ÄÖÜ?x=%20y",
        "git@github.com:owner/repo.git", "file:///home/user/a%20b.txt"]
LONG = ["Pneumonoultramicroscopicsilicovolcanoconiosis", "Donaudampfschifffahrtsgesellschaftskapitän",
        "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch", "a" * 300, "Z" * 257,
        "antidisestablishmentarianism " * 5, "中" * 200, "😀" * 100, "ab1" * 150, "-" * 80, "=" * 100,
        "." * 64, "_" * 50, "\u0301" * 10, "xX" * 200, "supercalifragilisticexpialidocious" * 3]
MIXED = ["Hello世界Привет🌍مرحبا", "naïve café résumé", "Ελληνικά κείμενο", "नमस्ते दुनिया", "สวัสดีครับ",
         "ქართული", "Հայերեն", "ሰላም ልዑል", "ᏣᎳᎩ", "Tiếng Việt có dấu", "Ǆemal ǅemal ǆemal", "ẞ ß SS",
         "İstanbul ıi Iİ", "Straße STRASSE", "ﬃ ﬄ ﬅ", "ǰ̌", "ΐ ΰ", "ŉ", "Ꭰꭰ", "𐐀𐐨", "ᲐᲑᲒ", "ⓐⓑⓒ Ⓐ",
         "ÀÉÎÕÜ àéîõü", "Łódź Ğüşöç", "Ｈｅｌｌｏ　Ｗｏｒｌｄ", "Ⅻ ⅻ", "ʰʲʷ ᵃᵇ", "ꜰᴜʟʟ", "𝐁𝐨𝐥𝐝 𝑰𝒕𝒂𝒍𝒊𝒄"]
ADDED_AS_TEXT = ["<|endoftext|>", "before<|endoftext|>after", "<|im_start|>user\nhi<|im_end|>",
                 "<|begin_of_text|>Hello", "text <|end_of_text|>", "<|eot_id|>", "<s>", "</s>", "<unk>",
                 "a <s> b </s> c", "<think>\nhmm\n</think>\n\nanswer", "<tool_call>{}</tool_call>",
                 "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<|endoftext", "|>", "<|", "[INST] hi [/INST]",
                 "<|reserved_special_token_5|>", "<<SYS>>", "<0x41>", "▁", "▁▁hello", "Ġ", "Ċ"]
# Characters assigned after Unicode 14.0 (tagged "newer-unicode" by `classify`): Kawi (15.0),
# CJK Extension H (15.0), Cyrillic modifier letters (15.0), Kannada U+0CF3 (15.0), Garay (16.0).
NEWER = ["\U00011f04\U00011f05\U00011f06", "\U00031350\U00031351 x", "a\U0001e030b", "\u0c95\u0cf3", "\U00010d50\U00010d51"]


def texts(seed):
    fixed, alphabets = gpt2_texts_lists()
    fixed = [t for t in fixed if len(t) <= 1000]
    docs = [PROBE] + fixed + DIGITS + CONTRACTION_WORDS + [f"I said {w} twice" for w in CONTRACTION_WORDS[:20]]
    docs += CJK + EMOJI + COMBINING + SPACES + ODD_SPACE + RTL + MATH + CODE + URLS + LONG + MIXED
    docs += ADDED_AS_TEXT + NEWER
    alphabets = alphabets + ["0123456789 ,.", "'sStTdDmM", "\u0301\u0308\u030a\u0323", "\r\n\t ",
                             "\u0085\ufeff\u00a0\u180e", "👩‍👧🏽🇯🇵", "ｶﾀｶﾅ가각\u1100\u1161", "∑∀ℝ²√", "ſ'"]
    rng = random.Random(seed)
    for _ in range(350):
        n = rng.choice([1, 2, 3, 5, 8, 13, 30])
        docs.append("".join("".join(rng.choice(a) for _ in range(rng.randint(1, 10)))
                            for a in (rng.choice(alphabets) for _ in range(n))))
    seen, out = set(), []
    for d in docs:
        if d and d not in seen:
            seen.add(d)
            out.append(d)
    return out


def classify(text):
    """Why a text may split differently in JavaScript and in Oniguruma: the characters that can
    cause it (the test's classes come from the engines' actual pieces; these name the reason)."""
    why = []
    if "\u017f" in text:
        why.append("U+017F LONG S: Oniguruma's (?i:'s) matches it (Unicode case folding), tokenizers.js's ASCII-only (?i) does not")
    if "\x85" in text or "\ufeff" in text:
        why.append("U+0085 / U+FEFF: JavaScript's \\s (which ByteLevel's own regex in tokenizers.js uses) and Oniguruma's differ")
    if any(unicodedata.category(c) == "Cn" for c in text):
        why.append(f"a character unassigned in Unicode {unicodedata.unidata_version} (Oniguruma 6.9.8's tables), "
                   "a letter or digit in Node's")
    return why or ["other"]


class Onig:
    """Oniguruma 6.9.x through ctypes, as Hugging Face's tokenizers (onig crate) compiles a pattern."""

    class Region(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_int), ("num_regs", ctypes.c_int), ("beg", ctypes.POINTER(ctypes.c_int)),
                    ("end", ctypes.POINTER(ctypes.c_int)), ("history_root", ctypes.c_void_p)]

    class ErrorInfo(ctypes.Structure):
        _fields_ = [("enc", ctypes.c_void_p), ("par", ctypes.c_void_p), ("par_end", ctypes.c_void_p)]

    def __init__(self):
        lib = ctypes.CDLL("libonig.so.5")
        self.lib = lib
        self.utf8 = ctypes.addressof(ctypes.c_char.in_dll(lib, "OnigEncodingUTF8"))
        self.syntax = ctypes.c_void_p.in_dll(lib, "OnigDefaultSyntax").value  # onig::Syntax::default()
        lib.onig_version.restype = ctypes.c_char_p
        self.version = lib.onig_version().decode()
        if lib.onig_initialize((ctypes.c_void_p * 1)(self.utf8), 1) != 0:
            raise RuntimeError("onig_initialize failed")
        lib.onig_new.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(Onig.ErrorInfo)]
        lib.onig_search.argtypes = [ctypes.c_void_p] * 5 + [ctypes.POINTER(Onig.Region), ctypes.c_uint]
        lib.onig_region_new.restype = ctypes.POINTER(Onig.Region)
        lib.onig_error_code_to_str.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(Onig.ErrorInfo)]
        self.region = lib.onig_region_new()

    def compile(self, pattern):
        p = pattern.encode("utf-8")
        buf = ctypes.create_string_buffer(p, len(p) + 1)
        reg, info = ctypes.c_void_p(), Onig.ErrorInfo()
        rc = self.lib.onig_new(ctypes.byref(reg), ctypes.addressof(buf), ctypes.addressof(buf) + len(p), 0,
                               self.utf8, self.syntax, ctypes.byref(info))
        if rc != 0:
            msg = ctypes.create_string_buffer(256)
            self.lib.onig_error_code_to_str(msg, rc, ctypes.byref(info))
            raise ValueError(f"Oniguruma cannot compile {pattern!r}: {msg.value.decode()}")
        return reg

    def split_isolated(self, reg, text):
        """Pieces of text: each match and each gap (Split, behavior Isolated; empty pieces dropped)."""
        t = text.encode("utf-8")
        buf = ctypes.create_string_buffer(t, len(t) + 1)
        s = ctypes.addressof(buf)
        e = s + len(t)
        pieces, pos, last = [], 0, 0
        while pos <= len(t):
            if self.lib.onig_search(reg, s, e, s + pos, e, self.region, 0) < 0:
                break
            b, en = self.region.contents.beg[0], self.region.contents.end[0]
            if b > last:
                pieces.append(t[last:b])
            if en > b:
                pieces.append(t[b:en])
                last = pos = en
            else:  # an empty match: the onig crate's find_iter steps over one character
                pos = en + (1 if en == len(t) or t[en] < 0xC0 else 2 if t[en] < 0xE0 else 3 if t[en] < 0xF0 else 4)
        if last < len(t):
            pieces.append(t[last:])
        return [p.decode("utf-8") for p in pieces]


def onig_split():
    req = json.load(sys.stdin)
    try:
        onig = Onig()
        regs = [onig.compile(p) for p in req["patterns"]]
    except (OSError, ValueError, RuntimeError) as e:
        json.dump({"error": str(e)}, sys.stdout)
        return
    out = []
    for text in req["texts"]:
        pieces = [text]
        for reg in regs:
            pieces = [q for p in pieces for q in onig.split_isolated(reg, p)]
        out.append(pieces)
    json.dump({"pieces": out, "version": onig.version}, sys.stdout, ensure_ascii=False)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "onig-split":
        onig_split()
    elif len(sys.argv) == 4 and sys.argv[1] == "texts":
        docs = texts(int(sys.argv[3]))
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump(docs, f, ensure_ascii=False)
        with open(os.path.splitext(sys.argv[2])[0] + ".jsonl", "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
        print(f"{len(docs)} texts, {sum(len(d.encode()) for d in docs)} bytes")
    elif len(sys.argv) == 3 and sys.argv[1] == "classify":
        for i, t in enumerate(json.load(open(sys.argv[2], encoding="utf-8"))):
            why = classify(t)
            if why != ["other"]:
                print(i, json.dumps(t[:40], ensure_ascii=False), "; ".join(why))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
