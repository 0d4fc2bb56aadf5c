"""``python -m dico.bench ...``: the benchmark's command line (see ``dico.bench.cli``)."""
from dico.bench.cli import main

raise SystemExit(main())
