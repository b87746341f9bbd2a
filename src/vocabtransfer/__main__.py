from vocabtransfer.app.cli import main

raise SystemExit(main())
