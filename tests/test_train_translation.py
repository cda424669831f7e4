"""tools/train_translation.py: the held-out split has no shared chapter and no verbatim twin."""

from tools.train_translation import MAX_WORDS, MIN_WORDS, N_DEV, N_TEST, split_by_chapter


def make_pairs(n_chapters=120, n_verses=20):
    pairs = []
    for c in range(n_chapters):
        for v in range(n_verses):
            if v == 0 and c % 4 == 0:  # a refrain that recurs in every fourth chapter
                es, en = "y fue la tarde y la mañana", "and the evening and the morning were"
            else:
                es, en = f"palabra {c} {v} de la ley", f"word {c} {v} of the law"
            pairs.append(("Gen" if c < 60 else "Exod", c % 60 + 1, v + 1, es, en))
    pairs.append(("Exod", 1, 99, "uno dos", "one two"))  # too short: dropped everywhere
    return pairs


def test_split_holds_out_whole_chapters_without_twins():
    train, dev, test = split_by_chapter(make_pairs())
    assert len(test) == N_TEST and 0.9 * N_DEV < len(dev) <= N_DEV  # dev: chapters, twins out
    chapters = lambda ps: {(p[0], p[1]) for p in ps}  # noqa: E731
    assert not chapters(train) & chapters(test) and not chapters(train) & chapters(dev)
    assert not chapters(dev) & chapters(test)
    seen = {p[3] for p in train} | {p[4] for p in train}
    assert not any(p[3] in seen or p[4] in seen for p in dev + test)
    assert all(MIN_WORDS <= len(p[4].split()) <= MAX_WORDS for p in train + dev + test)


def test_split_is_seeded():
    pairs = make_pairs()
    assert split_by_chapter(pairs) == split_by_chapter(pairs)
    assert split_by_chapter(pairs, seed=1)[2] != split_by_chapter(pairs)[2]
