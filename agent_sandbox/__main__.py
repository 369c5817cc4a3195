from agent_sandbox.cli import main

raise SystemExit(main())
