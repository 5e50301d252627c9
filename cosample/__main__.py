from cosample.cli import main

raise SystemExit(main())
