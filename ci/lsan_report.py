"""Reads the LeakSanitizer logs of `ci/sanitize.sh leaks` and fails on op_plugin's leaks.

    python ci/lsan_report.py LOG_DIR

A leak report whose allocation stack has a frame of op_plugin (the extension op_plugin/_C*.so, or
a source file under csrc/ or build/generated/bindings/) is op_plugin's and fails the run; the
others were allocated by CPython or torch themselves (kept alive until exit by design) and are
only counted. Any ASan or UBSan error in the logs fails the run too, and so does a report LSan
cut short (over 5000 leaks).
"""
from __future__ import annotations

import glob
import os
import re
import sys

OURS = re.compile(r"op_plugin/_C[.\w-]*\.so|/csrc/|/generated/bindings/")
LEAK = re.compile(r"^(Direct|Indirect) leak of (\d+) byte", re.M)


def main(log_dir: str) -> int:
    logs = sorted(glob.glob(os.path.join(log_dir, "report*")))
    ours, others, others_bytes, errors = [], 0, 0, []
    for path in logs:
        text = open(path, errors="replace").read()
        # "Too many leaks!": LSan stopped at 5000 reports, so the rest went unchecked
        errors += [f"{path}: {line}" for line in text.splitlines()
                   if "ERROR: AddressSanitizer" in line or "runtime error:" in line or "Too many leaks" in line]
        # each report: a "Direct/Indirect leak of N byte(s) ..." line and its stack, up to a blank line
        for block in re.split(r"\n\s*\n", text):
            m = LEAK.search(block)
            if not m:
                continue
            if OURS.search(block):
                ours.append(block.strip())
            else:
                others += 1
                others_bytes += int(m.group(2))
    print(f"lsan: {len(logs)} log(s); {len(ours)} leak(s) with an op_plugin frame; {others} leak(s) "
          f"({others_bytes} bytes) allocated by CPython/torch alone; {len(errors)} ASan/UBSan error(s) or cut reports")
    for block in ours[:10]:
        print(block, end="\n\n")
    for line in errors[:10]:
        print(line)
    return 1 if ours or errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
