"""Which per-record path the library runs: the C extension ksidecar._speedups when the
package was built with it (pip builds it with the system's C compiler; without one the
package installs without it), else pure Python. KSIDECAR_TEST_PURE_PYTHON=1 (any value but
"" and "0") forces pure Python, read at import; the name is in the KSIDECAR_TEST_ space that
ksidecar itself skips (it refuses other KSIDECAR_ variables it does not know), so a server
started from the same environment still starts. The pure-Python code is the reference: the
extension does the same, and the tests run against both."""
import os

speedups = None
if os.environ.get("KSIDECAR_TEST_PURE_PYTHON", "") in ("", "0"):
    try:
        from . import _speedups as speedups
    except ImportError:  # built without a C compiler: the pure-Python path
        speedups = None


def active():
    """"c" when the extension runs the per-record path, "python" when pure Python does."""
    return "python" if speedups is None else "c"
