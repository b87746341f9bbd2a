from vocabtransfer.cli import main

raise SystemExit(main())
