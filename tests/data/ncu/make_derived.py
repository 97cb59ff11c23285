"""Write DERIVED-renamed-missing.full.raw.csv from the real H200 raw export (derived test data).

Run from this folder: ``python make_derived.py``. Every change is listed in CHANGES below; the
result is not a measurement, only the real export with metrics renamed, dropped or spoiled, as a
future ncu version or another architecture could export them.
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "chunk_rwkv6_bwd_B4_T2048_H16_D128.full.raw.csv"
TARGET = HERE / "DERIVED-renamed-missing.full.raw.csv"
RENAME = {"gpu__time_duration.sum": "gpu__time_duration_renamed.sum"}
DROP = ("dram__bytes_read.sum",)
DROP_PREFIX = ("smsp__pcsamp_warps_issue_stalled_",)
NOT_A_NUMBER = ("launch__registers_per_thread",)
UNIT = {"lts__t_sector_hit_rate.pct": "ratio"}
CHANGES = [f"renamed {a} -> {b}" for a, b in RENAME.items()] + [f"dropped {d}" for d in DROP] + \
    [f"dropped every {p}* column" for p in DROP_PREFIX] + [f"value 'n/a' in {n}" for n in NOT_A_NUMBER] + \
    [f"unit of {k} set to '{v}'" for k, v in UNIT.items()]


def main() -> None:
    rows = list(csv.reader(SOURCE.open(newline="")))
    header, units, data = rows[0], rows[1], rows[2:]
    keep = [i for i, name in enumerate(header) if name not in DROP and not name.startswith(DROP_PREFIX)]
    out_header = [RENAME.get(header[i], header[i]) for i in keep]
    out_units = [UNIT.get(header[i], units[i]) for i in keep]
    out_data = [["n/a" if header[i] in NOT_A_NUMBER else row[i] for i in keep] for row in data]
    with TARGET.open("w", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        w.writerows([out_header, out_units, *out_data])
    print("\n".join(CHANGES))


if __name__ == "__main__":
    main()
