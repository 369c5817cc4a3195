"""Programs the tests run inside a sandbox (`python3 -c SCRIPT ARGS`) whose
output is what the test checks.

WRITE_SCRIPT tries to write "planted" into each path of its arguments and
prints, as JSON, "written" or the errno's name for each."""
from __future__ import annotations

WRITE_SCRIPT = """
import errno, json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "w") as handle:
            handle.write("planted")
        out[path] = "written"
    except OSError as exc:
        out[path] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""
