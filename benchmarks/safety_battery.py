"""The safety battery (issue 35): bad input and hostile services against the real ``irflow`` command.

Every case runs ``python -m irflow.cli ...`` as a subprocess in its own temporary folder (cache, MLflow sqlite
store, Prefect home), under ``RLIMIT_AS`` = 8 GiB and a wall-time limit, beside a hostile service on 127.0.0.1
where it needs one (stopped by its PID), and checks: the exit code (non-zero where it must fail, 0 where a
partial success is expected), no traceback, an error naming the file, field, option or limit, no planted
credential (``sk-battery-SECRET``, ``u:S3cret`` and its ``Basic`` base64) in the output or any file written, no
process left behind (this process is a child subreaper), peak memory under the case's cap, and a healthy
system's finished result kept in ``metrics.json`` beside a failing one. The cases: ``battery/cases_input.py``
(credentials in URLs, unbounded and non-regular files, bad input) and ``battery/cases_services.py`` (hostile
services for ``http:`` systems and the LLM paths, SIGTERM mid-run, a crashing plugin).

    python benchmarks/safety_battery.py [--only SUBSTRING]... [--list] [--keep DIR]

Writes ``benchmarks/results/safety_battery.json`` (per case: name, category, exit_code, seconds, peak_mb,
findings; totals), atomically; exits 1 when any case has a finding.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from battery import cases_input, cases_services
from battery.harness import become_subreaper, run_case, totals

RESULTS = Path(__file__).parent / "results" / "safety_battery.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run the cases whose name holds this")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--keep", type=Path, help="keep every case's folder under this one (default: removed)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    cases = [*cases_input.cases(), *cases_services.cases()]
    if args.only:
        cases = [c for c in cases if any(o in c.name for o in args.only)]
    if args.list:
        print("\n".join(f"{c.category:18} {c.name}" for c in cases))
        return 0
    become_subreaper()
    root = Path(tempfile.mkdtemp(prefix="irflow-battery-", dir=args.keep))
    records, began = [], time.monotonic()
    try:
        for number, case in enumerate(cases, 1):
            record = run_case(case, root)
            records.append(record)
            mark = "ok " if not record["findings"] else "FINDINGS"
            print(
                f"[{number:2}/{len(cases)}] {mark} {record['seconds']:6.1f} s {record['peak_mb']:7.0f} MB  "
                f"exit {record['exit_code']:3}  {case.name}",
                flush=True,
            )
            for finding in record["findings"]:
                print(f"      {finding['kind']}: {finding['detail']}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    document = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.platform()},
        "seconds": round(time.monotonic() - began, 1),
        "totals": totals(records),
        "cases": records,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_name(args.output.name + ".tmp")
    partial.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, args.output)
    print(json.dumps(document["totals"]), f"in {document['seconds']:.0f} s -> {args.output}")
    return 1 if any(r["findings"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
