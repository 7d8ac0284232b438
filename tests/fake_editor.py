"""An $EDITOR for the `edit` tests, run by click as a real program.

Each call keeps a copy of what it was shown (shown-NN.txt in FAKE_EDITOR_DIR), then does what
step NN of steps.json says:
  {"replace": [OLD, NEW]}  replace text, as an operator typing would, and save;
  {"write": TEXT}           save TEXT instead;
  {"quit": true}            close without saving;
and, with "meanwhile_sql": SQL, runs SQL on PAYRAIL_DATABASE_URL first (another operator's save).
Without a step for this call it quits.
"""

import json
import os
import sys
from pathlib import Path

directory = Path(os.environ["FAKE_EDITOR_DIR"])
path = Path(sys.argv[-1])
call = len(list(directory.glob("shown-*.txt")))
(directory / f"shown-{call:02d}.txt").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
steps = json.loads((directory / "steps.json").read_text(encoding="utf-8"))
step = steps[call] if call < len(steps) else {"quit": True}

if "meanwhile_sql" in step:
    import psycopg  # only here: importing it was most of each call's time

    with psycopg.connect(os.environ["PAYRAIL_DATABASE_URL"]) as conn:
        conn.execute(step["meanwhile_sql"])
if "replace" in step:
    old, new = step["replace"]
    text = path.read_text(encoding="utf-8")
    if old not in text:
        sys.exit(f"fake editor: {old!r} is not in the text shown")
    path.write_text(text.replace(old, new), encoding="utf-8")
elif "write" in step:
    path.write_text(step["write"], encoding="utf-8")
