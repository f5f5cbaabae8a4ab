#!/usr/bin/env python3
"""Prepare the training corpus of the kvcomp default model from Debian's King James Bible.

Debian's `bible-kjv-text` package ships the KJV (public domain, translated 1611) in a compressed
"EC02" format (/usr/lib/bible.data) that only the package's own reader decodes, so we let that reader
(`bible`, package `bible-kjv`) print every verse, one per line, as `<Book><chapter>:<verse> <text>`:

    Ge1:1 In the beginning God created the heaven and the earth.

The output is plain 7-bit ASCII (the whole text is), 31,102 verses, ~4.4 MB. Whole chapters are split
off deterministically for held-out perplexity: chapter number c (0-based, counted over the whole
Bible) is held out when c % HELDOUT_EVERY == HELDOUT_PHASE, i.e. ~1 chapter in 40, spread over every
book, so the held-out text is never seen in training yet comes from the same distribution.

    apt-get install -y bible-kjv      # pulls bible-kjv-text
    python3 tools/model/corpus.py     # writes tools/model/data/kjv_{train,heldout}.txt

No torch needed. `--from-file` takes a verse-per-line dump made elsewhere (same format) instead.
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys

HELDOUT_EVERY = 40
HELDOUT_PHASE = 7
# Genesis 1:1 through Revelation 22:21 is the whole book in the reader's verse-spec syntax.
FULL_RANGE = "gen1:1-rev22:21"
# "<book abbreviation><chapter>:<verse> <text>"; book abbreviations may start with a digit (1Sa, 2Ki).
VERSE_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.+)$")
EXPECTED_VERSES = 31102  # the Protestant KJV canon; a different count means the dump is broken


def dump_with_reader(bible_exe):
    """Runs Debian's `bible` reader in verse-per-line mode (-f) over the whole text."""
    out = subprocess.run([bible_exe, "-f", FULL_RANGE], check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=dict(os.environ, COLUMNS="100000"))
    return out.stdout.decode("ascii")


def split_verses(text):
    """Returns [(chapter_key, line)] in book order; raises on any line that is not a verse."""
    verses = []
    for n, line in enumerate(text.splitlines()):
        line = line.rstrip()
        if not line:
            continue
        m = VERSE_RE.match(line)
        if not m:
            raise ValueError("line %d is not '<Book><ch>:<v> text': %r" % (n + 1, line[:80]))
        verses.append(((m.group(1), int(m.group(2))), line))
    return verses


def split_train_heldout(verses):
    train, heldout = [], []
    chapter_index, prev_key = -1, None
    for key, line in verses:
        if key != prev_key:
            chapter_index, prev_key = chapter_index + 1, key
        (heldout if chapter_index % HELDOUT_EVERY == HELDOUT_PHASE else train).append(line)
    return train, heldout, chapter_index + 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bible", default="bible", help="path of Debian's `bible` reader")
    ap.add_argument("--from-file", help="verse-per-line dump to use instead of running the reader")
    ap.add_argument("--out-dir", default=os.path.join(here, "data"))
    args = ap.parse_args()

    text = open(args.from_file, encoding="ascii").read() if args.from_file else dump_with_reader(args.bible)
    verses = split_verses(text)
    if len(verses) != EXPECTED_VERSES:
        sys.exit("expected %d verses, got %d: is the dump complete?" % (EXPECTED_VERSES, len(verses)))
    train, heldout, n_chapters = split_train_heldout(verses)

    os.makedirs(args.out_dir, exist_ok=True)
    for name, lines in (("kjv_train.txt", train), ("kjv_heldout.txt", heldout)):
        data = ("\n".join(lines) + "\n").encode("ascii")
        path = os.path.join(args.out_dir, name)
        with open(path, "wb") as f:
            f.write(data)
        print("%-16s %6d verses %9d bytes sha256 %s" % (name, len(lines), len(data),
                                                      hashlib.sha256(data).hexdigest()[:16]))
    print("chapters: %d (held out: every %dth, phase %d)" % (n_chapters, HELDOUT_EVERY, HELDOUT_PHASE))


if __name__ == "__main__":
    main()
