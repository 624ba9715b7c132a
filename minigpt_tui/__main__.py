import os
import sys

from minigpt_tui.cli import main

code = main()
if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
    # A rank of a process group ends here without the interpreter's teardown: destroying
    # gloo's objects during finalization aborted about one rank in ten ("terminate called
    # without an active exception") after the run had finished and saved.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
raise SystemExit(code)
