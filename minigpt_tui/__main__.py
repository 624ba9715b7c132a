from minigpt_tui.cli import main

raise SystemExit(main())
