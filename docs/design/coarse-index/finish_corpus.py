"""Rows >= KEEP_FULL are cut to their first WORDS words (CPU contention made full snippets too
slow to embed); duplicates after cutting are replaced by unused snippets from the same pool."""
import json
KEEP_FULL, WORDS, N = 16000, 12, 100_000
rows = [json.loads(l) for l in open("corpus_texts_full.jsonl")]
extra = [json.loads(l) for l in open("extra_texts.jsonl")]
norm = lambda t: " ".join(t.lower().split())
seen = {norm(r["text"]) for r in rows[:KEEP_FULL]}
out = rows[:KEEP_FULL]
def cut(r):
    return {"text": " ".join(r["text"].split()[:WORDS]), "source": r["source"], "cut_to_words": WORDS}
src = iter(rows[KEEP_FULL:] + extra)
replaced = 0
for r in src:
    if len(out) >= N:
        break
    c = cut(r)
    key = norm(c["text"])
    if key in seen or len(c["text"].split()) < 4:
        replaced += 1
        continue
    seen.add(key)
    out.append(c)
print(len(out), "rows; skipped duplicates after cutting:", replaced)
with open("corpus_texts.jsonl", "w") as f:
    for r in out:
        f.write(json.dumps(r) + "\n")
