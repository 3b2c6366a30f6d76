from sand.cli.main import main

raise SystemExit(main())
