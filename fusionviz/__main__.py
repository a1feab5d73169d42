from fusionviz.cli import main

raise SystemExit(main())
