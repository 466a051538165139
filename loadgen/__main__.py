from loadgen.cli.main import main

raise SystemExit(main())
