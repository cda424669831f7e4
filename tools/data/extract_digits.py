"""Copy the 8x8 handwritten digits (notebook 18) out of a scikit-learn wheel into `data/`.

scikit-learn bundles the UCI "Optical Recognition of Handwritten Digits" test set (1,797
images, 8x8 pixels of 0..16, the digit in the 65th column) as `digits.csv.gz`. The book does
not depend on scikit-learn: the file is read from the wheel (a zip) and written unchanged, so
the committed bytes are the wheel's bytes and their sha256 says so:

    python -m pip download scikit-learn==1.9.1 --no-deps --only-binary=:all: -d /tmp/skl
    python tools/data/extract_digits.py /tmp/skl/scikit_learn-1.9.1-*.whl

`--report` prints the counts per digit and the number of duplicate images.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MEMBER = "sklearn/datasets/data/digits.csv.gz"
OUT = ROOT / "data" / "digits.csv.gz"
SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel", type=Path, help="a scikit-learn wheel (1.9.1 was used)")
    parser.add_argument("--report", action="store_true", help="print counts and duplicates")
    args = parser.parse_args()
    with zipfile.ZipFile(args.wheel) as wheel:
        data = wheel.read(MEMBER)
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"{MEMBER} in {args.wheel}: expected sha256 {SHA256}, got {digest}")
    OUT.write_bytes(data)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(data):,} bytes, sha256 {digest})")
    if args.report:
        rows = gzip.decompress(data).decode("ascii").split()
        labels = Counter(row.rsplit(",", 1)[1] for row in rows)
        images = Counter(row.rsplit(",", 1)[0] for row in rows)
        print(f"{len(rows):,} images; per digit: {dict(sorted(labels.items()))}")
        print(f"images that occur more than once: {sum(n > 1 for n in images.values())}")


if __name__ == "__main__":
    main()
