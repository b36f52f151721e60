"""Runs many exported ShardLab scripts in this one Python process (JAX is imported once).

    python run_scripts.py JOBS.json RESULTS.json

JOBS.json lists {"script": path, "args": [...]}; RESULTS.json gets, per job in order,
{"output": <the script's JSON line>} or {"error": <traceback>}.
"""
import contextlib
import io
import json
import os
import runpy
import sys
import traceback

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

jobs = json.load(open(sys.argv[1]))
results = []
for job in jobs:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            module = runpy.run_path(job["script"], run_name="shardlab_export_case")
            module["main"](job["args"])
        lines = [l for l in out.getvalue().splitlines() if l.startswith("{")]
        results.append({"output": json.loads(lines[-1])})
    except BaseException:  # a script's SystemExit too: report it, run the rest
        results.append({"error": traceback.format_exc() + out.getvalue()})
json.dump(results, open(sys.argv[2], "w"))
